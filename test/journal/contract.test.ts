import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { RedisJournal } from '../../src/journal/redis-streams.ts'
import { SegmentLog } from '../../src/journal/segment-log.ts'
import { JournalFullError, type JournalRow, type JournalSource } from '../../src/journal/types.ts'
import type { EventRow } from '../../src/storage/rows.ts'
import { startRedis } from '../helpers/redis.ts'
import { startRedisCluster } from '../helpers/redis-cluster.ts'

/**
 * What every journal must do: the embedded segment log and the Redis streams run
 * the same cases, so the shipper can rely on one behaviour.
 */
type Journal = JournalSource & { append(rows: readonly JournalRow[], now: number): Promise<void> }
interface Opened {
  journal: Journal
  /** The same journal opened again, as a process does after a crash. */
  reopen(): Promise<Journal>
  close(): Promise<void>
}

let redis: ReturnType<typeof startRedis> | undefined
let cluster: ReturnType<typeof startRedisCluster> | undefined
let instances = 0
afterAll(async () => {
  await (await redis)?.stop()
  await (await cluster)?.stop()
})

const implementations: Array<[string, (maxRows: number) => Promise<Opened>]> = [
  [
    'segment log',
    async (maxRows) => {
      const dir = mkdtempSync(join(tmpdir(), 'burnrate-journal-'))
      let log = await SegmentLog.open({ dir, fsync: false, maxRows })
      return {
        journal: log,
        reopen: async () => {
          await log.close()
          return (log = await SegmentLog.open({ dir, fsync: false, maxRows }))
        },
        close: () => log.close(),
      }
    },
  ],
  [
    'Redis streams',
    async (maxRows) => {
      redis ??= startRedis()
      const client = (await redis).redis
      const instance = `i${++instances}`
      const make = () => new RedisJournal({ redis: client, instance, partitions: 1, maxRows, prefix: `c${instances}:` })
      const journal = make()
      await journal.register()
      return { journal, reopen: async () => make(), close: async () => {} }
    },
  ],
  [
    // On a real cluster of three masters with a replica each, the partitions'
    // streams spread over the masters. The bound is spread over the partitions.
    'Redis streams on a cluster',
    async (maxRows) => {
      cluster ??= startRedisCluster()
      const client = (await cluster).cluster
      const instance = `i${++instances}`
      const partitions = 8
      const make = () => new RedisJournal({ redis: client, instance, partitions, maxRows: maxRows * partitions, prefix: `c${instances}:` })
      const journal = make()
      await journal.register()
      return { journal, reopen: async () => make(), close: async () => {} }
    },
  ],
]

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0)
let seq = 0
function event(user = 'u'): JournalRow {
  const n = ++seq
  return { table: 'events', row: { user_id: user, agent_id: 'a', event_id: `id-${n}`, cost_nano: n } as unknown as EventRow }
}
const ids = (entries: Array<{ json: Buffer }>) => entries.map((e) => (JSON.parse(e.json.toString()) as EventRow).event_id)
const idsOf = (rows: JournalRow[]) => rows.map((r) => (r.row as EventRow).event_id)

describe.each(implementations)('journal: %s', (_name, open) => {
  it('gives back what was appended, in order, as its JSON, and forgets it once committed', async () => {
    const { journal, close } = await open(1_000_000)
    const rows = [event(), event(), { table: 'pause_transitions', row: { user_id: 'u', agent_id: 'a', version: 1 } } as unknown as JournalRow]
    await journal.append([rows[0]!], T0)
    await journal.append([rows[1]!, rows[2]!], T0 + 5)
    expect(journal.backlog()).toMatchObject({ rows: 3, oldestAt: T0 })
    const batch = await journal.next(10)
    expect(batch!.entries).toEqual([
      { table: 'events', json: Buffer.from(JSON.stringify(rows[0]!.row)), at: T0 },
      { table: 'events', json: Buffer.from(JSON.stringify(rows[1]!.row)), at: T0 + 5 },
      { table: 'pause_transitions', json: Buffer.from(JSON.stringify(rows[2]!.row)), at: T0 + 5 },
    ])
    await journal.commit(batch!)
    expect(journal.backlog()).toMatchObject({ rows: 0, oldestAt: null })
    expect(await journal.next(10)).toBeNull()
    await close()
  })

  it('cuts batches at maxRows, and the next batch starts where the last one ended', async () => {
    const { journal, close } = await open(1_000_000)
    const rows = Array.from({ length: 7 }, () => event())
    await journal.append(rows, T0)
    const first = await journal.next(4)
    expect(ids(first!.entries)).toEqual(idsOf(rows.slice(0, 4)))
    await journal.commit(first!)
    const second = await journal.next(4)
    expect(ids(second!.entries)).toEqual(idsOf(rows.slice(4)))
    expect(second!.token).not.toBe(first!.token)
    await close()
  })

  it('ships a batch begun before a crash again, the same rows with the same token', async () => {
    const { journal, reopen, close } = await open(1_000_000)
    await journal.append([event(), event()], T0)
    const begun = await journal.next(10)
    // The process dies here, after (or during) the INSERT and before commit().
    const again = await reopen()
    await again.append([event()], T0 + 1)
    expect(await again.next(10)).toEqual(begun)
    await again.commit(begun!)
    expect((await again.next(10))!.entries).toHaveLength(1)
    await close()
  })

  it('refuses rows at its bound before taking any, and takes them again once shipped', async () => {
    const { journal, close } = await open(3)
    await journal.append([event(), event(), event()], T0)
    await expect(Promise.resolve().then(() => journal.append([event()], T0))).rejects.toBeInstanceOf(JournalFullError)
    const batch = await journal.next(10)
    expect(batch!.entries).toHaveLength(3)
    await journal.commit(batch!)
    await journal.append([event()], T0)
    expect((await journal.next(10))!.entries).toHaveLength(1)
    await close()
  })

  it('gives every journal tokens of its own', async () => {
    const [a, b] = await Promise.all([open(100), open(100)])
    await Promise.all([a.journal.append([event()], T0), b.journal.append([event()], T0)])
    expect((await a.journal.next(10))!.token).not.toBe((await b.journal.next(10))!.token)
    await Promise.all([a.close(), b.close()])
  })
})

describe('journal: Redis streams, partitioned by user', () => {
  it('ships every partition of an instance in one batch, and trims every stream it shipped', async () => {
    redis ??= startRedis()
    const client = (await redis).redis
    const journal = new RedisJournal({ redis: client, instance: 'spread', partitions: 8, maxRows: 1_000_000, prefix: 'spread:' })
    await journal.register()
    const rows = Array.from({ length: 64 }, (_, i) => event(`user-${i}`))
    await journal.append(rows, T0)
    const used = new Set(rows.map((r) => journal.partitionOf(r.row.user_id)))
    expect(used.size).toBeGreaterThan(3)
    const batch = await journal.next(1000)
    expect(new Set(ids(batch!.entries))).toEqual(new Set(idsOf(rows)))
    await journal.commit(batch!)
    for (const p of used) expect(await client.xlen(journal.streamKey(p))).toBe(0)
  })

  it('fences an instance whose journal another took over: no batch begun or committed, no row appended', async () => {
    redis ??= startRedis()
    const client = (await redis).redis
    const zombie = new RedisJournal({ redis: client, instance: 'zombie', partitions: 2, maxRows: 1000, prefix: 'fence:' })
    await zombie.register()
    await zombie.append([event('z1'), event('z2')], T0)
    const begun = await zombie.next(10)
    // Another instance takes the journal over: it becomes its owner and fences its appends.
    await client.hset('fence:ship:zombie', 'owner', 'taker')
    for (const p of [0, 1]) await client.sadd(zombie.fencedKey(p), 'zombie')
    await expect(zombie.commit(begun!)).rejects.toThrow(/taken over/)
    await expect(zombie.next(10)).rejects.toThrow(/taken over/)
    await expect(zombie.append([event('z3')], T0)).rejects.toThrow(/taken over/)
    // The batch it began stays recorded, for the new owner to ship again under its token.
    expect(await client.hget('fence:ship:zombie', 'intent')).toContain(begun!.token)
  })

  it('lets another instance take over the journal of one whose lease ran out, and ship its batch under way again', async () => {
    redis ??= startRedis()
    const client = (await redis).redis
    const options = { redis: client, partitions: 2, maxRows: 1000, prefix: 'take:', leaseMs: 300 }
    const a = new RedisJournal({ ...options, instance: 'a' })
    const b = new RedisJournal({ ...options, instance: 'b' })
    await Promise.all([a.register(), b.register()])
    await a.append([event('x'), event('y'), event('w')], T0)
    const begun = await a.next(10)
    expect(await b.takeOverDead()).toEqual([]) // a's lease runs
    // a dies here: it renews no more. b keeps its own lease and, once a's has run out, takes a's journal.
    await expect
      .poll(async () => {
        await b.renew()
        return (await b.takeOverDead()).length
      }, { timeout: 5000, interval: 50 })
      .toBe(1)
    const [ofA] = await b.takeOverDead()
    await expect(a.commit(begun!)).rejects.toThrow(/taken over/)
    await expect(a.append([event('x')], T0)).rejects.toThrow(/taken over/)
    await expect(a.renew()).rejects.toThrow(/taken over/)
    const again = await ofA!.next(10)
    expect(again).toEqual(begun) // the same rows under the same token: ClickHouse stores them once
    await ofA!.commit(again!)
    expect(await ofA!.next(10)).toBeNull()
    await ofA!.forget()
    expect(await client.smembers('take:ship:instances')).toEqual(['b'])
  })
})
