/**
 * One delivery attempt: a single POST with a deadline, reported as a value (never thrown) so
 * the retry loop classifies it by status code or error code.
 */
import http from 'node:http'
import https from 'node:https'
import { BlockedAddressError, guardedLookup } from './address-policy.ts'

/**
 * `sent`: the whole request had been handed to the connection when the attempt failed, so the
 * receiver may have acted on it (a timeout or a reset then proves nothing).
 */
export type AttemptResult =
  | { kind: 'status'; status: number; retryAfterMs: number | undefined }
  | { kind: 'timeout'; sent: boolean }
  | { kind: 'blocked'; address: string }
  | { kind: 'error'; code: string | undefined; name: string; sent: boolean }

export interface AttemptOptions {
  timeoutMs: number
  allowPrivate: boolean
  /** Longest wait a Retry-After header may ask for. */
  maxRetryAfterMs: number
}

/**
 * POSTs `body` as JSON to `target`. The deadline covers DNS, connect, TLS and the response.
 * The outcome is decided by the status line; the response body is read and discarded.
 */
export function postJson(target: URL, body: string, opts: AttemptOptions & { id: string }): Promise<AttemptResult> {
  return new Promise((resolve) => {
    const signal = AbortSignal.timeout(opts.timeoutMs)
    let response: AttemptResult | undefined
    let sent = false
    let settled = false
    const settle = (result: AttemptResult): void => {
      if (settled) return
      settled = true
      resolve(result)
    }
    // Once a status arrived the message was delivered (or refused); a later error, e.g. the
    // deadline cutting off a slow body, must not turn a 200 into a retry and a duplicate message.
    const fail = (err: unknown): void => settle(response ?? classifyError(err, signal, sent))

    const request = target.protocol === 'https:' ? https.request : http.request
    let req: http.ClientRequest
    try {
      req = request(target, {
        method: 'POST',
        signal,
        // A fresh agent per request: no keep-alive socket outlives drain(), and no proxy taken from
        // the environment (NODE_USE_ENV_PROXY) in which the lookup below would check the proxy's
        // address instead of the target's.
        agent: false,
        // Literal IP hosts never reach lookup; the caller checks them (checkWebhookUrl).
        lookup: opts.allowPrivate ? undefined : guardedLookup,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'user-agent': 'burnrate-webhook',
          // The same on every attempt: a receiver that keeps the keys it saw drops a repeat.
          'idempotency-key': opts.id,
        },
      })
    } catch (err) {
      fail(err)
      return
    }
    req.on('error', fail)
    // The request is written out: from here a failure without an answer is ambiguous.
    req.on('finish', () => (sent = true))
    req.on('response', (res) => {
      const result: AttemptResult = {
        kind: 'status',
        status: res.statusCode ?? 0,
        retryAfterMs: parseRetryAfter(res.headers['retry-after'], opts.maxRetryAfterMs),
      }
      response = result
      // Errors reading the discarded body change nothing (see `fail`), but must be listened for.
      res.on('error', () => {})
      // Settle once the socket is done, so drain() leaves no open connection behind.
      res.on('close', () => settle(result))
      res.resume()
    })
    req.end(body)
  })
}

function classifyError(err: unknown, signal: AbortSignal, sent: boolean): AttemptResult {
  // Our deadline fired: decided by the signal we own, not by the error's wording.
  if (signal.aborted) return { kind: 'timeout', sent }
  if (err instanceof BlockedAddressError) return { kind: 'blocked', address: err.address }
  const code = err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : undefined
  return { kind: 'error', code, name: err instanceof Error ? err.name : typeof err, sent }
}

/**
 * Retry-After (RFC 9110 10.2.3) is either delay-seconds or an HTTP-date. Returns milliseconds
 * capped at `maxMs`, or undefined when absent or unparseable.
 */
export function parseRetryAfter(value: string | undefined, maxMs: number, now = Date.now()): number | undefined {
  if (value === undefined) return undefined
  const trimmed = value.trim()
  let ms: number
  if (/^\d+$/.test(trimmed)) {
    ms = Number(trimmed) * 1000
  } else {
    // All three HTTP-date forms (RFC 9110 5.6.7) start with a day name; Date.parse alone would
    // also take values such as "-1".
    const date = /^[A-Z][a-z]{2}/.test(trimmed) ? Date.parse(trimmed) : Number.NaN
    if (Number.isNaN(date)) return undefined
    ms = date - now
  }
  return Math.min(Math.max(ms, 0), maxMs)
}
