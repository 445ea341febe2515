import type { Readable } from 'node:stream'
import type { ClickHouseClient } from '@clickhouse/client'
import { Problem } from '../errors.ts'
import type { ExportRange } from '../schemas/export.ts'
import { exportEvents, type ExportFormat } from '../storage/exports.ts'

/** How a client is told to come back when every export slot is taken (s). */
const BUSY_RETRY_SECONDS = 5

const CONTENT_TYPES: Record<ExportFormat, string> = {
  csv: 'text/csv; charset=utf-8; header=present',
  ndjson: 'application/x-ndjson',
  parquet: 'application/vnd.apache.parquet',
}

const EXTENSIONS: Record<ExportFormat, string> = { csv: 'csv', ndjson: 'ndjson', parquet: 'parquet' }

export interface OpenExport {
  stream: Readable
  contentType: string
  /** burnrate-events-20261101T000000Z-20261201T000000Z.csv: the range, to the second. */
  filename: string
}

export type ExportOutcome = 'completed' | 'cancelled' | 'failed' | 'busy'

/**
 * Exports of a user's events. ClickHouse formats the rows and the bytes pass through as the
 * client takes them: an export of any size holds a chunk at a time. An export holds one of
 * `concurrency` slots of this instance from its start until its stream closes (done, failed
 * or its client gone); past them, 503 `export_busy` with Retry-After.
 */
export class ExportService {
  readonly #clickhouse: ClickHouseClient
  readonly #concurrency: number
  readonly #onOutcome: (format: ExportFormat, outcome: ExportOutcome) => void
  #running = 0

  constructor(o: { clickhouse: ClickHouseClient; concurrency: number; onOutcome?: (format: ExportFormat, outcome: ExportOutcome) => void }) {
    this.#clickhouse = o.clickhouse
    this.#concurrency = o.concurrency
    this.#onOutcome = o.onOutcome ?? (() => {})
  }

  /** Exports under way on this instance. */
  get running(): number {
    return this.#running
  }

  /** Starts an export: its first bytes are read (a store that fails fails here), its slot taken until its stream closes. */
  async open(userId: string, range: ExportRange): Promise<OpenExport> {
    if (this.#running >= this.#concurrency) {
      this.#onOutcome(range.format, 'busy')
      throw new Problem('export_busy', `${this.#running} exports are running on this instance, its most; retry after ${BUSY_RETRY_SECONDS} s`, { retryAfter: BUSY_RETRY_SECONDS })
    }
    this.#running++
    let stream: Readable
    try {
      stream = await exportEvents(this.#clickhouse, { userId, ...range })
    } catch (err) {
      this.#running--
      this.#onOutcome(range.format, 'failed')
      throw err
    }
    let outcome: ExportOutcome = 'cancelled'
    stream.once('end', () => (outcome = 'completed'))
    stream.once('error', () => (outcome = 'failed'))
    stream.once('close', () => {
      this.#running--
      this.#onOutcome(range.format, outcome)
    })
    return { stream, contentType: CONTENT_TYPES[range.format], filename: exportFilename(range) }
  }
}

export function exportFilename(range: ExportRange): string {
  const stamp = (us: number) => new Date(Math.floor(us / 1000)).toISOString().slice(0, 19).replace(/[-:]/g, '') + 'Z'
  return `burnrate-events-${stamp(range.fromUs)}-${stamp(range.toUs)}.${EXTENSIONS[range.format]}`
}
