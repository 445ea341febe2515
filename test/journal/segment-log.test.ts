import { appendFileSync, mkdtempSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { SegmentLog, type SegmentLogOptions } from '../../src/journal/segment-log.ts'
import { JournalFullError, type JournalRow } from '../../src/journal/types.ts'
import type { EventRow } from '../../src/storage/events.ts'

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0)
let seq = 0

function event(agent = 'a'): JournalRow {
  const n = ++seq
  return { table: 'events', row: { user_id: 'u', agent_id: agent, event_id: `id-${n}`, cost_nano: n } as unknown as EventRow }
}

const dir = () => mkdtempSync(join(tmpdir(), 'burnrate-journal-'))
const openLog = (d: string, o: Partial<SegmentLogOptions> = {}) => SegmentLog.open({ dir: d, fsync: false, maxRows: 1_000_000, ...o })
/** Event ids of rows as appended (row), as shipped (their JSON, never parsed by the log) or as rebuilt. */
const ids = (rows: Array<{ row: unknown } | { json: Buffer }>) => rows.map((r) => ('json' in r ? (JSON.parse(r.json.toString()) as EventRow) : (r.row as EventRow)).event_id)

describe('segment log journal', () => {
  it('gives back what was appended, in order, as one batch per next(), and forgets it once committed', async () => {
    const log = await openLog(dir())
    const rows = [event(), event(), event('b')]
    await Promise.all([log.append([rows[0]!], T0), log.append([rows[1]!, rows[2]!], T0 + 5)])
    expect(log.backlog()).toMatchObject({ rows: 3, oldestAt: T0 })
    const batch = await log.next(10)
    // The row's JSON as appended: the shipper sends it to ClickHouse as it is.
    expect(batch!.entries).toEqual([
      { table: 'events', json: Buffer.from(JSON.stringify(rows[0]!.row)), at: T0 },
      { table: 'events', json: Buffer.from(JSON.stringify(rows[1]!.row)), at: T0 + 5 },
      { table: 'events', json: Buffer.from(JSON.stringify(rows[2]!.row)), at: T0 + 5 },
    ])
    await log.commit(batch!)
    expect(log.backlog()).toEqual({ rows: 0, bytes: 0, oldestAt: null })
    expect(await log.next(10)).toBeNull()
    await log.close()
  })

  it('cuts batches at maxRows, and the next batch starts where the last one ended', async () => {
    const log = await openLog(dir())
    const rows = Array.from({ length: 7 }, () => event())
    await log.append(rows, T0)
    const first = await log.next(4)
    expect(ids(first!.entries)).toEqual(ids(rows.slice(0, 4)))
    await log.commit(first!)
    const second = await log.next(4)
    expect(ids(second!.entries)).toEqual(ids(rows.slice(4)))
    expect(second!.token).not.toBe(first!.token)
    await log.close()
  })

  it('ships a batch begun before a crash again, the same rows with the same token', async () => {
    const d = dir()
    const log = await openLog(d)
    await log.append([event(), event()], T0)
    const begun = await log.next(10)
    // The process dies here, after (or during) the INSERT and before commit().
    await log.close()
    await log.append([event()], T0).catch(() => {}) // a closed log takes nothing
    const reopened = await openLog(d)
    await reopened.append([event()], T0 + 1)
    const again = await reopened.next(10)
    expect(again).toEqual(begun)
    await reopened.commit(again!)
    expect(ids((await reopened.next(10))!.entries)).toHaveLength(1)
    await reopened.close()
  })

  it('keeps what is not shipped across a restart, and gives it for the rebuild', async () => {
    const d = dir()
    const log = await openLog(d)
    const rows = [event(), event(), event()]
    await log.append(rows, T0)
    const batch = await log.next(1)
    await log.commit(batch!)
    await log.close()
    const reopened = await openLog(d)
    expect(reopened.backlog()).toMatchObject({ rows: 2, oldestAt: T0 })
    const unshipped = []
    for await (const e of reopened.unshipped()) unshipped.push(e)
    expect(ids(unshipped)).toEqual(ids(rows.slice(1)))
    expect(unshipped[0]).toEqual({ ...rows[1], at: T0 })
    await reopened.close()
  })

  it('cuts off a torn tail at open, and appends after the last whole record', async () => {
    const d = dir()
    const log = await openLog(d)
    const rows = [event(), event()]
    await log.append(rows, T0)
    await log.close()
    const segment = readdirSync(d).find((f) => f.endsWith('.log'))!
    // A write cut short by a crash: a header promising more bytes than follow.
    appendFileSync(join(d, segment), Buffer.from([200, 0, 0, 0, 1, 2, 3, 4, 123, 34]))
    const reopened = await openLog(d)
    const late = event()
    await reopened.append([late], T0 + 1)
    const batch = await reopened.next(10)
    expect(ids(batch!.entries)).toEqual(ids([...rows, late]))
    await reopened.close()
  })

  it('cuts off a record whose checksum does not match', async () => {
    const d = dir()
    const log = await openLog(d)
    await log.append([event()], T0)
    await log.close()
    const segment = join(d, readdirSync(d).find((f) => f.endsWith('.log'))!)
    const payload = Buffer.from('\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000{}')
    const header = Buffer.alloc(8)
    header.writeUInt32LE(payload.length, 0)
    header.writeUInt32LE(12345, 4)
    appendFileSync(segment, Buffer.concat([header, payload]))
    const reopened = await openLog(d)
    expect(reopened.backlog().rows).toBe(1)
    await reopened.close()
  })

  it('refuses rows at its bound before taking any, and takes them again once shipped', async () => {
    const log = await openLog(dir(), { maxRows: 3 })
    await log.append([event(), event(), event()], T0)
    expect(() => log.append([event()], T0)).toThrow(JournalFullError)
    expect(log.backlog().rows).toBe(3)
    await log.commit((await log.next(10))!)
    await log.append([event()], T0)
    expect(log.backlog().rows).toBe(1)
    await log.close()
  })

  it('rolls segments at their size, reads across them, and deletes the shipped ones', async () => {
    const d = dir()
    const log = await openLog(d, { segmentBytes: 256 })
    const rows = Array.from({ length: 40 }, () => event())
    for (const r of rows) await log.append([r], T0)
    expect(readdirSync(d).filter((f) => f.endsWith('.log')).length).toBeGreaterThan(5)
    const batch = await log.next(100)
    expect(ids(batch!.entries)).toEqual(ids(rows))
    await log.commit(batch!)
    expect(readdirSync(d).filter((f) => f.endsWith('.log'))).toHaveLength(1)
    await log.append([event()], T0)
    await log.close()
    const reopened = await openLog(d, { segmentBytes: 256 })
    expect(reopened.backlog().rows).toBe(1)
    await reopened.close()
  })

  it('groups the rows appended in one turn of the event loop into one write, and answers each once it is written', async () => {
    const log = await openLog(dir(), { fsync: true })
    const appends = Array.from({ length: 50 }, () => log.append([event()], T0))
    expect(log.stats.writes).toBe(0)
    await Promise.all(appends)
    expect(log.stats.writes).toBe(1)
    await log.synced()
    await log.close()
  })

  it('gives every journal tokens of its own', async () => {
    const [a, b] = await Promise.all([openLog(dir()), openLog(dir())])
    await Promise.all([a.append([event()], T0), b.append([event()], T0)])
    expect((await a.next(10))!.token).not.toBe((await b.next(10))!.token)
    await Promise.all([a.close(), b.close()])
  })
})
