import type { Operation, Problem } from './types.js'

/**
 * Codes of failures that are not an HTTP answer: the request never got one
 * (`network_error`, `timeout`), the caller gave up (`aborted`), or the answer was not
 * what burnrate sends (`invalid_response`), or the client itself failed unexpectedly
 * (`internal_error`), or the buffered mode's queue was full and dropped its oldest events
 * (`buffer_full`). Otherwise `code` is the server's problem code
 * (`unauthorized`, `rate_limited`, `store_unavailable`, …) or `http_<status>`.
 */
export type LocalErrorCode = 'network_error' | 'timeout' | 'aborted' | 'invalid_response' | 'internal_error' | 'buffer_full'

export interface BurnrateErrorInit {
  operation: Operation
  code: string
  status?: number
  problem?: Problem
  retryable: boolean
  attempts?: number
  eventId?: string
  cause?: unknown
}

/**
 * A request to burnrate that failed after its retries. Handed to `onError` (or logged with
 * console.warn); never thrown out of send(), guard(), flush(), close(), refresh() or waitUntilResumed().
 */
export class BurnrateError extends Error {
  override readonly name = 'BurnrateError'
  /**
   * 'config' (start-up POST /config), 'event' (POST /events, or one event of a batch), 'batch'
   * (a buffered mode's POST /events/batch as a whole), 'refresh' (GET /agents/{id}), 'hold'
   * (guard()'s POST /holds) or 'release' (its DELETE /holds/{id}).
   */
  readonly operation: Operation
  /** The server's problem code, `http_<status>`, or a LocalErrorCode. */
  readonly code: string
  /** HTTP status of the last answer; undefined when there was none. */
  readonly status: number | undefined
  /** The problem+json body of the last answer, when there was one. */
  readonly problem: Problem | undefined
  /** Whether the last failure was of a kind that is retried (network, timeout, 429, 5xx). */
  readonly retryable: boolean
  /** Requests made, retries included. */
  attempts: number
  /** The event_id of the event that failed (operation 'event'). */
  readonly eventId: string | undefined

  constructor(message: string, init: BurnrateErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause })
    this.operation = init.operation
    this.code = init.code
    this.status = init.status
    this.problem = init.problem
    this.retryable = init.retryable
    this.attempts = init.attempts ?? 1
    this.eventId = init.eventId
  }
}
