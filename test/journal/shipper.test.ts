import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { ClickHouseClient } from '@clickhouse/client'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SegmentLog } from '../../src/journal/segment-log.ts'
import { Shipper } from '../../src/journal/shipper.ts'
import { RedisJournal } from '../../src/journal/redis-streams.ts'
import type { JournalBatch, JournalSource } from '../../src/journal/types.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { agentTotals, hourlyCost } from '../../src/storage/events.ts'
import type { EventRow } from '../../src/storage/rows.ts'
import { migrate } from '../../src/storage/migrations.ts'
import { startRedis } from '../helpers/redis.ts'
import { eventRow } from '../helpers/rows.ts'

// The shipper against the real engine (chDB) and the real segment log.
const T = Date.UTC(2026, 5, 1, 10, 20, 0)
const log = pino({ level: 'silent' })
let clickhouse: ClickHouseClient
let seq = 0

beforeAll(async () => {
  clickhouse = createClickHouse({ clickhouse: { kind: 'embedded', path: join(mkdtempSync(join(tmpdir(), 'burnrate-ship-')), 'ch') }, clickhouseDatabase: 'default' })
  await migrate(clickhouse)
})
afterAll(() => clickhouse?.close())

function event(agent: string): EventRow {
  const n = ++seq
  return eventRow({ agent_id: agent, at: T + n, event_id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}` })
}

const openLog = (dir: string) => SegmentLog.open({ dir, fsync: false, maxRows: 1_000_000 })
const dir = () => mkdtempSync(join(tmpdir(), 'burnrate-ship-journal-'))

async function stored(agent: string) {
  const [totals] = await agentTotals(clickhouse, 'u', T, agent)
  const hours = await hourlyCost(clickhouse, 'u', agent, T - 3_600_000)
  return { rows: totals?.llm_calls ?? 0, hourlyCalls: hours.reduce((s, h) => s + h.llm_calls, 0) }
}

describe('shipper', () => {
  it('ships nothing while held, after the pass under way, and goes on once released', async () => {
    const journal = await openLog(dir())
    const shipper = new Shipper({ source: journal, clickhouse, maxRows: 1000, intervalMs: 20, log })
    shipper.start()
    await journal.append([{ table: 'events', row: event('held') }], T)
    expect(await shipper.flush(10_000)).toBe(true)
    const release = await shipper.hold()
    await journal.append(Array.from({ length: 5 }, () => ({ table: 'events' as const, row: event('held') })), T)
    shipper.kick()
    // Many intervals and a flush later, the rows are still in the journal and not in ClickHouse.
    expect(await shipper.flush(300)).toBe(false)
    expect(journal.backlog().rows).toBe(5)
    expect(await stored('held')).toEqual({ rows: 1, hourlyCalls: 1 })
    release()
    release() // a second call does nothing
    expect(await shipper.flush(10_000)).toBe(true)
    expect(await stored('held')).toEqual({ rows: 6, hourlyCalls: 6 })
    // While held, stop() does not wait for a release.
    const again = await shipper.hold()
    await shipper.stop()
    again()
    await journal.close()
  })

  it('ships the journal in batches of at most maxRows, full ones back to back, and empties it', async () => {
    const journal = await openLog(dir())
    await journal.append(Array.from({ length: 250 }, () => ({ table: 'events' as const, row: event('batches') })), T)
    const batches: number[] = []
    const shipper = new Shipper({ source: journal, clickhouse, maxRows: 100, intervalMs: 60_000, log, onShipped: (s) => batches.push(s.rows) })
    shipper.start()
    // With a minute's interval, only back-to-back full batches (and the kick of flush) get it out.
    expect(await shipper.flush(10_000)).toBe(true)
    await shipper.stop()
    expect(batches).toEqual([100, 100, 50])
    expect(journal.backlog()).toEqual({ rows: 0, bytes: 0, oldestAt: null })
    expect(await stored('batches')).toEqual({ rows: 250, hourlyCalls: 250 })
    await journal.close()
  })

  it('stores nothing twice when it dies between the INSERT and the commit, and a restart ships that batch again', async () => {
    const d = dir()
    const journal = await openLog(d)
    await journal.append(Array.from({ length: 30 }, () => ({ table: 'events' as const, row: event('crash') })), T)
    // The real journal, with the process dying exactly after the INSERT: the commit never happens.
    let inserted: JournalBatch | null = null
    const dying: JournalSource = {
      next: (n) => journal.next(n),
      backlog: () => journal.backlog(),
      commit: async (batch) => {
        inserted = batch
        throw new Error('killed after the INSERT, before the commit')
      },
    }
    const first = new Shipper({ source: dying, clickhouse, maxRows: 1000, intervalMs: 60_000, log })
    first.start()
    await expect.poll(() => inserted, { timeout: 10_000 }).not.toBeNull()
    await first.stop()
    await journal.close()
    expect(await stored('crash')).toEqual({ rows: 30, hourlyCalls: 30 })

    const reopened = await openLog(d)
    expect(reopened.backlog().rows).toBe(30)
    const second = new Shipper({ source: reopened, clickhouse, maxRows: 1000, intervalMs: 60_000, log })
    second.start()
    expect(await second.flush(10_000)).toBe(true)
    await second.stop()
    expect(await stored('crash')).toEqual({ rows: 30, hourlyCalls: 30 })
    await reopened.close()
  })

  it('moves rows ClickHouse refuses to dead_letters, ships every other row, and stores nothing twice when shipped again', async () => {
    const d = dir()
    const journal = await openLog(d)
    // Rows the edge would never let in, among good ones, as a defect elsewhere could write them.
    const poison = [
      { ...event('poison'), timestamp: 'not a time' },
      { ...event('poison'), cost_nano: 'lots' as unknown as number },
    ]
    const rows = Array.from({ length: 40 }, () => event('poison'))
    rows.splice(7, 0, poison[0]!)
    rows.splice(30, 0, poison[1]!)
    await journal.append(rows.map((row) => ({ table: 'events' as const, row })), T)
    // The first delivery dies after its INSERTs, before the commit: the batch is shipped again.
    let dying = true
    const source: JournalSource = {
      next: (n) => journal.next(n),
      backlog: () => journal.backlog(),
      commit: async (batch) => {
        if (dying) {
          dying = false
          throw new Error('killed after the INSERTs, before the commit')
        }
        await journal.commit(batch)
      },
    }
    const dead: string[] = []
    const shipper = new Shipper({ source, clickhouse, maxRows: 1000, intervalMs: 20, log, onDeadLetter: (x) => dead.push(x.json.toString('utf8')) })
    shipper.start()
    expect(await shipper.flush(10_000)).toBe(true)
    await shipper.stop()

    expect(await stored('poison')).toEqual({ rows: 40, hourlyCalls: 40 })
    const letters = await (
      await clickhouse.query({ query: "SELECT target_table, row, error FROM dead_letters WHERE row LIKE '%\"poison\"%' ORDER BY row", format: 'JSONEachRow' })
    ).json<{ target_table: string; row: string; error: string }>()
    expect(letters.map((l) => JSON.parse(l.row))).toEqual(expect.arrayContaining(poison))
    expect(letters).toHaveLength(2)
    expect(letters.every((l) => l.target_table === 'events' && /Code: \d+/.test(l.error))).toBe(true)
    expect(dead).toHaveLength(4) // reported on each delivery; stored once
    await journal.close()
  })

  it('holds the backlog while ClickHouse refuses, retries the same batch, and drains it once it accepts again', async () => {
    const journal = await openLog(dir())
    const failures: unknown[] = []
    const shipper = new Shipper({ source: journal, clickhouse, maxRows: 1000, intervalMs: 20, log, onFailed: (e) => failures.push(e) })
    await clickhouse.command({ query: 'RENAME TABLE events TO events_away' })
    try {
      shipper.start()
      await journal.append(Array.from({ length: 10 }, () => ({ table: 'events' as const, row: event('outage') })), T)
      await expect.poll(() => failures.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(2)
      await journal.append([{ table: 'events', row: event('outage') }], T)
      expect(journal.backlog().rows).toBe(11)
    } finally {
      await clickhouse.command({ query: 'RENAME TABLE events_away TO events' })
    }
    await expect.poll(() => journal.backlog().rows, { timeout: 20_000 }).toBe(0)
    await shipper.stop()
    expect(await stored('outage')).toEqual({ rows: 11, hourlyCalls: 11 })
    await journal.close()
  })

  it('ships, exactly once, the journal of a Redis instance that died between its INSERT and its commit', async () => {
    const redis = await startRedis()
    try {
      const options = { redis: redis.redis, partitions: 4, maxRows: 10_000, prefix: 'dead:', leaseMs: 300 }
      const a = new RedisJournal({ ...options, instance: 'a' })
      const b = new RedisJournal({ ...options, instance: 'b' })
      await Promise.all([a.register(), b.register()])
      await a.append(Array.from({ length: 40 }, (_, i) => ({ table: 'events' as const, row: { ...event('redis-dead'), user_id: `u${i % 5}` } })), T)
      let inserted = false
      const dying: JournalSource = {
        next: (n) => a.next(n),
        backlog: () => a.backlog(),
        commit: async () => {
          inserted = true
          throw new Error('killed after the INSERT, before the commit')
        },
      }
      const first = new Shipper({ source: dying, clickhouse, maxRows: 1000, intervalMs: 60_000, log })
      first.start()
      await expect.poll(() => inserted, { timeout: 10_000 }).toBe(true)
      await first.stop()
      // a is dead: b takes its journal over once a's lease ran out, and ships it.
      let taken: RedisJournal[] = []
      await expect
        .poll(async () => {
          await b.renew()
          taken = await b.takeOverDead()
          return taken.length
        }, { timeout: 5000, interval: 50 })
        .toBe(1)
      const second = new Shipper({ source: taken[0]!, clickhouse, maxRows: 1000, intervalMs: 60_000, log })
      second.start()
      await expect.poll(async () => (await taken[0]!.next(1000)) === null, { timeout: 10_000 }).toBe(true)
      await second.stop()
      const stored = await clickhouse.query({ query: "SELECT count() AS n, uniqExact(event_id) AS ids FROM events WHERE agent_id = 'redis-dead'", format: 'JSONEachRow' })
      expect(await stored.json()).toEqual([{ n: '40', ids: '40' }])
    } finally {
      await redis.stop()
    }
  })
})
