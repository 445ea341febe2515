import type { AlertRow } from '../storage/alerts.ts'
import type { WrittenConfigRow } from '../storage/configs.ts'
import type { EventRow } from '../storage/rows.ts'
import type { IgnoredRow } from '../storage/ignored.ts'
import type { RunStopRow } from '../storage/run-stops.ts'
import type { TransitionRow } from '../storage/transitions.ts'

/**
 * The durable journal of the write path: POST /events is answered once its rows are in the
 * journal, so ClickHouse is not on the request path; the shipper moves them to ClickHouse in
 * large idempotent batches. A row is bound for one table.
 */
export type JournalRow =
  | { table: 'events'; row: EventRow }
  | { table: 'pause_transitions'; row: TransitionRow }
  | { table: 'agent_configs'; row: WrittenConfigRow }
  | { table: 'budget_alerts'; row: AlertRow }
  | { table: 'ignored_pauses'; row: IgnoredRow }
  | { table: 'run_stops'; row: RunStopRow }

export type JournalTable = JournalRow['table']

/** The tables rows go to, in the order a batch inserts them (and, by index, their code in a segment record). */
export const JOURNAL_TABLES: readonly JournalTable[] = ['events', 'pause_transitions', 'agent_configs', 'budget_alerts', 'ignored_pauses', 'run_stops']

/** A row as read back for the rebuild, with when it was appended (epoch ms). */
export type JournalEntry = JournalRow & { at: number }

/**
 * A row as read back for shipping: its JSON bytes exactly as appended, never decoded; the
 * shipper sends these lines as the body of a JSONEachRow INSERT.
 */
export interface ShippedEntry {
  table: JournalTable
  at: number
  json: Buffer
}

/**
 * What the shipper inserts at once. Shipping the same batch again (after a crash between
 * its INSERT and its commit) sends the same `token`, which ClickHouse deduplicates.
 */
export interface JournalBatch {
  token: string
  entries: ShippedEntry[]
}

export interface JournalBacklog {
  /** Rows appended and not yet shipped. */
  rows: number
  /** Their size in the journal. */
  bytes: number
  /** When the oldest of them was appended (epoch ms), null when there are none. */
  oldestAt: number | null
}

/** How long the oldest row not yet shipped has waited, in seconds; 0 when there are none. */
export function backlogAgeSeconds(backlog: JournalBacklog, nowMs: number): number {
  return backlog.oldestAt === null ? 0 : Math.max(0, (nowMs - backlog.oldestAt) / 1000)
}

/** What /readyz, the metrics and the write path's bound see of a journal. */
export interface JournalStatus {
  backlog(): JournalBacklog
  /** The backlog is at the configured bound: writes are refused (503 journal_full). */
  readonly backlogFull: boolean
  /** The filesystem under the journal is under DISK_MIN_FREE_MB: writes are refused (503 disk_full). Embedded only. */
  readonly diskFull?: boolean
}

/** The reading side of a journal, which the shipper drains. */
export interface JournalSource {
  /**
   * The batch to ship now: the one begun and not committed (shipped again, same token),
   * else up to `maxRows` new rows, whose range is recorded durably before this returns;
   * null when nothing is waiting.
   */
  next(maxRows: number): Promise<JournalBatch | null>
  /** The batch is in ClickHouse: move past it and free what it held. */
  commit(batch: JournalBatch): Promise<void>
  backlog(): JournalBacklog
}

/**
 * Thrown when the filesystem under DATA_DIR has less free space than DISK_MIN_FREE_MB: POST
 * /events answers 503 naming it, before anything changed, until space returns.
 */
export class DiskFullError extends Error {
  readonly dir: string
  readonly freeBytes: number
  readonly minFreeBytes: number
  constructor(dir: string, freeBytes: number, minFreeBytes: number) {
    super(`the filesystem of ${dir} has ${mib(freeBytes)} MiB free, under DISK_MIN_FREE_MB (${mib(minFreeBytes)})`)
    this.name = 'DiskFullError'
    this.dir = dir
    this.freeBytes = freeBytes
    this.minFreeBytes = minFreeBytes
  }
}

function mib(bytes: number): string {
  return (Math.max(0, bytes) / 1048576).toFixed(1).replace(/\.0$/, '')
}

/** Thrown when the journal holds its configured bound: POST /events answers 503 with Retry-After. */
/**
 * What an erasure (burnrate users erase) asks of a journal: the user's rows are shipped
 * to ClickHouse like any (where the erasure deletes them), then no byte of them may stay in
 * the journal's storage, where a shipped row lingers (a segment file, a stream's node).
 */
export interface ErasableJournal {
  /**
   * The user's rows not yet shipped, and a test of whether every row of the user appended
   * before the call is shipped now (the shipper does it; the caller waits).
   */
  seal(userId: string): Promise<JournalSeal>
  /** Removes the rows shipped up to now from the journal's storage. */
  scrub(userId: string): Promise<void>
}

export interface JournalSeal {
  rows: number
  shipped(): Promise<boolean>
}

/** Whether a journal row (its JSON, as journaled) is of the user: every journal table's rows have user_id. */
export function rowOfUser(json: Buffer | string, userId: string): boolean {
  return (JSON.parse(json.toString()) as { user_id?: unknown }).user_id === userId
}

export class JournalFullError extends Error {
  readonly backlog: JournalBacklog
  constructor(backlog: JournalBacklog) {
    super(`the journal holds ${backlog.rows} rows not yet shipped to ClickHouse, its bound`)
    this.name = 'JournalFullError'
    this.backlog = backlog
  }
}
