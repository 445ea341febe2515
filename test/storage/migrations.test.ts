import { copyFileSync, mkdtempSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { ClickHouseClient } from '@clickhouse/client'
import { afterEach, describe, expect, it } from 'vitest'
import { createClickHouse, toChDateTime } from '../../src/storage/clickhouse.ts'
import { migrate, migrationStatus, readMigrations, SchemaTooNewError } from '../../src/storage/migrations.ts'
import { acquireSchemaLock } from '../../src/storage/schema-lock.ts'
import { insert } from '../../src/storage/query.ts'
import { startClickHouseServer } from '../helpers/clickhouse-server.ts'
import { startCountingProxy } from '../helpers/counting-proxy.ts'

/**
 * Migrations: forward-only, each statement applied once when instances start at once on one
 * ClickHouse (the schema lock), re-runnable after a crash between a statement and its record,
 * and a schema from a newer release refused before anything is written.
 */

const SQL = fileURLToPath(new URL('../../sql/', import.meta.url))

const stops: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop()
})

/** A fresh ClickHouse behind its HTTP interface (a process of its own), and a client of it. */
async function freshServer(): Promise<{ url: string; client: ClickHouseClient }> {
  const server = await startClickHouseServer()
  const client = createClickHouse({ clickhouse: { kind: 'server', url: server.url }, clickhouseDatabase: 'default' })
  stops.push(async () => {
    await client.close()
    await server.stop()
  })
  return { url: server.url, client }
}

async function rows<T>(client: ClickHouseClient, query: string): Promise<T[]> {
  return (await client.query({ query, format: 'JSONEachRow' })).json<T>()
}

/** Every table of the database and its columns, as text to compare. */
async function schema(client: ClickHouseClient): Promise<string[]> {
  const columns = await rows<{ table: string; name: string; type: string }>(
    client,
    "SELECT table, name, type FROM system.columns WHERE database = currentDatabase() AND table != 'schema_lock' ORDER BY table, position",
  )
  return columns.map((c) => `${c.table}.${c.name} ${c.type}`)
}

async function recorded(client: ClickHouseClient): Promise<number[]> {
  return (await rows<{ version: number }>(client, 'SELECT version FROM schema_migrations FINAL ORDER BY version')).map((r) => Number(r.version))
}

describe('migrate', () => {
  it('applies every migration once, embedded, and then finds nothing to do', async () => {
    const client = createClickHouse({ clickhouse: { kind: 'embedded', path: join(mkdtempSync(join(tmpdir(), 'burnrate-migrate-')), 'clickhouse') }, clickhouseDatabase: 'default' })
    stops.push(() => client.close())
    const shipped = await readMigrations()
    expect(await migrate(client)).toEqual(shipped.map((m) => m.name))
    expect(await recorded(client)).toEqual(shipped.map((m) => m.version))
    expect(await migrate(client)).toEqual([])
    // The lock was taken once and given back.
    const lock = await rows<{ epoch: string; kind: string }>(client, 'SELECT epoch, kind FROM schema_lock ORDER BY epoch, at')
    expect(lock.filter((r) => r.kind !== 'renew')).toEqual([
      { epoch: '1', kind: 'claim' },
      { epoch: '1', kind: 'release' },
    ])
  })

  it('applies each statement once when two instances migrate one fresh ClickHouse at the same moment', async () => {
    const { url } = await freshServer()
    // Each instance through a proxy of its own that keeps the text of every query it sends.
    const proxies = await Promise.all([startCountingProxy(url), startCountingProxy(url)])
    const clients = proxies.map((p) => createClickHouse({ clickhouse: { kind: 'server', url: p.url }, clickhouseDatabase: 'default' }))
    stops.push(async () => {
      await Promise.all(clients.map((c) => c.close()))
      await Promise.all(proxies.map((p) => p.close()))
    })
    const waited: string[] = []
    // A lease shorter than the work: the holder keeps it by renewing it, and the other waits.
    const results = await Promise.all(
      clients.map((c, i) => migrate(c, undefined, { lock: { holder: `instance-${i}`, leaseMs: 1000, pollMs: 20, onWait: (holder) => waited.push(`${i} waits for ${holder}`) } })),
    )

    const shipped = await readMigrations()
    // One applied them all, the other waited for it and found nothing left.
    expect(results.map((r) => r.length).sort((a, b) => a - b)).toEqual([0, shipped.length])
    const winner = results.findIndex((r) => r.length > 0)
    expect(waited).toEqual([`${1 - winner} waits for instance-${winner}`])
    const sent = proxies.flatMap((p) => p.queries)
    for (const m of shipped) {
      for (const statement of m.statements) expect(sent.filter((q) => q.includes(statement)), `${m.name}: ${statement.slice(0, 60)}`).toHaveLength(1)
    }
    expect(proxies[1 - winner]!.queries.some((q) => m(q))).toBe(false)
    expect(await recorded(clients[0]!)).toEqual(shipped.map((m) => m.version))
    const records = await rows<{ n: string }>(clients[0]!, 'SELECT count() AS n FROM schema_migrations')
    expect(Number(records[0]!.n)).toBe(shipped.length)
    const renewals = await rows<{ n: string }>(clients[0]!, "SELECT count() AS n FROM schema_lock WHERE kind = 'renew'")
    expect(Number(renewals[0]!.n)).toBeGreaterThan(0)

    function m(query: string): boolean {
      return shipped.some((migration) => migration.statements.some((s) => query.includes(s)))
    }
  })

  it('stores one claim of an epoch: a second one, sent after it, is dropped by insert deduplication', async () => {
    const { client } = await freshServer()
    const lock = await acquireSchemaLock(client, { holder: 'first' })
    // What a second instance that read the lock free at the same moment as the first sends.
    await insert(client, 'schema_lock', [{ epoch: 1, kind: 'claim', token: 't-second', holder: 'second', expires_at: toChDateTime(Date.now() + 30_000) }], 'schema_lock:claim:1')
    expect(await rows(client, "SELECT holder FROM schema_lock WHERE epoch = 1 AND kind = 'claim'")).toEqual([{ holder: 'first' }])
    await lock.release()
  })

  it('waits out the lease of a holder that died, then applies the migrations', async () => {
    const { client } = await freshServer()
    await client.command({
      query: `CREATE TABLE schema_lock (epoch UInt64, kind Enum8('claim' = 1, 'renew' = 2, 'release' = 3), token String, holder String,
              expires_at DateTime64(3, 'UTC'), at DateTime64(3, 'UTC') DEFAULT now64(3))
              ENGINE = MergeTree ORDER BY epoch SETTINGS non_replicated_deduplication_window = 1000`,
    })
    // A claim of an instance killed while migrating: it will never renew nor release it.
    const expires = Date.now() + 1500
    await client.insert({ table: 'schema_lock', values: [{ epoch: 1, kind: 'claim', token: 't-dead', holder: 'dead-instance', expires_at: toChDateTime(expires) }], format: 'JSONEachRow' })
    const waited: string[] = []
    const applied = await migrate(client, undefined, { lock: { pollMs: 50, onWait: (h) => waited.push(h) } })
    expect(Date.now()).toBeGreaterThanOrEqual(expires - 200) // ClickHouse's clock is this machine's
    expect(waited).toEqual(['dead-instance'])
    expect(applied).toHaveLength((await readMigrations()).length)
  })

  it('re-runs migrations that were applied but not recorded (a crash between a statement and its record)', async () => {
    const { client } = await freshServer()
    const shipped = await readMigrations()
    await migrate(client)
    await client.insert({
      table: 'events',
      values: [{ event_id: '00000000-0000-4000-8000-000000000001', user_id: 'u', agent_id: 'a', event_type: 'llm_call', model: 'gpt-4o', timestamp: toChDateTime(Date.now()), cost_nano: 5 }],
      format: 'JSONEachRow',
    })
    const before = await schema(client)
    // Only the first 16 recorded (what v0.1.0 shipped): every later one ran, none was recorded.
    await client.command({ query: 'TRUNCATE TABLE schema_migrations' })
    await client.insert({ table: 'schema_migrations', values: shipped.slice(0, 16).map((m) => ({ version: m.version, name: m.name })), format: 'JSONEachRow' })
    expect(await migrate(client)).toEqual(shipped.slice(16).map((m) => m.name))
    // And with no record at all: every statement of every migration runs a second time.
    await client.command({ query: 'TRUNCATE TABLE schema_migrations' })
    expect(await migrate(client)).toEqual(shipped.map((m) => m.name))
    expect(await schema(client)).toEqual(before)
    expect(await recorded(client)).toEqual(shipped.map((m) => m.version))
    const events = await rows<{ n: string; cost: string }>(client, 'SELECT count() AS n, sum(cost_nano) AS cost FROM events')
    expect(events).toEqual([{ n: '1', cost: '5' }])
  })

  it('refuses a schema a newer release migrated, naming both versions, and changes nothing', async () => {
    const { client } = await freshServer()
    const shipped = await readMigrations()
    await migrate(client)
    const before = { schema: await schema(client), recorded: await recorded(client) }

    // This release's code with a shorter sql dir is an older release on the newer schema.
    const older = mkdtempSync(join(tmpdir(), 'burnrate-sql-'))
    for (const file of readdirSync(SQL).filter((f) => f < '0011')) copyFileSync(join(SQL, file), join(older, file))
    const refused = await migrate(client, older).catch((err: unknown) => err)
    expect(refused).toBeInstanceOf(SchemaTooNewError)
    expect((refused as SchemaTooNewError).newestKnown).toBe('0010_event_service_tier')
    expect((refused as SchemaTooNewError).found).toBe(shipped.at(-1)!.name)
    expect((refused as Error).message).toContain(`migration ${shipped.at(-1)!.name} is recorded`)
    expect((refused as Error).message).toContain('the newest this release knows is 0010_event_service_tier')
    await expect(migrationStatus(client, older)).rejects.toBeInstanceOf(SchemaTooNewError)

    // A version beyond the last sql/ file, recorded by a release yet to come.
    await client.insert({ table: 'schema_migrations', values: [{ version: 9001, name: '9001_from_the_future' }], format: 'JSONEachRow' })
    const future = await migrate(client).catch((err: unknown) => err)
    expect(future).toBeInstanceOf(SchemaTooNewError)
    expect((future as SchemaTooNewError).newestKnown).toBe(shipped.at(-1)!.name)
    expect((future as SchemaTooNewError).found).toBe('9001_from_the_future')

    expect(await schema(client)).toEqual(before.schema)
    expect(await recorded(client)).toEqual([...before.recorded, 9001])
  })

  it('tells what is pending without writing anything', async () => {
    const { client } = await freshServer()
    const shipped = await readMigrations()
    const fresh = await migrationStatus(client)
    expect(fresh.pending.map((m) => m.name)).toEqual(shipped.map((m) => m.name))
    expect(await rows(client, 'SHOW TABLES')).toEqual([])
    await migrate(client)
    expect((await migrationStatus(client)).pending).toEqual([])
  })
})
