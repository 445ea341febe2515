import { randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { RedisJournal } from '../../src/journal/redis-streams.ts'
import { SegmentLog } from '../../src/journal/segment-log.ts'
import type { ErasableJournal, JournalRow, JournalSource } from '../../src/journal/types.ts'
import type { EventRow } from '../../src/storage/rows.ts'
import { startRedis } from '../helpers/redis.ts'

/**
 * What an erasure asks of both journals (journal/types.ts ErasableJournal): the user's rows
 * are counted and shipped like any, and once they are, no byte of them stays in the
 * journal's storage, while the rows of others not yet shipped stay, in order.
 */
type Journal = JournalSource & ErasableJournal & { append(rows: readonly JournalRow[], now: number): Promise<void> }

let redis: ReturnType<typeof startRedis> | undefined
afterAll(async () => {
  await (await redis)?.stop()
})

const implementations: Array<[string, () => Promise<{ journal: Journal; stored(): Promise<Buffer> }>]> = [
  [
    'segment log',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'burnrate-journal-'))
      const journal = await SegmentLog.open({ dir, fsync: false, maxRows: 1_000_000 })
      return { journal, stored: async () => Buffer.concat(readdirSync(dir).map((f) => readFileSync(join(dir, f)))) }
    },
  ],
  [
    'Redis streams',
    async () => {
      redis ??= startRedis({ args: ['--rdbcompression', 'no'] })
      const client = (await redis).redis
      const prefix = `erase${randomBytes(4).toString('hex')}:`
      const journal = new RedisJournal({ redis: client, instance: 'i', partitions: 1, maxRows: 1_000_000, prefix })
      await journal.register()
      const stored = async () => {
        const keys = await client.keys(`${prefix}*`)
        return Buffer.concat(await Promise.all(keys.map(async (k) => (await client.dumpBuffer(k)) ?? Buffer.alloc(0))))
      }
      return { journal, stored }
    },
  ],
]

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0)
let seq = 0
function event(user: string): JournalRow {
  return { table: 'events', row: { user_id: user, agent_id: 'a', event_id: `id-${++seq}`, cost_nano: 1 } as unknown as EventRow }
}
const ids = (entries: Array<{ json: Buffer }>) => entries.map((e) => (JSON.parse(e.json.toString()) as EventRow).event_id)
const idsOf = (rows: JournalRow[]) => rows.map((r) => (r.row as EventRow).event_id)

describe.each(implementations)('journal erasure: %s', (name, open) => {
  it("ships the user's rows, then keeps no byte of them, and the others' unshipped rows in order", async () => {
    const { journal, stored } = await open()
    const victim = `victim${randomBytes(6).toString('hex')}`
    const before = [event(victim), event('other'), event(victim), event('other'), event('other')]
    await journal.append(before, T0)
    const seal = await journal.seal(victim)
    expect(seal.rows).toBe(2)
    expect(await seal.shipped()).toBe(false)
    const after = [event('other'), event('other')]
    await journal.append(after, T0 + 1)

    const batch = await journal.next(before.length)
    expect(ids(batch!.entries)).toEqual(idsOf(before))
    await journal.commit(batch!)
    expect(await seal.shipped()).toBe(true)
    // The trim marks the shipped entries of a stream node that still holds unshipped ones as
    // deleted and keeps their bytes (the segment log deleted the sealed segment at the commit).
    if (name === 'Redis streams') expect((await stored()).includes(victim)).toBe(true)

    await journal.scrub(victim)
    expect((await stored()).includes(victim)).toBe(false)
    const rest = await journal.next(10)
    expect(ids(rest!.entries)).toEqual(idsOf(after))
    await journal.commit(rest!)
    const later = [event('other')]
    await journal.append(later, T0 + 2)
    expect(ids((await journal.next(10))!.entries)).toEqual(idsOf(later))
  })
})
