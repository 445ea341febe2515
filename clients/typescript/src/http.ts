import { BurnrateError } from './errors.js'
import type { Operation, Problem } from './types.js'

export type FetchLike = (input: string, init: RequestInit) => Promise<Response>

export interface RetryPolicy {
  /** Per attempt, from sending the request to the end of the answer's body. */
  timeoutMs: number
  /** Retries after the first attempt (network errors, timeouts, 429, 5xx). */
  maxRetries: number
  /** Backoff before retry n (0-based): about baseDelayMs * 2^n, with jitter. */
  baseDelayMs: number
  /** Upper bound of any wait, a Retry-After included. */
  maxDelayMs: number
}

export interface JsonRequest {
  operation: Operation
  method: 'GET' | 'POST' | 'DELETE'
  url: string
  apiKey: string
  body?: unknown
  /** Statuses besides 2xx that are an answer, not a failure (refresh: 404 agent_not_found). */
  accept?: (status: number, body: unknown) => boolean
  signal?: AbortSignal | undefined
  eventId?: string
}

export interface JsonAnswer {
  status: number
  body: unknown
  /** Its Retry-After, in ms from now, when it carries one (POST /events/batch: a 200 with events refused for the key's budget). */
  retryAfterMs?: number | undefined
}

type Attempt =
  | { ok: true; answer: JsonAnswer }
  | { ok: false; error: BurnrateError; retryAfterMs: number | undefined }

/**
 * One JSON request with bounded retries. Retried: network errors, timeouts, 429 and 5xx
 * (waiting Retry-After when given, capped at maxDelayMs, else exponential backoff with
 * jitter). Final: every other status. Rejects only with a BurnrateError.
 */
export async function requestJson(fetchFn: FetchLike, policy: RetryPolicy, req: JsonRequest): Promise<JsonAnswer> {
  for (let attempt = 0; ; attempt++) {
    const result = await attemptOnce(fetchFn, policy.timeoutMs, req)
    if (result.ok) return result.answer
    const { error } = result
    error.attempts = attempt + 1
    if (!error.retryable || attempt >= policy.maxRetries || req.signal?.aborted) throw error
    const delay = result.retryAfterMs !== undefined ? retryAfterDelay(result.retryAfterMs, policy.maxDelayMs) : backoffDelay(attempt, policy)
    if (!(await sleep(delay, req.signal))) {
      throw new BurnrateError(`${describe(req)}: aborted`, { operation: req.operation, code: 'aborted', retryable: false, attempts: attempt + 1, eventId: req.eventId })
    }
  }
}

function describe(req: JsonRequest): string {
  const path = req.url.replace(/^[a-z]+:\/\/[^/]+/i, '')
  return `burnrate ${req.method} ${path}`
}

async function attemptOnce(fetchFn: FetchLike, timeoutMs: number, req: JsonRequest): Promise<Attempt> {
  const controller = new AbortController()
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    controller.abort()
  }, timeoutMs)
  const onAbort = () => controller.abort()
  if (req.signal) {
    if (req.signal.aborted) controller.abort()
    else req.signal.addEventListener('abort', onAbort, { once: true })
  }
  const headers: Record<string, string> = { 'x-api-key': req.apiKey, accept: 'application/json, application/problem+json' }
  const init: RequestInit = { method: req.method, headers, signal: controller.signal }
  if (req.body !== undefined) {
    headers['content-type'] = 'application/json'
    init.body = JSON.stringify(req.body)
  }
  const base = { operation: req.operation, eventId: req.eventId }
  try {
    let status: number
    let text: string
    let retryAfter: string | null
    try {
      const res = await fetchFn(req.url, init)
      status = res.status
      retryAfter = res.headers.get('retry-after')
      text = await res.text() // inside the timeout: a stalled body is a timeout too
    } catch (cause) {
      if (req.signal?.aborted) {
        return { ok: false, error: new BurnrateError(`${describe(req)}: aborted`, { ...base, code: 'aborted', retryable: false, cause }), retryAfterMs: undefined }
      }
      if (timedOut) {
        return { ok: false, error: new BurnrateError(`${describe(req)}: no answer within ${timeoutMs} ms`, { ...base, code: 'timeout', retryable: true, cause }), retryAfterMs: undefined }
      }
      const why = cause instanceof Error ? causeMessage(cause) : String(cause)
      return { ok: false, error: new BurnrateError(`${describe(req)}: ${why}`, { ...base, code: 'network_error', retryable: true, cause }), retryAfterMs: undefined }
    }

    const body = parseJson(text)
    if ((status >= 200 && status < 300) || req.accept?.(status, body)) {
      if (body === undefined) {
        return { ok: false, error: new BurnrateError(`${describe(req)}: ${status} answer is not JSON`, { ...base, code: 'invalid_response', status, retryable: false }), retryAfterMs: undefined }
      }
      return { ok: true, answer: { status, body, retryAfterMs: parseRetryAfter(retryAfter) } }
    }
    const problem = isObject(body) ? (body as Problem) : undefined
    const code = typeof problem?.code === 'string' ? problem.code : `http_${status}`
    const retryable = status === 429 || status >= 500
    const detail = typeof problem?.detail === 'string' ? `: ${problem.detail}` : ''
    const error = new BurnrateError(`${describe(req)}: ${status} ${code}${detail}`, { ...base, code, status, problem, retryable })
    return { ok: false, error, retryAfterMs: status === 429 || status === 503 ? parseRetryAfter(retryAfter) : undefined }
  } finally {
    clearTimeout(timer)
    req.signal?.removeEventListener('abort', onAbort)
  }
}

/** undici's "fetch failed" hides the reason in `cause`: show both. */
function causeMessage(err: Error): string {
  const inner = (err as { cause?: unknown }).cause
  if (inner instanceof Error && inner.message && inner.message !== err.message) return `${err.message} (${inner.message})`
  return err.message
}

function parseJson(text: string): unknown {
  if (text === '') return undefined
  try {
    return JSON.parse(text) as unknown
  } catch {
    return undefined
  }
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/**
 * Retry-After (RFC 9110 10.2.3): delay-seconds or an HTTP-date. Milliseconds from now,
 * or undefined when absent or unreadable.
 */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined
  const v = value.trim()
  if (/^\d+$/.test(v)) return Number(v) * 1000
  const date = Date.parse(v)
  if (Number.isNaN(date)) return undefined
  return Math.max(0, date - now)
}

/** The server's wait, capped, plus up to 10 % so clients told the same second spread out. */
export function retryAfterDelay(ms: number, maxDelayMs: number): number {
  return Math.min(maxDelayMs, ms + Math.random() * ms * 0.1)
}

/** "Equal jitter": between half and all of base * 2^attempt, capped. */
export function backoffDelay(attempt: number, policy: Pick<RetryPolicy, 'baseDelayMs' | 'maxDelayMs'>): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** attempt)
  return ceiling / 2 + (Math.random() * ceiling) / 2
}

/** Resolves true after `ms`, or false as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false)
    const onAbort = () => {
      clearTimeout(timer)
      resolve(false)
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve(true)
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}
