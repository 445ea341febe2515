import { readdir, readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import type { ClickHouseClient } from '@clickhouse/client'

const SQL_DIR = fileURLToPath(new URL('../../sql/', import.meta.url))

export interface Migration {
  version: number
  name: string
  statements: string[]
}

/** sql/NNNN_name.sql files in order; statements split on a `;` that ends a line. */
export async function readMigrations(dir = SQL_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d{4}_.+\.sql$/.test(f)).sort()
  return Promise.all(
    files.map(async (file) => {
      const text = await readFile(`${dir}/${file}`, 'utf8')
      const statements = text
        .split(/;\s*$/m)
        .map((s) => s.replace(/^\s*--.*$/gm, '').trim())
        .filter((s) => s.length > 0)
      return { version: Number(file.slice(0, 4)), name: file.replace(/\.sql$/, ''), statements }
    }),
  )
}

/**
 * Applies what schema_migrations does not list yet, in order, and records each one.
 * Statements are idempotent (IF NOT EXISTS), so a crash between a statement and its
 * record is repaired by running again. Returns the names it applied.
 */
export async function migrate(client: ClickHouseClient, dir = SQL_DIR): Promise<string[]> {
  await client.command({
    query: `CREATE TABLE IF NOT EXISTS schema_migrations
            (version UInt32, name String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))
            ENGINE = ReplacingMergeTree ORDER BY version`,
  })
  const rs = await client.query({ query: 'SELECT version FROM schema_migrations', format: 'JSONEachRow' })
  const done = new Set((await rs.json<{ version: number }>()).map((r) => Number(r.version)))
  const applied: string[] = []
  for (const m of await readMigrations(dir)) {
    if (done.has(m.version)) continue
    for (const statement of m.statements) await client.command({ query: statement })
    await client.insert({ table: 'schema_migrations', values: [{ version: m.version, name: m.name }], format: 'JSONEachRow' })
    applied.push(m.name)
  }
  return applied
}
