import { appendFileSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { countRecords, JournalBusyError, SegmentLog, type SegmentLogOptions } from '../../src/journal/segment-log.ts'
import type { JournalRow } from '../../src/journal/types.ts'
import type { EventRow } from '../../src/storage/rows.ts'

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

// The behaviour every journal shares is in contract.test.ts; these cases are the segment log's own.
describe('segment log journal', () => {
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

  it('copies the rows not shipped, across segments, and seeds a new log with them under a new id', async () => {
    const log = await openLog(dir(), { segmentBytes: 256 })
    const rows = Array.from({ length: 30 }, () => event())
    for (const r of rows) await log.append([r], T0)
    const shipped = await log.next(12)
    await log.commit(shipped!)
    const file = join(dir(), 'tail.log')
    const copy = await log.copyUnshipped(file)
    // From where the shipped batch ended (its token names its range) to the end, whole records.
    const shippedTo = Number(/-(\d+)$/.exec(shipped!.token)![1])
    expect(copy).toMatchObject({ from: shippedTo, to: shippedTo + statSync(file).size, bytes: statSync(file).size, rows: { events: 18, agent_configs: 0 } })
    expect(await countRecords(file)).toMatchObject({ events: 18 })
    // A row appended after the copy began is not in it.
    await log.append([event()], T0)
    expect(await countRecords(file)).toMatchObject({ events: 18 })
    await log.close()

    const seededDir = join(dir(), 'journal')
    await SegmentLog.seed(seededDir, file)
    const seeded = await openLog(seededDir)
    expect(seeded.backlog().rows).toBe(18)
    const batch = await seeded.next(100)
    expect(ids(batch!.entries)).toEqual(ids(rows.slice(12)))
    expect(batch!.entries[0]!.at).toBe(T0)
    // A new id: the seeded log's tokens are not the old log's.
    expect(batch!.token).toMatch(/^journal:[0-9a-f-]{36}:0-\d+$/)
    expect(batch!.token).not.toContain(copy.id)
    await seeded.close()
  })

  it('refuses to seed from a file whose last record is cut or damaged, and into a directory that is not empty', async () => {
    const log = await openLog(dir())
    await log.append([event(), event()], T0)
    const file = join(dir(), 'tail.log')
    await log.copyUnshipped(file)
    await log.close()
    const whole = readFileSync(file)
    const cut = join(dir(), 'cut.log')
    writeFileSync(cut, whole.subarray(0, whole.length - 3))
    await expect(SegmentLog.seed(join(dir(), 'j'), cut)).rejects.toThrow(/is cut or damaged/)
    const damaged = join(dir(), 'damaged.log')
    const bytes = Buffer.from(whole)
    bytes.writeUInt8(bytes.readUInt8(bytes.length - 2) ^ 0xff, bytes.length - 2)
    writeFileSync(damaged, bytes)
    await expect(countRecords(damaged)).rejects.toThrow(/is cut or damaged/)
    const full = dir()
    writeFileSync(join(full, 'x'), '')
    await expect(SegmentLog.seed(full, file)).rejects.toThrow(/is not empty/)
  })

  it('refuses to copy while a batch is recorded as under way', async () => {
    const log = await openLog(dir())
    await log.append([event()], T0)
    await log.next(10)
    await expect(log.copyUnshipped(join(dir(), 'tail.log'))).rejects.toThrow(JournalBusyError)
    await log.close()
  })
})
