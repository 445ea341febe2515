import { BurnrateError } from './errors.js'
import type { EventBody } from './event.js'
import { backoffDelay, retryAfterDelay, sleep } from './http.js'
import type { RetryPolicy } from './http.js'
import type { BufferOptions } from './types.js'

/** The buffered mode's defaults: a batch every 100 events or every second, at most 10,000 waiting. */
export const BUFFER_DEFAULTS: Readonly<BufferSettings> = { maxEvents: 100, maxAgeMs: 1000, maxQueued: 10_000 }

/** What one POST /events/batch takes at most: 1,000 events, a body of 4 MiB. */
export const MAX_BATCH_EVENTS = 1000
export const MAX_BATCH_BYTES = 4 * 1024 * 1024
/** `{"events":[]}` */
const EMPTY_BATCH_BYTES = 13
/** setTimeout's longest delay. */
const MAX_TIMER_MS = 2_147_483_647

export interface BufferSettings {
  maxEvents: number
  maxAgeMs: number
  maxQueued: number
}

/** The settings of the `buffer` option; null when it is off. Throws a TypeError for invalid ones. */
export function bufferSettings(option: BufferOptions | boolean | undefined): BufferSettings | null {
  if (option === undefined || option === false) return null
  if (option === true) return { ...BUFFER_DEFAULTS }
  if (typeof option !== 'object' || option === null || Array.isArray(option)) {
    throw new TypeError('burnrate: buffer must be true, false or { maxEvents?, maxAgeMs?, maxQueued? }')
  }
  for (const key of Object.keys(option)) {
    if (!(key in BUFFER_DEFAULTS)) throw new TypeError(`burnrate: unknown buffer option ${JSON.stringify(key)}`)
  }
  const count = (v: unknown, name: string, fallback: number): number => {
    if (v === undefined) return fallback
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw new TypeError(`burnrate: buffer.${name} must be a positive integer`)
    return v
  }
  // Either default follows the other one given: a small bound flushes sooner, a large trigger waits longer.
  const queued = count(option.maxQueued, 'maxQueued', 0)
  const maxEvents = count(option.maxEvents, 'maxEvents', Math.min(BUFFER_DEFAULTS.maxEvents, queued || Infinity))
  const maxQueued = queued || Math.max(BUFFER_DEFAULTS.maxQueued, maxEvents)
  if (maxEvents > maxQueued) throw new TypeError('burnrate: buffer.maxEvents must not exceed buffer.maxQueued')
  const maxAgeMs = option.maxAgeMs ?? BUFFER_DEFAULTS.maxAgeMs
  if (typeof maxAgeMs !== 'number' || !Number.isFinite(maxAgeMs) || maxAgeMs <= 0 || maxAgeMs > MAX_TIMER_MS) {
    throw new TypeError(`burnrate: buffer.maxAgeMs must be a positive number of milliseconds, at most ${MAX_TIMER_MS}`)
  }
  return { maxEvents, maxAgeMs, maxQueued }
}

/** What the client made of one batch it was handed. */
export interface Delivery {
  /** The batch's positions of the events to keep queued, to be sent again. */
  requeue: number[]
  /** The batch could not be sent (the client has reported why): stop, try again later. */
  failed: boolean
  /** With events refused for the key's budget (requeued, not failed): the server's Retry-After, ms. */
  retryAfterMs?: number | undefined
}

/** Sends one batch (at most MAX_BATCH_EVENTS events, MAX_BATCH_BYTES as JSON). Never rejects. */
export type Deliver = (events: EventBody[]) => Promise<Delivery>

interface Queued {
  readonly body: EventBody
  /** Date.now() when it was queued. */
  readonly at: number
  /** Its place in the order of queueing: flush() waits for the events queued before it was called. */
  readonly seq: number
  /** Its length in the batch's JSON. */
  readonly bytes: number
  /** Batches it has been in: once sent, it is due again as soon as the backoff or Retry-After allows. */
  tries: number
}

const encoder = new TextEncoder()

/**
 * The queue of the buffered mode: events wait here, each with its event_id, until a batch takes
 * them: once `maxEvents` wait, once the oldest is `maxAgeMs` old (a timer that does not keep a
 * Node process alive), or when flush() asks. One batch is in flight at a time. A batch that
 * cannot be sent leaves its events queued, in order, and the next automatic attempt waits a
 * growing backoff; events the server refused for the key's budget are sent again after its
 * Retry-After. Past `maxQueued` waiting events (the batch in flight aside) the oldest are
 * dropped, reported once until a batch goes through again.
 */
export class EventBuffer {
  private readonly settings: BufferSettings
  private readonly policy: RetryPolicy
  private readonly deliver: Deliver
  private readonly report: (error: BurnrateError) => void
  private queue: Queued[] = []
  private inFlight: readonly Queued[] = []
  private seq = 0
  /** flush() wants every event up to this seq sent now, whatever the triggers and the backoff say. */
  private forceUpTo = 0
  private running: Promise<boolean> | undefined
  private timer: ReturnType<typeof setTimeout> | undefined
  private timerAt = Infinity
  /** Nothing is sent before this (Date.now()): the Retry-After of events refused for the key's budget. */
  private retryAt = 0
  /** No automatic flush before this: the backoff after batches that could not be sent. */
  private backoffUntil = 0
  private failures = 0
  /** Events have been dropped for the bound since the last batch that went through: reported once. */
  private overflowing = false
  private isClosed = false

  constructor(settings: BufferSettings, policy: RetryPolicy, deliver: Deliver, report: (error: BurnrateError) => void) {
    this.settings = settings
    this.policy = policy
    this.deliver = deliver
    this.report = report
  }

  /** Events queued or in flight, not yet answered. */
  get size(): number {
    return this.queue.length + this.inFlight.length
  }

  /** close() was called: the client sends each event at once again. */
  get closed(): boolean {
    return this.isClosed
  }

  /** Queues an event (its body built, its event_id set). */
  add(body: EventBody): void {
    this.queue.push({ body, at: Date.now(), seq: ++this.seq, bytes: encoder.encode(JSON.stringify(body)).length, tries: 0 })
    this.bound()
    this.schedule()
  }

  /**
   * Sends every event queued so far (and what joins their batches). Resolves true once none of
   * them waits any more (each answered: stored, or refused and reported), false as soon as a
   * batch could not be sent, or was refused for the key's budget `maxRetries` times over: the
   * rest stay queued. Never rejects.
   */
  async flush(): Promise<boolean> {
    const upTo = this.seq
    const waiting = () => (this.queue[0]?.seq ?? Infinity) <= upTo || this.inFlight.some((e) => e.seq <= upTo)
    while (waiting()) {
      this.forceUpTo = Math.max(this.forceUpTo, upTo)
      const sent = await this.drain()
      if (!sent && waiting()) return false
    }
    return true
  }

  /** Stops the timer for good and flushes. What it cannot send stays queued, for a later flush(). */
  close(): Promise<boolean> {
    this.isClosed = true
    this.stopTimer()
    return this.flush()
  }

  /** At most maxQueued events wait (the batch in flight aside): past it, the oldest go. */
  private bound(): void {
    const over = this.queue.length - this.settings.maxQueued
    if (over <= 0) return
    const first = this.queue.splice(0, over)[0]
    if (this.overflowing) return
    this.overflowing = true
    this.report(
      new BurnrateError(`burnrate: ${this.settings.maxQueued} events wait to be sent (buffer.maxQueued): the oldest are dropped until burnrate takes events again`, {
        operation: 'event',
        code: 'buffer_full',
        retryable: false,
        eventId: first?.body.event_id,
      }),
    )
  }

  /** Sets the timer for the next automatic flush (none while one runs: it calls this when it ends). */
  private schedule(): void {
    if (this.running !== undefined || this.isClosed) return
    const first = this.queue[0]
    if (first === undefined) return this.stopTimer()
    const due = this.queue.length >= this.settings.maxEvents || first.tries > 0 ? 0 : first.at + this.settings.maxAgeMs
    const at = Math.max(due, this.retryAt, this.backoffUntil)
    if (this.timer !== undefined && this.timerAt <= at) return
    this.stopTimer()
    this.timerAt = at
    this.timer = setTimeout(
      () => {
        this.timer = undefined
        this.timerAt = Infinity
        void this.drain()
      },
      Math.min(MAX_TIMER_MS, Math.max(0, at - Date.now())),
    )
    unref(this.timer)
  }

  private stopTimer(): void {
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = undefined
    this.timerAt = Infinity
  }

  /** The one sending loop: joins it when it runs, starts it otherwise. Resolves false when a batch could not be sent. */
  private drain(): Promise<boolean> {
    this.running ??= this.loop()
      .catch((err: unknown) => {
        this.report(new BurnrateError(`burnrate: the buffer's flush failed: ${err instanceof Error ? err.message : String(err)}`, { operation: 'batch', code: 'internal_error', retryable: false, cause: err }))
        return false
      })
      .finally(() => {
        this.running = undefined
        this.schedule()
      })
    return this.running
  }

  private async loop(): Promise<boolean> {
    this.stopTimer()
    let limited = 0
    for (;;) {
      const first = this.queue[0]
      if (first === undefined) return true
      const forced = first.seq <= this.forceUpTo
      const now = Date.now()
      if (!forced) {
        const due = this.queue.length >= this.settings.maxEvents || first.tries > 0 || now - first.at >= this.settings.maxAgeMs
        if (!due || now < Math.max(this.retryAt, this.backoffUntil)) return true // the timer takes it from here
      } else if (now < this.retryAt) {
        await sleep(this.retryAt - now) // flush() waits out the server's Retry-After, not the client's backoff
        continue
      }

      const batch = this.take()
      for (const e of batch) e.tries++
      this.inFlight = batch
      let delivery: Delivery
      try {
        delivery = await this.deliver(batch.map((e) => e.body))
      } catch (err) {
        // deliver() reports its failures and never rejects; were it to, nothing would be lost.
        this.report(new BurnrateError(`burnrate: sending a batch failed: ${err instanceof Error ? err.message : String(err)}`, { operation: 'batch', code: 'internal_error', retryable: false, cause: err }))
        delivery = { requeue: batch.map((_, i) => i), failed: true }
      } finally {
        this.inFlight = []
      }
      const again = delivery.requeue.map((i) => batch[i]).filter((e): e is Queued => e !== undefined)
      // Back at the front: older than anything queued meanwhile, so the order holds.
      this.queue.unshift(...again)
      this.bound()

      if (delivery.failed) {
        // Tried again by the timer: never sooner than a batch goes by age, later while failures go on.
        this.failures++
        this.backoffUntil = Date.now() + Math.max(this.settings.maxAgeMs, backoffDelay(this.failures, this.policy))
        this.forceUpTo = 0
        return false
      }
      this.failures = 0
      this.backoffUntil = 0
      this.overflowing = false
      if (again.length === 0) {
        this.retryAt = 0
        continue
      }
      // Refused for the key's budget: sent again after the server's Retry-After.
      limited++
      const wait = delivery.retryAfterMs !== undefined ? retryAfterDelay(delivery.retryAfterMs, this.policy.maxDelayMs) : backoffDelay(limited - 1, this.policy)
      this.retryAt = Date.now() + wait
      if (forced && limited > this.policy.maxRetries) {
        this.report(
          new BurnrateError(`burnrate POST /events/batch: ${again.length} events refused for the API key's rate limit, ${limited} times; they stay queued`, {
            operation: 'batch',
            code: 'rate_limited',
            status: 429,
            retryable: true,
            attempts: limited,
          }),
        )
        this.forceUpTo = 0
        return false
      }
    }
  }

  /** The next batch: the oldest events, at most MAX_BATCH_EVENTS and MAX_BATCH_BYTES (at least one). */
  private take(): Queued[] {
    let n = 0
    let bytes = EMPTY_BATCH_BYTES
    for (const e of this.queue) {
      if (n === MAX_BATCH_EVENTS) break
      const more = e.bytes + (n > 0 ? 1 : 0)
      if (n > 0 && bytes + more > MAX_BATCH_BYTES) break
      bytes += more
      n++
    }
    return this.queue.splice(0, n)
  }
}

/** Node's and Deno's timers can let the process exit; a browser's is a number. */
function unref(timer: unknown): void {
  const t = timer as { unref?: unknown } | null
  if (typeof t === 'object' && t !== null && typeof t.unref === 'function') (t as { unref(): void }).unref()
}
