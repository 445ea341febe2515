import type { ClickHouseClient } from '@clickhouse/client'
import { insertJsonLines } from '../storage/query.ts'
import { JOURNAL_TABLES, type JournalBatch, type JournalSource } from './types.ts'

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
}

/**
 * Stores one batch, one INSERT per table, each with the batch's token and the table's name
 * (ClickHouse deduplicates per table), then commits it in the journal.
 */
export async function shipBatch(clickhouse: ClickHouseClient, source: JournalSource, batch: JournalBatch): Promise<void> {
  for (const table of JOURNAL_TABLES) {
    const lines = batch.entries.filter((e) => e.table === table).flatMap((e) => [e.json, NEWLINE])
    await insertJsonLines(clickhouse, table, Buffer.concat(lines), `${batch.token}:${table}`)
  }
  await source.commit(batch)
}

const MAX_BACKOFF_MS = 30_000
const NEWLINE = Buffer.from('\n')

/**
 * Moves the journal into ClickHouse in large batches (issue 8; Langfuse's ClickhouseWriter
 * is the model): one INSERT per table per batch, each with the batch's deduplication token,
 * so a batch shipped twice is stored once. A batch is committed only after its INSERTs
 * succeeded; a failure is retried with exponential backoff, the same batch with the same
 * token, for as long as it takes (ClickHouse down: the journal holds the backlog).
 */
export class Shipper {
  readonly #o: ShipperOptions
  #loop: Promise<void> | null = null
  #stopping = false
  #wake: (() => void) | null = null
  /** Passes started so far; a flush waits for one that starts after it. */
  #passes = 0
  #waiters: Array<{ after: number; resolve: () => void }> = []
  #failures = 0
  #outageStart = 0

  constructor(o: ShipperOptions) {
    this.#o = o
  }

  start(): void {
    this.#loop ??= this.#run()
  }

  /** Ships without waiting out the interval (the journal holds a full batch). */
  kick(): void {
    this.#wake?.()
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

  /** Stops after the batch under way (what is left stays in the journal for the next start). */
  async stop(): Promise<void> {
    this.#stopping = true
    this.kick()
    await this.#loop
    this.#loop = null
  }

  async #run(): Promise<void> {
    while (!this.#stopping) {
      const pass = ++this.#passes
      const pause = await this.#pass()
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
    await shipBatch(this.#o.clickhouse, this.#o.source, batch)
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
    if (this.#stopping) return Promise.resolve()
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
