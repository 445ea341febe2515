import { readdirSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startClickHouseServer } from './helpers/clickhouse-server.ts'
import { cleanup, freshDataDir, runCli, startServe } from './helpers/process.ts'

// `burnrate migrate --dry-run` and the refusal of a schema from a newer release, as an
// operator meets them: real processes, ClickHouse embedded or behind its HTTP interface.

afterEach(() => cleanup())

/** The migrations this checkout ships, by name, in order (sql/NNNN_name.sql). */
const SHIPPED = readdirSync(fileURLToPath(new URL('../sql/', import.meta.url)))
  .filter((f) => /^\d{4}_.+\.sql$/.test(f))
  .sort()
  .map((f) => f.replace(/\.sql$/, ''))
const NEWEST = SHIPPED.at(-1)!

let clickhouse: Awaited<ReturnType<typeof startClickHouseServer>>
beforeAll(async () => {
  clickhouse = await startClickHouseServer()
}, 60_000)
afterAll(() => clickhouse?.stop())

/** The rows of a query, straight from the ClickHouse HTTP interface. */
async function query(sql: string): Promise<string> {
  const res = await fetch(`${clickhouse.url}/?query=${encodeURIComponent(sql)}`, { method: 'POST' })
  const text = await res.text()
  if (!res.ok) throw new Error(text)
  return text
}

/** What a dry run must leave as it found it: the tables, their columns, and the records. */
async function state(): Promise<string> {
  return query(
    "SELECT table, groupArray(name) FROM (SELECT table, name FROM system.columns WHERE database = currentDatabase() ORDER BY table, position) GROUP BY table ORDER BY table FORMAT TSV",
  ).then(async (tables) => `${tables}\n${await query('SELECT version, name, applied_at FROM schema_migrations ORDER BY version FORMAT TSV')}`)
}

const server = () => ({ DATA_DIR: freshDataDir(), CLICKHOUSE_URL: clickhouse.url })

describe('burnrate migrate --dry-run', () => {
  it('embedded: lists every migration and its statements on a fresh DATA_DIR, applies none of them', async () => {
    const env = { DATA_DIR: freshDataDir() }
    const dry = await runCli(['migrate', '--dry-run'], env)
    expect(dry).toMatchObject({ code: 0, stderr: '' })
    expect(dry.stdout).toMatch(/^-- 0001_events\n\nCREATE TABLE IF NOT EXISTS events\n/)
    expect(dry.stdout).toContain('-- 0024_record_deduplication\n\nALTER TABLE budget_alerts MODIFY SETTING non_replicated_deduplication_window = 10000;\n')
    expect([...dry.stdout.matchAll(/^-- (\d{4}_\S+)$/gm)].map((m) => m[1])).toEqual(SHIPPED)
    expect(dry.stdout.endsWith(`\n-- ${SHIPPED.length} migrations would be applied (--dry-run: nothing was changed)\n`)).toBe(true)
    // Nothing was applied: migrate applies every one of them, from the first.
    const applied = await runCli(['migrate'], env)
    expect(applied).toMatchObject({ code: 0, stderr: '' })
    expect(applied.stdout).toBe(`applied ${SHIPPED.join(', ')}\n`)
    expect(await runCli(['migrate', '--dry-run'], env)).toEqual({ code: 0, stdout: 'the schema is up to date\n', stderr: '' })
  }, 60_000)

  it('on a ClickHouse server: lists only what is pending, and the tables and schema_migrations are the same after', async () => {
    expect((await runCli(['migrate'], server())).code).toBe(0)
    // As if those from 0023 on were applied by a release that crashed before recording them.
    await query('ALTER TABLE schema_migrations DELETE WHERE version >= 23 SETTINGS mutations_sync = 1')
    const before = await state()
    const dry = await runCli(['migrate', '--dry-run'], server())
    expect(dry).toMatchObject({ code: 0, stderr: '' })
    const names = [...dry.stdout.matchAll(/^-- (\d{4}_\S+)$/gm)].map((m) => m[1])
    const pending = SHIPPED.filter((m) => m >= '0023')
    expect(names).toEqual(pending)
    expect(dry.stdout).toContain('CREATE TABLE IF NOT EXISTS run_stops')
    expect(dry.stdout.endsWith(`\n-- ${pending.length} migrations would be applied (--dry-run: nothing was changed)\n`)).toBe(true)
    expect(await state()).toBe(before)
    // migrate applies exactly those, cleanly, though their statements had run.
    expect(await runCli(['migrate'], server())).toEqual({ code: 0, stdout: `applied ${pending.join(', ')}\n`, stderr: '' })
  }, 60_000)

  it('refuses, exit 1, beside a server running on an embedded DATA_DIR', async () => {
    const dataDir = freshDataDir()
    await startServe(dataDir)
    const r = await runCli(['migrate', '--dry-run'], { DATA_DIR: dataDir })
    expect(r).toMatchObject({ code: 1, stdout: '' })
    expect(r.stderr).toContain(`burnrate migrate: a burnrate server is running on DATA_DIR ${dataDir}`)
  }, 60_000)
})

describe('burnrate migrate, two at once', () => {
  it('two processes migrating one fresh ClickHouse: one applies every migration, the other finds them applied', async () => {
    const fresh = await startClickHouseServer()
    try {
      const env = () => ({ DATA_DIR: freshDataDir(), CLICKHOUSE_URL: fresh.url })
      const runs = await Promise.all([runCli(['migrate'], env()), runCli(['migrate'], env())])
      expect(runs.map((r) => r.code)).toEqual([0, 0])
      expect(runs.map((r) => r.stdout).sort()).toEqual([`applied ${SHIPPED.join(', ')}\n`, 'the schema is up to date\n'])
      const q = (sql: string) => fetch(`${fresh.url}/?query=${encodeURIComponent(sql)}`, { method: 'POST' }).then((r) => r.text())
      expect(await q('SELECT count() FROM schema_migrations')).toBe(`${SHIPPED.length}\n`)
      // Each claim of the lock (the second one's, if it found work pending) was given back.
      const [claims, releases] = (await q("SELECT countIf(kind = 'claim'), countIf(kind = 'release') FROM schema_lock FORMAT CSV")).trim().split(',').map(Number)
      expect(claims).toBeGreaterThanOrEqual(1)
      expect(releases).toBe(claims)
    } finally {
      await fresh.stop()
    }
  }, 60_000)
})

describe('a schema migrated by a newer release', () => {
  it('is refused by migrate, migrate --dry-run and serve, exit 1, naming both versions, and nothing changes', async () => {
    expect((await runCli(['migrate'], server())).code).toBe(0)
    await query("INSERT INTO schema_migrations (version, name) VALUES (9001, '9001_from_a_newer_release')")
    const before = await state()
    const message =
      'ClickHouse holds a schema from a newer burnrate: migration 9001_from_a_newer_release is recorded in schema_migrations, ' +
      `and the newest this release knows is ${NEWEST}. A downgrade is refused`
    for (const args of [['migrate'], ['migrate', '--dry-run']]) {
      const r = await runCli(args, server())
      expect(r, args.join(' ')).toMatchObject({ code: 1, stdout: '' })
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1)
      expect(r.stderr).toContain(`burnrate migrate: ${message}`)
    }
    const serve = await runCli(['serve'], { ...server(), PORT: '0', HOST: '127.0.0.1' })
    expect(serve.code).toBe(1)
    expect(serve.stderr).toContain(message)
    expect(await state()).toBe(before)
    await query('ALTER TABLE schema_migrations DELETE WHERE version = 9001 SETTINGS mutations_sync = 1')
  }, 60_000)
})
