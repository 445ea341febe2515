import type { ClickHouseClient } from '@clickhouse/client'
import { toChDateTime } from '../storage/clickhouse.ts'
import { clickhouseCode } from '../storage/failures.ts'
import { insert, insertJsonLines } from '../storage/query.ts'
import { JOURNAL_TABLES, type JournalBatch, type JournalSource, type JournalTable, type ShippedEntry } from './types.ts'

/** pino-compatible. */
interface Log {
  info(obj: object, msg: string): void
  warn(obj: object, msg: string): void
}

export interface ShipperOptions {
  source: JournalSource
  clickhouse: ClickHouseClient
  /** Rows per batch at most; a full batch is followed at once by the next. */
  maxRows: number
  /** How long a row waits for its batch to fill: a batch goes out this often under load. */
  intervalMs: number
  log: Log
  /** Told about every batch stored (metrics): its rows, and how long each waited since its append. */
  onShipped?: (s: { rows: number; durationMs: number; waitedMs: number[] }) => void
  /** Told about every failed attempt (metrics). */
  onFailed?: (err: unknown) => void
  /** Told about every row moved to dead_letters (metrics, /readyz, the log). */
  onDeadLetter?: (d: DeadLetter) => void
}

/** A row ClickHouse refused for its content, moved to the dead_letters table. */
export interface DeadLetter {
  table: JournalTable
  json: Buffer
  error: string
}

/**
 * Stores one batch, one INSERT per table, each with the batch's token and the table's name
 * (ClickHouse deduplicates per table), then commits it in the journal. A row ClickHouse
 * refuses for its content (the edge check should let none in) must not hold back the
 * others: the batch is halved until the row is alone, every other row is stored, and the
 * row goes to dead_letters. The halves' tokens follow from the batch's, so a batch shipped
 * again after a crash stores nothing twice, dead letters included.
 */
export async function shipBatch(
  clickhouse: ClickHouseClient,
  source: JournalSource,
  batch: JournalBatch,
  onDeadLetter: (d: DeadLetter) => void = () => {},
): Promise<void> {
  for (const table of JOURNAL_TABLES) {
    await insertIsolating(clickhouse, table, batch.entries.filter((e) => e.table === table), `${batch.token}:${table}`, onDeadLetter)
  }
  await source.commit(batch)
}

/** ClickHouse codes that refuse a row's content (src/Common/ErrorCodes.cpp): the row is at fault, not the store. */
const DATA_ERROR_CODES: ReadonlySet<number> = new Set([
  6, // CANNOT_PARSE_TEXT
  25, // CANNOT_PARSE_ESCAPE_SEQUENCE
  26, // CANNOT_PARSE_QUOTED_STRING
  27, // CANNOT_PARSE_INPUT_ASSERTION_FAILED
  32, // ATTEMPT_TO_READ_AFTER_EOF
  38, // CANNOT_PARSE_DATE
  41, // CANNOT_PARSE_DATETIME
  53, // TYPE_MISMATCH
  69, // ARGUMENT_OUT_OF_BOUND
  70, // CANNOT_CONVERT_TYPE
  72, // CANNOT_PARSE_NUMBER
  117, // INCORRECT_DATA
  131, // TOO_LARGE_STRING_SIZE
  349, // CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
  395, // FUNCTION_THROW_IF_VALUE_IS_NON_ZERO
  469, // VIOLATED_CONSTRAINT
])

async function insertIsolating(
  clickhouse: ClickHouseClient,
  table: JournalTable,
  entries: readonly ShippedEntry[],
  token: string,
  onDeadLetter: (d: DeadLetter) => void,
): Promise<void> {
  if (entries.length === 0) return
  try {
    await insertJsonLines(clickhouse, table, Buffer.concat(entries.flatMap((e) => [e.json, NEWLINE])), token)
  } catch (err) {
    const code = clickhouseCode(err)
    if (code === null || !DATA_ERROR_CODES.has(code)) throw err
    if (entries.length > 1) {
      const half = Math.ceil(entries.length / 2)
      await insertIsolating(clickhouse, table, entries.slice(0, half), `${token}/a`, onDeadLetter)
      await insertIsolating(clickhouse, table, entries.slice(half), `${token}/b`, onDeadLetter)
      return
    }
    const [entry] = entries
    const error = err instanceof Error ? err.message : String(err)
    await insert(clickhouse, 'dead_letters', [{ at: toChDateTime(Date.now()), target_table: table, row: entry!.json.toString('utf8'), error }], `${token}/dead`)
    onDeadLetter({ table, json: entry!.json, error })
  }
}

const MAX_BACKOFF_MS = 30_000
const NEWLINE = Buffer.from('\n')

/**
 * Moves the journal into ClickHouse in large batches (modelled on Langfuse's ClickhouseWriter):
 * one INSERT per table per batch, each with the batch's deduplication token, so a batch
 * shipped twice is stored once. A batch is committed only after its INSERTs
 * succeeded; a failure is retried with exponential backoff, the same batch with the same
 * token, for as long as it takes (ClickHouse down: the journal holds the backlog).
 */
export class Shipper {
  readonly #o: ShipperOptions
  #loop: Promise<void> | null = null
  #stopping = false
  #wake: (() => void) | null = null
  #kicked = false
  /** Passes started so far; a flush waits for one that starts after it. */
  #passes = 0
  #waiters: Array<{ after: number; resolve: () => void }> = []
  #failures = 0
  #outageStart = 0
  /** Holds taken (hold()) and not released: no pass starts while there is one. */
  #held = 0
  #resume: (() => void) | null = null
  #current: Promise<number> | null = null

  constructor(o: ShipperOptions) {
    this.#o = o
  }

  start(): void {
    this.#loop ??= this.#run()
  }

  /** Ships without waiting out the interval (the journal holds a full batch); a kick during a pass starts the next one at once. */
  kick(): void {
    if (this.#wake) this.#wake()
    else this.#kicked = true
  }

  /**
   * Ships until the journal is empty, or `timeoutMs` passed; resolves whether it is
   * empty (graceful shutdown; tests that read ClickHouse right after writing). At least one
   * pass that starts after the call runs: what was appended before it is looked at.
   */
  async flush(timeoutMs = 10_000): Promise<boolean> {
    const deadline = performance.now() + timeoutMs
    do {
      if (!this.#loop || performance.now() > deadline) return false
      const after = this.#passes + 1
      const pass = new Promise<void>((resolve) => this.#waiters.push({ after, resolve }))
      // While ClickHouse fails, the backoff stands: a flush must not turn it into a busy loop.
      if (this.#failures === 0) this.kick()
      await Promise.race([pass, new Promise((r) => setTimeout(r, Math.max(0, deadline - performance.now())).unref())])
    } while (this.#failures > 0 || this.#o.source.backlog().rows > 0)
    return true
  }

  /**
   * Stops shipping until the returned release is called: resolves once the pass under way
   * (if any) has ended, so nothing moves from the journal into ClickHouse between the two
   * (a backup's consistency point: ClickHouse then holds exactly the journal up to its shipped
   * offset). The journal goes on taking rows meanwhile. Calling release again does nothing.
   */
  async hold(): Promise<() => void> {
    this.#held++
    await this.#current
    let released = false
    return () => {
      if (released) return
      released = true
      if (--this.#held > 0) return
      const resume = this.#resume
      this.#resume = null
      resume?.()
    }
  }

  /** Stops after the batch under way (what is left stays in the journal for the next start). */
  async stop(): Promise<void> {
    this.#stopping = true
    this.#resume?.()
    this.kick()
    await this.#loop
    this.#loop = null
  }

  async #run(): Promise<void> {
    while (!this.#stopping) {
      if (this.#held > 0) {
        await new Promise<void>((resolve) => (this.#resume = resolve))
        continue
      }
      const pass = ++this.#passes
      this.#current = this.#pass()
      const pause = await this.#current
      this.#current = null
      this.#waiters = this.#waiters.filter((w) => (w.after <= pass ? (w.resolve(), false) : true))
      await this.#sleep(pause)
    }
  }

  /** Ships one batch; returns how long to wait before the next pass. */
  async #pass(): Promise<number> {
    try {
      const batch = await this.#o.source.next(this.#o.maxRows)
      if (batch) await this.#ship(batch)
      this.#recovered()
      // A full batch says more is waiting: go on at once. Otherwise let the next one fill.
      return batch !== null && batch.entries.length >= this.#o.maxRows ? 0 : this.#o.intervalMs
    } catch (err) {
      this.#failed(err)
      return Math.min(MAX_BACKOFF_MS, 100 * 2 ** Math.min(this.#failures, 10)) * (0.5 + Math.random() / 2)
    }
  }

  async #ship(batch: JournalBatch): Promise<void> {
    const started = performance.now()
    await shipBatch(this.#o.clickhouse, this.#o.source, batch, this.#o.onDeadLetter)
    const now = Date.now()
    this.#o.onShipped?.({ rows: batch.entries.length, durationMs: performance.now() - started, waitedMs: batch.entries.map((e) => now - e.at) })
  }

  /** Logs the first failure of an outage; the backoff and the metrics tell the rest. */
  #failed(err: unknown): void {
    if (this.#failures++ === 0) {
      this.#outageStart = Date.now()
      this.#o.log.warn({ err, backlog: this.#o.source.backlog() }, 'cannot ship the journal to ClickHouse; retrying, POST /events goes on')
    }
    this.#o.onFailed?.(err)
  }

  #recovered(): void {
    if (this.#failures === 0) return
    this.#o.log.info({ failedAttempts: this.#failures, outageMs: Date.now() - this.#outageStart, backlog: this.#o.source.backlog() }, 'shipping the journal to ClickHouse again')
    this.#failures = 0
  }

  #sleep(ms: number): Promise<void> {
    if (this.#stopping || this.#kicked) {
      this.#kicked = false
      return Promise.resolve()
    }
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms)
      function done() {
        clearTimeout(timer)
        resolve()
      }
      this.#wake = () => {
        this.#wake = null
        done()
      }
    })
  }
}
