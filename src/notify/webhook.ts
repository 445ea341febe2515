/**
 * Sends the auto-pause chat message: in the background, so ingestion never waits; with a
 * per-attempt timeout and bounded retries; every failure logged,
 * counted and visible in `stats` and Prometheus; nothing thrown, no unhandled rejection.
 *
 * Delivery is at most once for what a receiver may have seen: an attempt is
 * repeated only when its failure proves the message was not taken (no connection, the
 * request not written out, 429, 502 or 503). A timeout or a reset after the whole request
 * was written, or any other answer, ends the delivery: a receiver that answered 200 after
 * our deadline gets the message once, not four times. Every attempt carries the same
 * Idempotency-Key, so a receiver that keeps the keys it saw can drop a repeat.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { Counter } from 'prom-client'
import type { Registry } from 'prom-client'
import { checkWebhookUrl, webhookHost } from './address-policy.ts'
import { postJson } from './attempt.ts'
import type { AttemptResult } from './attempt.ts'
import { chatMessage } from './message.ts'
import type { Notice } from './message.ts'

// The module the rest of burnrate imports from (src/ingest, routes that validate or mask URLs).
export type { AlertNotice, Notice, PauseNotice } from './message.ts'
export { checkWebhookUrl, maskWebhookUrl } from './address-policy.ts'

/** pino-compatible, e.g. fastify's `app.log`. */
export interface NotifierLogger {
  warn(obj: object, msg: string): void
  info?(obj: object, msg: string): void
}

export interface NotifierOptions {
  /** WEBHOOK_ALLOW_PRIVATE: allow loopback, private and link-local targets. */
  allowPrivate: boolean
  /** Per attempt, covering DNS, connect, TLS and response. Default 5000. */
  timeoutMs?: number
  /** Attempts in all, the first included. Default 4 (1 + 3 retries). */
  maxAttempts?: number
  /** Base of the exponential backoff between attempts. Default 500. */
  backoffMs?: number
  /** Default: console. */
  logger?: NotifierLogger
  /** Where the Prometheus counters are registered; none when omitted. */
  registry?: Registry
}

export interface NotifierStats {
  /** Deliveries the receiver answered with 2xx. */
  sent: number
  /** Deliveries given up: a final error, or retries exhausted. */
  failed: number
  /** Deliveries whose request was written out and never answered in time: perhaps delivered, not repeated. */
  unconfirmed: number
  /** Attempts repeated after a retryable failure. */
  retried: number
  /** Deliveries not attempted because the SSRF guard or URL check refused the target. */
  refused: number
  /** Deliveries under way (attempting or waiting to retry). */
  inFlight: number
}

type Outcome = 'sent' | 'failed' | 'refused' | 'unconfirmed'

/** A Retry-After longer than this is waited for only this long, so shutdown stays bounded. */
const MAX_RETRY_AFTER_MS = 30_000
/** Ceiling on deliveries held at once; beyond it new ones are dropped (counted failed, logged). */
const MAX_IN_FLIGHT = 1000

/** Socket and DNS errors worth another attempt, before the request was written out; any other error is final. */
const TRANSIENT_ERROR_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'EAI_AGAIN', // temporary DNS failure; ENOTFOUND (no such name) is final
  'ERR_SOCKET_CONNECTION_TIMEOUT', // every address family timed out (autoSelectFamily)
])

type Verdict = { kind: 'sent' } | { kind: 'refused' } | { kind: 'final' } | { kind: 'unconfirmed' } | { kind: 'retry'; minDelayMs: number }

function judge(result: AttemptResult): Verdict {
  switch (result.kind) {
    case 'status': {
      const { status } = result
      if (status >= 200 && status < 300) return { kind: 'sent' }
      // Answers that say the message was not taken: 429 (RFC 6585 4) and 503, for which
      // Retry-After is defined (RFC 9110 10.2.3), and 502 (a gateway that could not reach the
      // receiver). A 500 or a 504 may come after the message was posted: final. Redirects are
      // not followed (one could lead to an address the guard refuses): 3xx is final, as is 4xx.
      if (status === 429 || status === 503) return { kind: 'retry', minDelayMs: result.retryAfterMs ?? 0 }
      if (status === 502) return { kind: 'retry', minDelayMs: 0 }
      return { kind: 'final' }
    }
    case 'timeout':
      return result.sent ? { kind: 'unconfirmed' } : { kind: 'retry', minDelayMs: 0 }
    case 'blocked':
      return { kind: 'refused' }
    case 'error':
      if (result.sent) return { kind: 'unconfirmed' }
      return result.code !== undefined && TRANSIENT_ERROR_CODES.has(result.code) ? { kind: 'retry', minDelayMs: 0 } : { kind: 'final' }
  }
}

/** What a log line says about an attempt; never the URL's secret path. */
function describe(result: AttemptResult): object {
  switch (result.kind) {
    case 'status':
      return { status: result.status }
    case 'timeout':
      return { error: 'timeout', sent: result.sent }
    case 'blocked':
      return { error: 'blocked_address', address: result.address }
    case 'error':
      return { error: result.code ?? result.name, sent: result.sent }
  }
}

const consoleLogger: NotifierLogger = {
  warn: (obj, msg) => console.warn(msg, obj),
}

interface Metrics {
  deliveries: Counter<string>
  retries: Counter<string>
}

/** Reuses counters already in the registry, so several notifiers may share one registry. */
function counter(registry: Registry, name: string, help: string, labelNames: string[]): Counter<string> {
  const existing = registry.getSingleMetric(name)
  if (existing instanceof Counter) return existing
  return new Counter({ name, help, labelNames, registers: [registry] })
}

function createMetrics(registry: Registry): Metrics {
  const deliveries = counter(
    registry,
    'burnrate_webhook_deliveries_total',
    'Chat webhook deliveries by final outcome (sent, failed, refused, unconfirmed: written out, never answered in time, not repeated)',
    ['outcome'],
  )
  // Start every series at 0, so a dashboard sees "no failures" rather than no data.
  for (const outcome of ['sent', 'failed', 'refused', 'unconfirmed']) deliveries.inc({ outcome }, 0)
  const retries = counter(registry, 'burnrate_webhook_retries_total', 'Chat webhook attempts repeated after a retryable failure', [])
  return { deliveries, retries }
}

const WARNINGS: Record<Exclude<Outcome, 'sent'>, string> = {
  refused: 'chat webhook target refused',
  failed: 'chat webhook delivery failed',
  unconfirmed: 'chat webhook did not answer in time after receiving the message; not sent again (it may have been delivered)',
}

export class WebhookNotifier {
  readonly #allowPrivate: boolean
  readonly #timeoutMs: number
  readonly #maxAttempts: number
  readonly #backoffMs: number
  readonly #logger: NotifierLogger
  readonly #metrics: Metrics | undefined
  readonly #stats: NotifierStats = { sent: 0, failed: 0, unconfirmed: 0, retried: 0, refused: 0, inFlight: 0 }
  readonly #pending = new Set<Promise<void>>()

  constructor(opts: NotifierOptions) {
    this.#allowPrivate = opts.allowPrivate
    this.#timeoutMs = opts.timeoutMs ?? 5000
    this.#maxAttempts = Math.max(1, opts.maxAttempts ?? 4)
    this.#backoffMs = opts.backoffMs ?? 500
    this.#logger = opts.logger ?? consoleLogger
    this.#metrics = opts.registry ? createMetrics(opts.registry) : undefined
  }

  /** A snapshot of the counters. */
  get stats(): NotifierStats {
    return { ...this.#stats }
  }

  /** Fire and forget: returns at once; delivery runs in the background (ingestion never waits). */
  notify(url: string, notice: Notice): void {
    const log = { agentId: notice.agentId, userId: notice.userId, host: webhookHost(url) }
    if (this.#stats.inFlight >= MAX_IN_FLIGHT) {
      this.#finish('failed', { ...log, error: 'queue_full', inFlight: this.#stats.inFlight })
      return
    }
    this.#stats.inFlight++
    const delivery = this.#deliver(url, notice, log)
      // #deliver reports its own outcomes; this catches what it did not foresee, such as a
      // notice whose `at` is an invalid Date.
      .catch((err: unknown) => this.#finish('failed', { ...log, error: err instanceof Error ? err.name : 'unknown' }))
      .finally(() => {
        this.#stats.inFlight--
        this.#pending.delete(delivery)
      })
    this.#pending.add(delivery)
  }

  /** Resolves when every queued delivery has finished (success or final failure). */
  async drain(): Promise<void> {
    // Loop: a delivery may be queued while we wait for the others.
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending])
  }

  async #deliver(url: string, notice: Notice, log: object): Promise<void> {
    const problem = checkWebhookUrl(url, this.#allowPrivate)
    if (problem !== null) return this.#finish('refused', { ...log, error: problem })
    const target = new URL(url)
    const body = JSON.stringify(chatMessage(notice))

    for (let attempt = 1; ; attempt++) {
      const result = await postJson(target, body, {
        id: notice.id,
        timeoutMs: this.#timeoutMs,
        allowPrivate: this.#allowPrivate,
        maxRetryAfterMs: MAX_RETRY_AFTER_MS,
      })
      const verdict = judge(result)
      const details = { ...log, attempt, ...describe(result) }
      if (verdict.kind === 'sent') return this.#finish('sent', details)
      if (verdict.kind === 'refused') return this.#finish('refused', details)
      if (verdict.kind === 'unconfirmed') return this.#finish('unconfirmed', details)
      if (verdict.kind === 'final' || attempt >= this.#maxAttempts) return this.#finish('failed', details)

      const delayMs = Math.round(Math.max(verdict.minDelayMs, this.#backoff(attempt)))
      this.#stats.retried++
      this.#metrics?.retries.inc()
      this.#info({ ...details, delayMs }, 'chat webhook attempt failed; retrying')
      await sleep(delayMs)
    }
  }

  /** Exponential backoff with "equal jitter": half fixed, half random, so retries spread out. */
  #backoff(attempt: number): number {
    const ceiling = Math.min(this.#backoffMs * 2 ** (attempt - 1), MAX_RETRY_AFTER_MS)
    return ceiling / 2 + Math.random() * (ceiling / 2)
  }

  #finish(outcome: Outcome, details: object): void {
    this.#stats[outcome]++
    this.#metrics?.deliveries.inc({ outcome })
    if (outcome === 'sent') this.#info(details, 'chat webhook delivered')
    else this.#warn({ ...details, outcome }, WARNINGS[outcome])
  }

  // A logger that throws must not break delivery or escape notify(); the counters still tell.
  #warn(details: object, msg: string): void {
    try {
      this.#logger.warn(details, msg)
    } catch {
      /* nothing left to report to */
    }
  }

  #info(details: object, msg: string): void {
    try {
      this.#logger.info?.(details, msg)
    } catch {
      /* nothing left to report to */
    }
  }
}
