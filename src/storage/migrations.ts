import { readdir, readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import type { ClickHouseClient } from '@clickhouse/client'
import { ensureTable, insert } from './query.ts'
import { acquireSchemaLock, type SchemaLockOptions } from './schema-lock.ts'

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
 * ClickHouse records a migration this release does not ship: a newer release applied it.
 * Migrations are forward-only, and this code would run on a schema it does not know: it
 * refuses, having changed nothing.
 */
export class SchemaTooNewError extends Error {
  readonly newestKnown: string | null
  readonly found: string

  constructor(newestKnown: string | null, found: string) {
    super(
      `ClickHouse holds a schema from a newer burnrate: migration ${found} is recorded in schema_migrations, and the newest ` +
        `this release knows is ${newestKnown ?? 'none'}. A downgrade is refused: run the release that applied ${found} or a later one ` +
        '(to go back, restore a backup made before the upgrade)',
    )
    this.name = 'SchemaTooNewError'
    this.newestKnown = newestKnown
    this.found = found
  }
}

export interface MigrationStatus {
  /** What schema_migrations records, by version: its name (empty before the first migration). */
  recorded: Map<number, string>
  /** The shipped migrations it does not record, in order: what migrate() would apply. */
  pending: Migration[]
}

/**
 * What the schema is against the migrations in `dir`, read without writing anything: a
 * database with no schema_migrations table has every migration pending. Throws
 * SchemaTooNewError when a recorded migration is not among those shipped.
 */
export async function migrationStatus(client: ClickHouseClient, dir = SQL_DIR): Promise<MigrationStatus> {
  const shipped = await readMigrations(dir)
  const recorded = await recordedMigrations(client)
  const known = new Set(shipped.map((m) => m.version))
  const unknown = [...recorded.keys()].filter((v) => !known.has(v)).sort((a, b) => b - a)
  if (unknown.length > 0) {
    const found = unknown[0]!
    throw new SchemaTooNewError(shipped.at(-1)?.name ?? null, recorded.get(found) || String(found).padStart(4, '0'))
  }
  return { recorded, pending: shipped.filter((m) => !recorded.has(m.version)) }
}

async function recordedMigrations(client: ClickHouseClient): Promise<Map<number, string>> {
  const exists = await client.query({ query: 'EXISTS TABLE schema_migrations', format: 'JSONEachRow' })
  const [row] = await exists.json<{ result: number | string }>()
  if (Number(row?.result) !== 1) return new Map()
  const rs = await client.query({ query: 'SELECT version, name FROM schema_migrations', format: 'JSONEachRow' })
  return new Map((await rs.json<{ version: number | string; name: string }>()).map((r) => [Number(r.version), r.name]))
}

export interface MigrateOptions {
  /** The schema lock (schema-lock.ts): its lease, poll interval, and who waits. */
  lock?: SchemaLockOptions
}

/**
 * Applies what schema_migrations does not list yet, in order, and records each one; returns
 * the names it applied. Forward-only: a recorded migration this code does not ship refuses
 * (SchemaTooNewError) before anything is written.
 *
 * Several instances may start at once on one ClickHouse: with migrations pending, each takes
 * the schema lock, and the one that gets it applies them while the others wait for it, then
 * find nothing left to do. Statements are idempotent (IF NOT EXISTS), so a crash between a
 * statement and its record (or a holder whose lease ran out) is repaired by running again.
 */
export async function migrate(client: ClickHouseClient, dir = SQL_DIR, opts: MigrateOptions = {}): Promise<string[]> {
  // An instance restarting on an up-to-date schema writes nothing and takes no lock.
  if ((await migrationStatus(client, dir)).pending.length === 0) return []
  await ensureTable(
    client,
    `CREATE TABLE IF NOT EXISTS schema_migrations
     (version UInt32, name String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))
     ENGINE = ReplacingMergeTree ORDER BY version`,
  )
  const lock = await acquireSchemaLock(client, opts.lock)
  let failure: unknown = null
  try {
    // Read again under the lock: the previous holder may have applied some or all of them.
    const { pending } = await migrationStatus(client, dir)
    const applied: string[] = []
    for (const m of pending) {
      for (const statement of m.statements) {
        lock.check()
        await client.command({ query: statement })
      }
      lock.check()
      await insert(client, 'schema_migrations', [{ version: m.version, name: m.name }])
      applied.push(m.name)
    }
    return applied
  } catch (err) {
    failure = err
    throw err
  } finally {
    // When the work failed, that failure is the one to report: a release ClickHouse did not
    // take (it is likely away too) ends with its lease.
    await lock.release().catch((err: unknown) => {
      if (failure === null) throw err
    })
  }
}
