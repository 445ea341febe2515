/**
 * The one catalogue of errors burnrate answers with. Responses are RFC 9457 problem
 * details (application/problem+json); clients and tests match on `code`, never on wording.
 */
export const PROBLEMS = {
  invalid_body: { status: 400, title: 'The request body is invalid' },
  invalid_query: { status: 400, title: 'The query string is invalid' },
  invalid_json: { status: 400, title: 'The request body is not valid JSON' },
  unauthorized: { status: 401, title: 'A valid x-api-key header is required' },
  agent_not_found: { status: 404, title: 'No such agent' },
  hold_not_found: { status: 404, title: 'No such open budget hold' },
  run_not_found: { status: 404, title: 'No such run' },
  not_found: { status: 404, title: 'No such route' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  payload_too_large: { status: 413, title: 'The request body is too large' },
  unsupported_media_type: { status: 415, title: 'The request body must be application/json' },
  rate_limited: { status: 429, title: 'Too many requests' },
  internal: { status: 500, title: 'Internal server error' },
  store_unavailable: { status: 503, title: 'A backing store is unavailable' },
  disk_full: { status: 503, title: "DATA_DIR's filesystem is under its bound of free space" },
  journal_full: { status: 503, title: 'The journal holds its bound of events not yet stored in ClickHouse' },
  export_busy: { status: 503, title: 'This instance runs as many exports as it may' },
} as const satisfies Record<string, { status: number; title: string }>

export type ProblemCode = keyof typeof PROBLEMS

/** One offending field of a validation error. */
export interface FieldError {
  field: string
  message: string
}

export interface ProblemBody {
  type: string
  title: string
  status: number
  code: ProblemCode
  detail: string
  errors?: FieldError[]
}

export class Problem extends Error {
  readonly code: ProblemCode
  readonly status: number
  readonly errors: FieldError[] | undefined
  /** Seconds, sent as Retry-After (RFC 9110 10.2.3) on 429 and 503. */
  readonly retryAfter: number | undefined

  constructor(code: ProblemCode, detail: string, opts: { errors?: FieldError[]; retryAfter?: number; cause?: unknown } = {}) {
    super(detail, { cause: opts.cause })
    this.name = 'Problem'
    this.code = code
    this.status = PROBLEMS[code].status
    this.errors = opts.errors
    this.retryAfter = opts.retryAfter
  }

  toBody(): ProblemBody {
    return {
      type: `urn:burnrate:problem:${this.code}`,
      title: PROBLEMS[this.code].title,
      status: this.status,
      code: this.code,
      detail: this.message,
      ...(this.errors ? { errors: this.errors } : {}),
    }
  }
}

export type Store = 'ClickHouse' | 'Redis'

/**
 * A store that does not answer (unreachable, timing out, overloaded, read-only during a
 * failover): the request may succeed later, so it is answered 503 with Retry-After, naming
 * the store. A store that answers with an error about the request itself (a query or
 * script defect) is not this: that error passes through and is answered 500.
 */
export class StoreUnavailableError extends Error {
  readonly store: Store
  constructor(store: Store, message: string, opts?: { cause?: unknown }) {
    super(message, opts)
    this.name = 'StoreUnavailableError'
    this.store = store
  }
}
