import { createHash, randomUUID } from 'node:crypto'
import { mkdirSync, readdirSync } from 'node:fs'
import { open, readFile, rename, rm, statfs, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'
import { crc32 } from 'node:zlib'
import { DiskFullError, JOURNAL_TABLES, JournalFullError, rowOfUser, type ErasableJournal, type JournalBacklog, type JournalBatch, type JournalEntry, type JournalRow, type JournalSeal, type JournalSource, type JournalTable, type ShippedEntry } from './types.ts'

/**
 * The embedded journal: an append-only log of segment files under DATA_DIR/journal, written
 * by group commit (rows that arrive while a write is under way share the next write, as a
 * database groups its fsyncs) and drained by the shipper.
 *
 * A record is [u32 length of the body][u32 CRC-32 of the body] then the body: [u8 table]
 * [f64 appended at, epoch ms][the row's JSON], little endian. The JSON is what the shipper
 * sends to ClickHouse as it is (parsing and re-encoding a batch on the main thread was the
 * tail latency of POST /events: bench/). A record's position is its byte offset in the whole
 * log, and a segment is named by the offset of its first byte. A torn tail (a write cut by a crash or a power loss) is
 * found by its length or checksum at open and cut off: its rows were never acknowledged.
 *
 * `checkpoint.json` (replaced atomically, always fsynced) holds how far the log is shipped
 * and the batch under way: its exact range and token are recorded before its INSERT, so a
 * crash between the INSERT and the commit ships the same rows again with the same token,
 * which ClickHouse deduplicates (sql/0007). The log's id is part of every token, so a new
 * journal never reuses an old one's tokens.
 */
export interface SegmentLogOptions {
  dir: string
  /**
   * true: fdatasync every group before answering (an acknowledged row survives a power
   * loss); false: write only (it survives a crash of the process, kill -9 included).
   */
  fsync: boolean
  /** Rows not yet shipped beyond which append() refuses (JournalFullError). */
  maxRows: number
  /** A segment is closed, and a new one begun, once it holds this many bytes. */
  segmentBytes?: number
  /**
   * Free bytes the filesystem of `dir` keeps: under it, append() refuses (DiskFullError)
   * before anything changes, and takes rows again once space returns. 0: never refuses.
   */
  minFreeBytes?: number
  /** Called once if a write fails; the journal then refuses everything (see append()). */
  onFailure?: (err: unknown) => void
}

interface Checkpoint {
  id: string
  shipped: number
  intent: { from: number; to: number; rows: number } | null
}

interface Group {
  frames: Buffer[]
  bytes: number
  rows: number
  at: number
  done: Promise<void>
  resolve: () => void
  reject: (err: unknown) => void
}

const HEADER = 8
/** Table and time, at the start of a record's body. */
const BODY_HEADER = 9
const SEGMENT_BYTES = 64 * 1024 * 1024
/** Resolution of the oldest-row age: a mark every so often, not one per write. */
const MARK_EVERY_MS = 100
const READ_CHUNK = 1024 * 1024
/** How often the filesystem's free space is read (and at once after a write that may have crossed the bound). */
const STATFS_EVERY_MS = 1000

export class SegmentLog implements JournalSource, ErasableJournal {
  readonly #o: Required<Omit<SegmentLogOptions, 'onFailure'>> & Pick<SegmentLogOptions, 'onFailure'>
  /**
   * The filesystem's free bytes: read every STATFS_EVERY_MS, less what this log wrote since,
   * so a burst of appends between two reads is refused at the bound too.
   */
  #freeBytes = Infinity
  #statfsTimer: NodeJS.Timeout | null = null
  #statfsUnderWay: Promise<void> | null = null
  #cp: Checkpoint = { id: '', shipped: 0, intent: null }
  /** Base offsets of the segments, oldest first; the last one is written to. */
  #segments: number[] = []
  #file: FileHandle | null = null
  #fileBytes = 0
  /** Offset after the last byte written (and, in fsync mode, synced). */
  #end = 0
  #unshippedRows = 0
  /** (offset, time) marks: rows from `offset` on were appended at or after `at`. */
  #marks: Array<{ offset: number; at: number }> = []
  #pending: Group | null = null
  #writing: Promise<void> | null = null
  #failed: unknown = null
  #closed = false
  /** Group writes since open (metrics). */
  readonly stats = { writes: 0 }

  private constructor(o: SegmentLogOptions) {
    this.#o = { segmentBytes: SEGMENT_BYTES, minFreeBytes: 0, ...o }
  }

  /** Opens (or creates) the log, cutting off a torn tail. */
  static async open(o: SegmentLogOptions): Promise<SegmentLog> {
    const log = new SegmentLog(o)
    await log.#open()
    if (log.#o.minFreeBytes > 0) {
      await log.#readFreeSpace()
      log.#statfsTimer = setInterval(() => void log.#readFreeSpace(), STATFS_EVERY_MS).unref()
    }
    return log
  }

  get backlogFull(): boolean {
    return this.#unshippedRows >= this.#o.maxRows
  }

  /** The filesystem under the log keeps less than its bound free: appends are refused. */
  get diskFull(): boolean {
    return this.#freeBytes < this.#o.minFreeBytes
  }

  /** Free bytes of the filesystem under the log, as last read (less what was written since); Infinity when not watched. */
  get freeBytes(): number {
    return this.#freeBytes
  }

  /** Throws what append() would refuse with now (JournalFullError, DiskFullError), before the caller changes anything. */
  mustHaveRoom(): void {
    if (this.backlogFull) throw new JournalFullError(this.backlog())
    if (this.diskFull) throw new DiskFullError(this.#o.dir, this.#freeBytes, this.#o.minFreeBytes)
  }

  #readFreeSpace(): Promise<void> {
    return (this.#statfsUnderWay ??= statfs(this.#o.dir)
      .then(
        (s) => void (this.#freeBytes = s.bavail * s.bsize),
        () => undefined, // the last figure stands; the next read tries again
      )
      .finally(() => (this.#statfsUnderWay = null)))
  }

  backlog(): JournalBacklog {
    return { rows: this.#unshippedRows, bytes: this.#end - this.#cp.shipped, oldestAt: this.#unshippedRows > 0 ? this.#oldestAt() : null }
  }

  /**
   * Appends rows as one unit and resolves once they are written (and synced, in fsync
   * mode) with the rows appended beside them. Synchronous up to the returned promise, so
   * a caller that changes its state and appends in one synchronous block is atomic with
   * respect to every other request. Throws JournalFullError at the bound, before anything.
   * After a failed write every later call rejects: the caller's state may now hold rows
   * the log does not, and only a restart (which rebuilds from ClickHouse and this log)
   * makes them agree again; `onFailure` tells the server to stop.
   */
  append(rows: readonly JournalRow[], now: number): Promise<void> {
    if (this.#failed !== null) return Promise.reject(this.#failed)
    if (this.#closed) return Promise.reject(new Error('the journal is closed'))
    this.mustHaveRoom()
    const group = (this.#pending ??= newGroup(now))
    for (const r of rows) {
      const frame = encodeRecord(r.table, now, JSON.stringify(r.row))
      group.frames.push(frame)
      group.bytes += frame.length
    }
    group.rows += rows.length
    this.#unshippedRows += rows.length
    // Started on the next turn of the event loop, so the requests parsed in this one share it.
    if (!this.#writing) this.#writing = new Promise((r) => setImmediate(r)).then(() => this.#writeLoop())
    return group.done
  }

  /** Resolves once every row appended so far is written (a repeat answered as a duplicate waits for its original). */
  synced(): Promise<void> {
    if (this.#failed !== null) return Promise.reject(this.#failed)
    return this.#pending?.done ?? this.#writing ?? Promise.resolve()
  }

  /** Every row not yet shipped, oldest first (for rebuilding the hot state at start-up). */
  async *unshipped(): AsyncGenerator<JournalEntry> {
    for (let offset = this.#cp.shipped; offset < this.#end; ) {
      const { entries, next } = await this.#read(offset, this.#end, 10_000)
      for (const e of entries) yield { table: e.table, at: e.at, row: JSON.parse(e.json.toString('utf8')) } as JournalEntry
      offset = next
    }
  }

  /**
   * Writes the rows not yet shipped, from the shipped offset to the end written so far (whole
   * records, as they are in the log), to the new file `dest`, and says which they were. The
   * shipper must be held (Shipper.hold): the copy starts where ClickHouse's rows end. Rows
   * appended while it runs are past its end and not in it. Refuses while a batch is recorded
   * as under way (its INSERT failed, or was cut): ClickHouse may or may not hold its rows.
   */
  async copyUnshipped(dest: string): Promise<JournalCopy> {
    if (this.#cp.intent) throw new JournalBusyError()
    const from = this.#cp.shipped
    const to = this.#end
    const rows = Object.fromEntries(JOURNAL_TABLES.map((t) => [t, 0])) as Record<JournalTable, number>
    const hash = createHash('sha256')
    const out = await open(dest, 'wx')
    try {
      for (let offset = from; offset < to; ) {
        const { entries, next } = await this.#read(offset, to, 10_000)
        // A record's bytes follow from its fields: encoded again, they are the log's own.
        const chunk = Buffer.concat(entries.map((e) => encodeRecord(e.table, e.at, e.json)))
        for (const e of entries) rows[e.table]++
        hash.update(chunk)
        await out.writeFile(chunk)
        offset = next
      }
      await out.datasync()
    } finally {
      await out.close()
    }
    return { id: this.#cp.id, from, to, bytes: to - from, rows, sha256: hash.digest('hex') }
  }

  /**
   * A new log in `dir` (absent or empty) whose rows not yet shipped are the records of
   * `source` (a file copyUnshipped wrote), under a new id: its batches' tokens are new to
   * ClickHouse, whatever the log it was copied from shipped. Every record is checked (length
   * and CRC) first; a file that does not end on a whole record is refused.
   */
  static async seed(dir: string, source: string): Promise<void> {
    const data = await readFile(source)
    const valid = validPrefix(data)
    if (valid < data.length) throw new Error(`${source}: the record at byte ${valid} is cut or damaged`)
    mkdirSync(dir, { recursive: true })
    if (readdirSync(dir).length > 0) throw new Error(`${dir} is not empty`)
    const segment = await open(join(dir, segmentName(0)), 'wx')
    try {
      await segment.writeFile(data)
      await segment.datasync()
    } finally {
      await segment.close()
    }
    const log = new SegmentLog({ dir, fsync: true, maxRows: Number.MAX_SAFE_INTEGER })
    await log.#saveCheckpoint({ id: randomUUID(), shipped: 0, intent: null })
  }

  async next(maxRows: number): Promise<JournalBatch | null> {
    const { intent } = this.#cp
    if (intent) {
      const { entries } = await this.#read(intent.from, intent.to, intent.rows)
      return { token: this.#token(intent.from, intent.to), entries }
    }
    if (this.#cp.shipped >= this.#end) return null
    const { entries, next } = await this.#read(this.#cp.shipped, this.#end, maxRows)
    await this.#saveCheckpoint({ ...this.#cp, intent: { from: this.#cp.shipped, to: next, rows: entries.length } })
    return { token: this.#token(this.#cp.shipped, next), entries }
  }

  async commit(batch: JournalBatch): Promise<void> {
    const { intent } = this.#cp
    if (!intent || batch.token !== this.#token(intent.from, intent.to)) throw new Error(`no batch ${batch.token} under way`)
    await this.#saveCheckpoint({ ...this.#cp, shipped: intent.to, intent: null })
    this.#unshippedRows -= intent.rows
    while (this.#marks.length > 0 && (this.#marks[1]?.offset ?? this.#end) <= intent.to) this.#marks.shift()
    await this.#dropShipped()
  }

  /**
   * For an erasure: the user's rows not yet shipped, and a new segment begun, so that
   * every row appended before the call is in a segment that goes once it is shipped
   * (scrub(); a segment being written stays, and would keep the user's bytes).
   */
  async seal(userId: string): Promise<JournalSeal> {
    let rows = 0
    for (let offset = this.#cp.shipped; offset < this.#end; ) {
      const { entries, next } = await this.#read(offset, this.#end, 10_000)
      for (const e of entries) if (rowOfUser(e.json, userId)) rows++
      offset = next
    }
    await this.#rollNow()
    const mark = this.#end
    return { rows, shipped: () => Promise.resolve(this.#cp.shipped >= mark) }
  }

  async scrub(): Promise<void> {
    await this.#dropShipped()
  }

  /** Whole segments before the shipped point go; the one being written stays. */
  async #dropShipped(): Promise<void> {
    while (this.#segments.length > 1 && this.#segments[1]! <= this.#cp.shipped) {
      await rm(join(this.#o.dir, segmentName(this.#segments.shift()!)), { force: true })
    }
  }

  /**
   * Begins a new segment now, unless the open one is empty. Taken as the write loop is
   * taken: appends meanwhile wait in the next group, written once the new segment is open.
   */
  async #rollNow(): Promise<void> {
    while (this.#writing) await this.#writing
    if (this.#failed !== null) throw this.#failed
    const rolled = this.#fileBytes === 0 ? Promise.resolve() : this.#roll()
    this.#writing = rolled.then(
      () => {
        this.#writing = this.#pending ? this.#writeLoop() : null
      },
      (err: unknown) => {
        this.#failed = err
        this.#writing = null
        this.#pending?.reject(err)
        this.#pending = null
        this.#o.onFailure?.(err)
        throw err
      },
    )
    await this.#writing
  }

  /** Waits for the writes under way, then closes the file. */
  async close(): Promise<void> {
    this.#closed = true
    if (this.#statfsTimer) clearInterval(this.#statfsTimer)
    await this.#writing?.catch(() => {})
    await this.#file?.close()
    this.#file = null
  }

  #token(from: number, to: number): string {
    return `journal:${this.#cp.id}:${from}-${to}`
  }

  #oldestAt(): number {
    // commit() drops the marks before the shipped point: the first one left covers it.
    return this.#marks[0]?.at ?? Date.now()
  }

  async #writeLoop(): Promise<void> {
    while (this.#pending) {
      const group = this.#pending
      this.#pending = null
      try {
        await this.#write(group)
        group.resolve()
      } catch (err) {
        this.#failed = err
        const waiting = this.#pending as Group | null // appended while this group was written
        this.#pending = null
        group.reject(err)
        waiting?.reject(err)
        this.#o.onFailure?.(err)
      }
    }
    this.#writing = null
  }

  async #write(group: Group): Promise<void> {
    if (this.#fileBytes >= this.#o.segmentBytes) await this.#roll()
    const buf = Buffer.concat(group.frames, group.bytes)
    let written = 0
    while (written < buf.length) written += (await this.#file!.write(buf, written, buf.length - written)).bytesWritten
    if (this.#o.fsync) await this.#file!.datasync()
    this.#mark(this.#end, group.at)
    this.#end += buf.length
    this.stats.writes++
    this.#fileBytes += buf.length
    this.#freeBytes -= buf.length
    // Near the bound the estimate is checked against the filesystem now, not in a second.
    if (this.#freeBytes < 2 * this.#o.minFreeBytes) void this.#readFreeSpace()
  }

  async #roll(): Promise<void> {
    await this.#file?.close()
    this.#segments.push(this.#end)
    this.#file = await open(join(this.#o.dir, segmentName(this.#end)), 'a')
    this.#fileBytes = 0
    if (this.#o.fsync) await syncDir(this.#o.dir)
  }

  async #open(): Promise<void> {
    const { dir } = this.#o
    mkdirSync(dir, { recursive: true })
    try {
      this.#cp = JSON.parse(await readFile(join(dir, 'checkpoint.json'), 'utf8')) as Checkpoint
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      await this.#saveCheckpoint({ id: randomUUID(), shipped: 0, intent: null })
    }
    this.#segments = readdirSync(dir)
      .filter((f) => /^\d{20}\.log$/.test(f))
      .map((f) => Number(f.slice(0, 20)))
      .sort((a, b) => a - b)
    if (this.#segments.length === 0) this.#segments.push(this.#cp.shipped)
    const base = this.#segments.at(-1)!
    this.#file = await open(join(dir, segmentName(base)), 'a+')
    // The last segment is scanned for a torn tail; the rows after `shipped` are counted.
    const size = (await this.#file.stat()).size
    const valid = await this.#scanValid(size)
    if (valid < size) await this.#file.truncate(valid)
    this.#fileBytes = valid
    this.#end = base + valid
    for (let offset = this.#cp.shipped; offset < this.#end; ) {
      const { entries, offsets, next } = await this.#read(offset, this.#end, 10_000)
      entries.forEach((e, i) => this.#mark(offsets[i]!, e.at))
      this.#unshippedRows += entries.length
      offset = next
    }
  }

  /** Notes that the rows from `offset` on were appended at or after `at` (one mark per MARK_EVERY_MS). */
  #mark(offset: number, at: number): void {
    const last = this.#marks.at(-1)
    if (!last || at - last.at >= MARK_EVERY_MS) this.#marks.push({ offset, at })
  }

  /** How many bytes of the open (last) segment hold whole, intact records. */
  async #scanValid(size: number): Promise<number> {
    const file = this.#file!
    const header = Buffer.alloc(HEADER)
    let offset = 0
    while (offset + HEADER <= size) {
      await file.read(header, 0, HEADER, offset)
      const length = header.readUInt32LE(0)
      if (offset + HEADER + length > size) break
      const payload = Buffer.alloc(length)
      await file.read(payload, 0, length, offset + HEADER)
      if (crc32(payload) !== header.readUInt32LE(4)) break
      offset += HEADER + length
    }
    return offset
  }

  /** Up to `maxRows` records from `from` (a record boundary) up to `to`, with the offset of each. */
  async #read(from: number, to: number, maxRows: number): Promise<{ entries: ShippedEntry[]; offsets: number[]; next: number }> {
    const entries: ShippedEntry[] = []
    const offsets: number[] = []
    let offset = from
    while (offset < to && entries.length < maxRows) {
      // A record never spans two segments: a write goes whole into one.
      const base = this.#segments.findLast((s) => s <= offset)
      if (base === undefined) throw new Error(`journal offset ${offset} is before the oldest segment`)
      const segmentEnd = Math.min(to, this.#segments.find((s) => s > offset) ?? to)
      const buf = Buffer.allocUnsafe(Math.min(segmentEnd - offset, READ_CHUNK))
      const file = await open(join(this.#o.dir, segmentName(base)), 'r')
      try {
        let filled = 0
        while (filled < buf.length) {
          const { bytesRead } = await file.read(buf, filled, buf.length - filled, offset - base + filled)
          if (bytesRead === 0) throw new Error(`journal segment ${segmentName(base)} ends before offset ${offset + buf.length}`)
          filled += bytesRead
        }
      } finally {
        await file.close()
      }
      let at = 0
      while (at + HEADER <= buf.length && entries.length < maxRows) {
        const length = buf.readUInt32LE(at)
        if (at + HEADER + length > buf.length) break
        const body = at + HEADER
        entries.push({ table: JOURNAL_TABLES[buf.readUInt8(body)]!, at: buf.readDoubleLE(body + 1), json: buf.subarray(body + BODY_HEADER, body + length) })
        offsets.push(offset + at)
        at += HEADER + length
      }
      if (at === 0) throw new Error(`journal record at ${offset} is longer than ${READ_CHUNK} bytes`)
      offset += at
    }
    return { entries, offsets, next: offset }
  }

  async #saveCheckpoint(cp: Checkpoint): Promise<void> {
    const path = join(this.#o.dir, 'checkpoint.json')
    const tmp = `${path}.tmp`
    const file = await open(tmp, 'w')
    try {
      await file.writeFile(JSON.stringify(cp))
      await file.datasync()
    } finally {
      await file.close()
    }
    await rename(tmp, path)
    await syncDir(this.#o.dir)
    this.#cp = cp
  }
}

/** Where copyUnshipped's rows were in the log, how many of each table, and their file's digest. */
export interface JournalCopy {
  /** The log's id. */
  id: string
  /** Offsets in the log: from its shipped point to its end when the copy began. */
  from: number
  to: number
  bytes: number
  rows: Record<JournalTable, number>
  /** SHA-256 of the file written, hex. */
  sha256: string
}

/** copyUnshipped found a batch recorded as under way: what ClickHouse holds is not known. */
export class JournalBusyError extends Error {
  constructor() {
    super('the journal has a batch under way that ClickHouse has not confirmed (is it failing?): try again once it ships')
    this.name = 'JournalBusyError'
  }
}

/** One record: [u32 length][u32 CRC-32] then [u8 table][f64 appended at][the row's JSON]. */
function encodeRecord(table: JournalTable, at: number, json: string | Buffer): Buffer {
  const length = BODY_HEADER + Buffer.byteLength(json)
  const frame = Buffer.allocUnsafe(HEADER + length)
  frame.writeUInt8(JOURNAL_TABLES.indexOf(table), HEADER)
  frame.writeDoubleLE(at, HEADER + 1)
  if (typeof json === 'string') frame.write(json, HEADER + BODY_HEADER, 'utf8')
  else json.copy(frame, HEADER + BODY_HEADER)
  frame.writeUInt32LE(length, 0)
  frame.writeUInt32LE(crc32(frame.subarray(HEADER)), 4)
  return frame
}

/** How many bytes at the start of `data` are whole, intact records. */
function validPrefix(data: Buffer): number {
  let offset = 0
  while (offset + HEADER <= data.length) {
    const length = data.readUInt32LE(offset)
    const end = offset + HEADER + length
    if (length < BODY_HEADER || end > data.length) break
    if (crc32(data.subarray(offset + HEADER, end)) !== data.readUInt32LE(offset + 4)) break
    if (data.readUInt8(offset + HEADER) >= JOURNAL_TABLES.length) break
    offset = end
  }
  return offset
}

/** The records of a file copyUnshipped wrote, counted by table; throws unless every one is whole and intact. */
export async function countRecords(path: string): Promise<Record<JournalTable, number>> {
  const data = await readFile(path)
  if (validPrefix(data) < data.length) throw new Error(`${path}: the record at byte ${validPrefix(data)} is cut or damaged`)
  const rows = Object.fromEntries(JOURNAL_TABLES.map((t) => [t, 0])) as Record<JournalTable, number>
  for (let offset = 0; offset < data.length; offset += HEADER + data.readUInt32LE(offset)) rows[JOURNAL_TABLES[data.readUInt8(offset + HEADER)]!]++
  return rows
}

function newGroup(at: number): Group {
  let resolve!: () => void
  let reject!: (err: unknown) => void
  const done = new Promise<void>((res, rej) => {
    resolve = res
    reject = rej
  })
  // A failed group's promise may have no listener yet; the failure is reported by onFailure.
  done.catch(() => {})
  return { frames: [], bytes: 0, rows: 0, at, done, resolve, reject }
}

function segmentName(base: number): string {
  return `${String(base).padStart(20, '0')}.log`
}

/** Makes a rename or a new file in `dir` durable (POSIX: the directory entry needs its own fsync). */
async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r')
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}
