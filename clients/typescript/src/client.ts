import { EventBuffer, bufferSettings } from './buffer.js'
import type { Delivery } from './buffer.js'
import { BurnrateError } from './errors.js'
import { buildEventBody, buildHoldBody, checkAgentId } from './event.js'
import type { EventBody, HoldBody } from './event.js'
import { isObject, requestJson, sleep } from './http.js'
import type { FetchLike, JsonAnswer, JsonRequest, RetryPolicy } from './http.js'
import { isUuid, randomUuid } from './id.js'
import { periodBudgetsBody, periodsOf } from './periods.js'
import type { AlertInfo, BufferOptions, BurnrateEvent, EventExtras, EventResponse, FailMode, GuardCall, GuardRefusalReason, GuardResult, Hold, HoldResponse, LlmUsage, Metadata, Period, PeriodBudget, Problem, SendOptions } from './types.js'
import { fromAnthropic as anthropicEvent, fromOpenAIChat as openAIChatEvent, fromOpenAIResponses as openAIResponsesEvent, fromUsage as usageEvent, llmCallEvent, withExtras } from './usage.js'
import type { ProviderUsage, UsageSource } from './usage.js'

export interface BurnrateOptions {
  /** Where burnrate listens, e.g. "http://burnrate.internal:8080" (a path prefix is kept). */
  baseUrl: string
  /** An API key from `burnrate keys create`. */
  apiKey: string
  /** The agent this client reports for (1–128 characters). */
  agentId: string
  /** Daily budget in USD, set with POST /config before the first event. */
  costThresholdUsd?: number
  /** Slack-compatible incoming webhook told when the budget pauses the agent (sent with POST /config). */
  slackWebhookUrl?: string
  /** Alert levels, fractions of the budget in (0, 1), at most five (sent with POST /config; the server's default is [0.8]). */
  alertAt?: number[]
  /**
   * Budgets over calendar periods (a day, week or month in a time zone) and rolling windows of
   * days, beside the daily one: at most four, one per period (sent with POST /config; [] removes
   * the agent's). An event that takes a period's spend over its limit pauses the agent with
   * pausedReason 'period_budget'.
   */
  periodBudgets?: PeriodBudget[]
  /**
   * What one run (start() to end()) may cost, USD, more than 0 and at most 1 000 000 (sent with
   * POST /config): the event that takes a run's cost over it stops that run, not the agent
   * (see `runStopped`).
   */
  runBudgetUsd?: number
  /** Told once per crossing of an alert level, with the answer that reported it. An exception it throws goes to onError's logger, not to send(). */
  onAlert?: (alert: AlertInfo) => void
  /** Per attempt, until the whole answer is read. Default 10 000. */
  timeoutMs?: number
  /** Retries after the first attempt, for network errors, timeouts, 429 and 5xx. Default 3. */
  maxRetries?: number
  /** What send() returns when burnrate cannot be reached: "open" (true, default) or "closed" (false). */
  failMode?: FailMode
  /** Told about every failed request (after its retries). Default: console.warn. */
  onError?: (error: BurnrateError) => void
  /** Backoff base: retry n waits between half and all of base * 2^n. Default 500. */
  retryBaseDelayMs?: number
  /** Cap of any wait between attempts, Retry-After included. Default 30 000. */
  maxRetryDelayMs?: number
  /** A fetch implementation; default the global fetch. */
  fetch?: FetchLike
  /**
   * The buffered mode: tool calls, starts, ends and llm_calls sent with `buffered: true` are
   * queued and posted together (POST /events/batch) instead of one request each; their calls
   * resolve at once. `true` for the defaults { maxEvents: 100, maxAgeMs: 1000, maxQueued: 10000 }.
   * Default false: every event is posted at once. See the README's "Buffered mode".
   */
  buffer?: BufferOptions | boolean
}

export interface RefreshOptions {
  signal?: AbortSignal
}

export interface WaitOptions {
  /** Time between two checks. Default 5000. */
  pollIntervalMs?: number
  /** Give up (resolve false) after this long; default: wait until resumed or aborted. */
  timeoutMs?: number
  /** Aborting it ends the wait at once (resolves false). */
  signal?: AbortSignal
}

/** A guarded call's hold as its reports see it: the id they carry, the run they belong to, and whether burnrate has acknowledged one. */
interface HoldState {
  readonly id: string | null
  /** The client's run when guard() was called: the call's report names it, whatever start() or end() happened meanwhile. */
  readonly runId: string | null
  settled: boolean
}

function refused(reason: GuardRefusalReason, pausedReason: string | null, pausedPeriod: string | null, answer?: HoldResponse): GuardResult<never> {
  return { allowed: false, reason, pausedReason, pausedPeriod, remainingUsd: answer?.remaining_usd ?? null, worstCaseUsd: answer?.worst_case_usd ?? null }
}

const DEFAULTS = { timeoutMs: 10_000, maxRetries: 3, retryBaseDelayMs: 500, maxRetryDelayMs: 30_000 }

function positive(v: number | undefined, name: string, fallback: number, allowZero = false): number {
  if (v === undefined) return fallback
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || (!allowZero && v === 0)) {
    throw new TypeError(`burnrate: ${name} must be a ${allowZero ? 'non-negative' : 'positive'} number`)
  }
  return v
}

/**
 * The burnrate client of one agent. send() posts one event and tells whether the agent may
 * go on; once burnrate answers paused = true, send() returns false without sending anything
 * until refresh() or waitUntilResumed() sees the agent resumed. An answer that the current run
 * went over its run budget stops that run only (`runStopped`): its events are not sent, until
 * end() closes it.
 *
 * Network and server failures never throw: they go to `onError` (or console.warn) and
 * send() returns per the fail mode. Invalid arguments (a programming error) do throw a
 * TypeError: the constructor synchronously, send() and the helpers by rejecting.
 */
export class Burnrate {
  private readonly base: string
  private readonly apiKey: string
  private readonly agent: string
  private readonly failMode: FailMode
  private readonly onError: ((error: BurnrateError) => void) | undefined
  private readonly onAlert: ((alert: AlertInfo) => void) | undefined
  private readonly policy: RetryPolicy
  private readonly fetchFn: FetchLike
  /** The POST /config body, until it has been accepted once; null when there is nothing to configure. */
  private pendingConfig: Record<string, unknown> | null
  private configuring: Promise<boolean> | undefined
  private isPaused = false
  private reason: string | null = null
  /** The period whose budget paused the agent (reason period_budget or fleet_period_budget); else null. */
  private period: string | null = null
  private ignoring = false
  private last: EventResponse | undefined
  /** The buffered mode's queue; null when it is off. */
  private readonly buffer: EventBuffer | null
  /** The buffered mode's last attempt to send left events undelivered (or its config failed): with failMode "closed", buffered calls resolve false. */
  private undelivered = false
  /** The server answered 404 to POST /events/batch (older than the endpoint): the buffer posts its events one by one. */
  private batchless = false
  /** The current run's id: set by an agent_start, cleared by an agent_end; null outside a run. */
  private run: string | null = null
  /** The run burnrate stopped (its run budget spent), and why; cleared when a run begins or ends. */
  private stoppedRun: string | null = null
  private stoppedReason: string | null = null

  constructor(options: BurnrateOptions) {
    if (typeof options !== 'object' || options === null) throw new TypeError('burnrate: new Burnrate(options) needs an options object')
    if (typeof options.baseUrl !== 'string' || !/^https?:\/\/[^/]/i.test(options.baseUrl)) {
      throw new TypeError('burnrate: baseUrl must be an http(s) URL')
    }
    if (typeof options.apiKey !== 'string' || options.apiKey === '') throw new TypeError('burnrate: apiKey must be a non-empty string')
    this.base = options.baseUrl.replace(/\/+$/, '')
    this.apiKey = options.apiKey
    this.agent = checkAgentId(options.agentId)
    const failMode = options.failMode ?? 'open'
    if (failMode !== 'open' && failMode !== 'closed') throw new TypeError('burnrate: failMode must be "open" or "closed"')
    this.failMode = failMode
    if (options.onError !== undefined && typeof options.onError !== 'function') throw new TypeError('burnrate: onError must be a function')
    this.onError = options.onError
    if (options.onAlert !== undefined && typeof options.onAlert !== 'function') throw new TypeError('burnrate: onAlert must be a function')
    this.onAlert = options.onAlert
    const maxRetries = positive(options.maxRetries, 'maxRetries', DEFAULTS.maxRetries, true)
    if (!Number.isInteger(maxRetries)) throw new TypeError('burnrate: maxRetries must be an integer')
    this.policy = {
      timeoutMs: positive(options.timeoutMs, 'timeoutMs', DEFAULTS.timeoutMs),
      maxRetries,
      baseDelayMs: positive(options.retryBaseDelayMs, 'retryBaseDelayMs', DEFAULTS.retryBaseDelayMs, true),
      maxDelayMs: positive(options.maxRetryDelayMs, 'maxRetryDelayMs', DEFAULTS.maxRetryDelayMs, true),
    }
    const f = options.fetch ?? (typeof fetch === 'function' ? fetch : undefined)
    if (typeof f !== 'function') throw new TypeError('burnrate: no global fetch in this runtime; pass options.fetch')
    // Called unbound: a browser's fetch refuses a `this` that is not the window.
    this.fetchFn = (input, init) => f(input, init)

    const config: Record<string, unknown> = {}
    if (options.costThresholdUsd !== undefined) {
      const t = options.costThresholdUsd
      if (typeof t !== 'number' || !Number.isFinite(t) || t < 0 || t > 1_000_000) {
        throw new TypeError('burnrate: costThresholdUsd must be a number from 0 to 1000000')
      }
      config.cost_threshold_usd = t
    }
    if (options.slackWebhookUrl !== undefined) {
      if (typeof options.slackWebhookUrl !== 'string' || options.slackWebhookUrl.length > 2048) {
        throw new TypeError('burnrate: slackWebhookUrl must be a URL of at most 2048 characters')
      }
      config.slack_webhook_url = options.slackWebhookUrl
    }
    if (options.alertAt !== undefined) {
      const levels = options.alertAt
      if (
        !Array.isArray(levels) ||
        levels.length > 5 ||
        new Set(levels).size !== levels.length ||
        !levels.every((l) => typeof l === 'number' && Number.isFinite(l) && l > 0 && l < 1)
      ) {
        throw new TypeError('burnrate: alertAt must hold at most 5 distinct numbers between 0 and 1 (exclusive)')
      }
      config.alert_at = [...levels]
    }
    if (options.periodBudgets !== undefined) config.period_budgets = periodBudgetsBody(options.periodBudgets)
    if (options.runBudgetUsd !== undefined) {
      const b = options.runBudgetUsd
      if (typeof b !== 'number' || !Number.isFinite(b) || b <= 0 || b > 1_000_000) {
        throw new TypeError('burnrate: runBudgetUsd must be a number more than 0 and at most 1000000')
      }
      config.run_budget_usd = b
    }
    this.pendingConfig = Object.keys(config).length > 0 ? { agent_id: this.agent, ...config } : null
    const buffer = bufferSettings(options.buffer)
    this.buffer = buffer === null ? null : new EventBuffer(buffer, this.policy, (events) => this.deliver(events), (error) => this.report(error))
  }

  /** The agent this client reports for. */
  get agentId(): string {
    return this.agent
  }

  /** True once burnrate said the agent is paused; false again after refresh() sees it resumed. */
  get paused(): boolean {
    return this.isPaused
  }

  /**
   * Why the agent is paused, as burnrate said: 'budget', 'velocity', 'period_budget' or 'manual'
   * (its own), 'fleet_budget', 'fleet_velocity', 'fleet_period_budget' or 'fleet_manual' (its
   * user's fleet budget); null while it runs. Every reason stops it alike.
   */
  get pausedReason(): string | null {
    return this.isPaused ? this.reason : null
  }

  /**
   * With pausedReason 'period_budget' or 'fleet_period_budget': the period that went over its
   * limit ('day', 'week', 'month' or 'window_<n>d'); null otherwise.
   */
  get pausedPeriod(): string | null {
    return this.isPaused ? this.period : null
  }

  /**
   * Whether burnrate flagged this agent for calling the model after its pause, as
   * of the last refresh(): something sends for it past this client. False before any refresh.
   */
  get ignoringPause(): boolean {
    return this.ignoring
  }

  /** The last answer to POST /events, or to an event of a batch (cost, 24 h total, duplicate), if any. */
  get lastResponse(): EventResponse | undefined {
    return this.last
  }

  /** What is left of the agent's budget as of the last answer (negative when over it), if any. */
  get remainingUsd(): number | undefined {
    return this.last?.remaining_usd
  }

  /** When the budget runs out at the last hour's rate, as of the last answer: null when it never would, undefined before any answer. */
  get projectedExhaustionAt(): Date | null | undefined {
    const at = this.last?.projected_exhaustion_at
    return at === undefined ? undefined : at === null ? null : new Date(at)
  }

  /**
   * The agent's period budgets as of the last answer: each period's spend, limit, what is left,
   * its bounds and when it runs out at the last hour's rate. [] without period budgets,
   * undefined before any answer.
   */
  get periods(): Period[] | undefined {
    return this.last === undefined ? undefined : periodsOf(this.last.periods)
  }

  /**
   * The current run's id: the one start() made (a random UUID) or was given (`runId`), until
   * end(); null outside a run. Every event sent meanwhile carries it as `run_id`.
   */
  get runId(): string | null {
    return this.run
  }

  /**
   * True once burnrate said the current run went over its run budget (`runBudgetUsd`): the
   * run is stopped, not the agent. Until end(), the run's calls resolve false without sending
   * and guard() refuses with reason 'run_budget'; end() still sends the run's agent_end and
   * clears it, and the next start() runs normally. `paused` stays false (unless the agent itself
   * is paused), and refresh() neither sees nor clears it.
   */
  get runStopped(): boolean {
    return this.run !== null && this.stoppedRun === this.run
  }

  /** Why the current run is stopped, as burnrate said: 'run_budget'; null while it runs (or outside a run). */
  get runStoppedReason(): string | null {
    return this.runStopped ? this.stoppedReason : null
  }

  /** Buffered mode: the events queued or in flight, not yet answered by burnrate. 0 without a buffer. */
  get pendingEvents(): number {
    return this.buffer?.size ?? 0
  }

  /**
   * Posts one event (the fields of POST /events without agent_id). Resolves true while the
   * agent may go on, false once it is paused (then nothing more is sent) or, with failMode
   * "closed", when burnrate could not be reached. Rejects only with a TypeError for an
   * invalid event. With the buffer on, a tool_call, agent_start or agent_end (or any event
   * with `buffered: true`) is queued instead and the call resolves at once: false while paused,
   * with failMode "closed" false while the last batch could not be sent, else true. The event
   * carries the current run's `run_id` unless it names one; an agent_start or agent_end sent
   * here begins or ends a run as start() and end() do.
   */
  send(event: BurnrateEvent, options?: SendOptions): Promise<boolean> {
    return this.later(() => event, options?.buffered)
  }

  /**
   * Posts one event's body now; for a guarded call, `settled` turns true once burnrate
   * acknowledged it. A guarded call's report is sent even once the agent is paused or its run
   * stopped meanwhile: the call was made, and its cost is counted (and its hold settled) only so.
   */
  private async post(body: EventBody, hold?: HoldState): Promise<boolean> {
    if (!hold && this.heldBack(body)) return false
    const configured = await this.configure()
    if (!hold && this.heldBack(body)) return false
    let delivered = false
    try {
      const answer = await this.request({ operation: 'event', method: 'POST', url: `${this.base}/events`, body, eventId: body.event_id })
      const r = answer.body
      if (!isObject(r) || typeof r.paused !== 'boolean') {
        throw new BurnrateError('burnrate POST /events: the answer has no paused flag', { operation: 'event', code: 'invalid_response', status: answer.status, retryable: false, eventId: body.event_id })
      }
      delivered = true
      if (hold) hold.settled = true
      this.took(r, body.run_id)
    } catch (err) {
      this.report(err)
    }
    if (this.heldBack(body)) return false
    if (!delivered || !configured) return this.failMode === 'open'
    return true
  }

  /** An llm_call event: model and token counts (cache counts are parts of inputTokens). */
  llmCall(model: string, usage: LlmUsage, extras?: EventExtras): Promise<boolean> {
    return this.later(() => llmCallEvent(model, usage, extras), extras?.buffered)
  }

  /** A tool_call event (buffered when the buffer is on, unless `buffered: false`). */
  toolCall(toolName: string, metadata?: Metadata, extras?: Pick<EventExtras, 'eventId' | 'runId' | 'buffered'>): Promise<boolean> {
    return this.later(() => withExtras({ event_type: 'tool_call', tool_name: toolName }, { ...extras, metadata }), extras?.buffered)
  }

  /**
   * An agent_start event, which begins a run: its id is `runId` when given, else a new random
   * UUID, and every event after it carries it until end() (see `runId`). A start() without an
   * end() before it begins a new run all the same. Buffered when the buffer is on, unless
   * `buffered: false`.
   */
  start(metadata?: Metadata, extras?: Pick<EventExtras, 'eventId' | 'runId' | 'buffered'>): Promise<boolean> {
    return this.later(() => withExtras({ event_type: 'agent_start' }, { ...extras, metadata }), extras?.buffered)
  }

  /**
   * An agent_end event, the last of the current run: it carries the run's id, and the events
   * after it carry none until the next start(). With the buffer on it is queued, and the
   * buffer flushed: resolves once burnrate has answered every event queued so far (false if
   * paused, or, with failMode "closed", when they could not all be sent).
   */
  async end(metadata?: Metadata, extras?: Pick<EventExtras, 'eventId'>): Promise<boolean> {
    const build = () => withExtras({ event_type: 'agent_end' }, { ...extras, metadata })
    if (this.buffer === null || this.buffer.closed) return this.later(build)
    await this.later(build, true)
    await this.flush()
    return this.answerNow()
  }

  /**
   * Buffered mode: sends every event queued so far, now. Resolves true once burnrate has
   * answered them all (an event it refused as invalid is reported to onError and dropped),
   * false when a batch could not be sent (after the retries; the error went to onError): those
   * events stay queued, in order, for the next flush. Without a buffer: true. Never rejects.
   */
  async flush(): Promise<boolean> {
    if (this.buffer === null) return true
    const sent = await this.buffer.flush()
    if (!sent) this.undelivered = true
    return sent
  }

  /**
   * Buffered mode: flushes, and stops the buffer's timer for good; later calls post each event
   * at once, as without a buffer. Resolves as flush() does; what could not be sent stays queued
   * for a later flush(). Without a buffer: true. Never rejects.
   */
  async close(): Promise<boolean> {
    if (this.buffer === null) return true
    const sent = await this.buffer.close()
    if (!sent) this.undelivered = true
    return sent
  }

  /** Sends an OpenAI Chat Completions call: `fromOpenAIChat(completion.model, completion.usage)`, the usage object as it is. */
  fromOpenAIChat(model: string, usage: ProviderUsage, extras?: EventExtras): Promise<boolean> {
    return this.later(() => openAIChatEvent(model, usage, extras), extras?.buffered)
  }

  /** Sends an OpenAI Responses API call: `fromOpenAIResponses(response.model, response.usage)`. */
  fromOpenAIResponses(model: string, usage: ProviderUsage, extras?: EventExtras): Promise<boolean> {
    return this.later(() => openAIResponsesEvent(model, usage, extras), extras?.buffered)
  }

  /** Sends an Anthropic Messages call: `fromAnthropic(message.model, message.usage)`. */
  fromAnthropic(model: string, usage: ProviderUsage, extras?: EventExtras): Promise<boolean> {
    return this.later(() => anthropicEvent(model, usage, extras), extras?.buffered)
  }

  /** Sends a call of any provider the price library knows: `fromUsage({ provider: 'google' }, model, response.usageMetadata)`. */
  fromUsage(source: UsageSource, model: string, usage: ProviderUsage, extras?: EventExtras): Promise<boolean> {
    return this.later(() => usageEvent(source, model, usage, extras), extras?.buffered)
  }

  /**
   * Runs `fn`, which makes one LLM call, under a budget hold: burnrate first reserves the call's
   * worst case (POST /holds), so parallel calls cannot each pass the budget check and together
   * overshoot it, and the llm_call `fn` reports through its Hold settles the hold with the real
   * cost. Refused (the agent or its fleet paused, or the worst case does not fit), `fn` does not
   * run; a refusal for a pause pauses the client as a paused event answer does. A hold `fn` leaves
   * unsettled (it threw, or no report of it reached burnrate) is released when `fn` ends.
   * burnrate unreachable, the fail mode decides: "open" runs `fn` without a hold, "closed" does
   * not run it. Rejects with a TypeError for an invalid call, and with what `fn` throws.
   */
  async guard<T>(call: GuardCall, fn: (hold: Hold) => T | Promise<T>): Promise<GuardResult<T>> {
    const runId = this.run
    const body = buildHoldBody(this.agent, call, runId)
    if (typeof fn !== 'function') throw new TypeError('burnrate: guard needs the function that makes the call')
    if (this.isPaused) return refused('paused', this.reason, this.period)
    if (this.stops(runId)) return refused('run_budget', this.stoppedReason, null)
    // The hold is judged against the budget this client sets: configure it first.
    const configured = await this.configure()
    if (this.isPaused) return refused('paused', this.reason, this.period)
    if (this.stops(runId)) return refused('run_budget', this.stoppedReason, null)
    // Closed, a budget that could not be set cannot be checked either (as in send()).
    const answer = configured || this.failMode === 'open' ? await this.askHold(body) : undefined
    if (answer === undefined && this.failMode === 'closed') return refused('unreachable', null, null)
    if (answer !== undefined && !answer.allowed) {
      const pausedPeriod = typeof answer.paused_period === 'string' ? answer.paused_period : null
      if (answer.reason === 'paused') {
        this.isPaused = true
        this.reason = answer.paused_reason
        this.period = pausedPeriod
      } else if (answer.paused && answer.paused_reason === 'run_budget') {
        this.stop(runId, answer.paused_reason)
      }
      return refused(answer.reason as GuardRefusalReason, answer.paused_reason, pausedPeriod, answer)
    }
    const hold: HoldState = { id: answer?.hold_id ?? null, runId, settled: false }
    try {
      const value = await fn(this.holdFor(call.model, hold, answer))
      return { allowed: true, value, holdId: hold.id }
    } finally {
      if (hold.id !== null && !hold.settled) await this.release(hold.id)
    }
  }

  /**
   * Asks burnrate whether the agent is paused (GET /agents/{agentId}; an agent burnrate
   * does not know yet is not paused) and updates `paused`. Resolves to the new `paused`.
   * On a failure `paused` stays as it was and the error goes to onError.
   */
  async refresh(options: RefreshOptions = {}): Promise<boolean> {
    try {
      const answer = await this.request({
        operation: 'refresh',
        method: 'GET',
        url: `${this.base}/agents/${encodeURIComponent(this.agent)}`,
        // 404 agent_not_found: no events and no config yet. Any other 404 (a wrong baseUrl) is a failure.
        accept: (status, body) => status === 404 && isObject(body) && body.code === 'agent_not_found',
        signal: options.signal,
      })
      if (answer.status === 404) {
        this.isPaused = false
        this.reason = null
        this.period = null
        this.ignoring = false
      } else if (isObject(answer.body) && typeof answer.body.is_paused === 'boolean') {
        this.isPaused = answer.body.is_paused
        this.reason = this.isPaused && typeof answer.body.paused_reason === 'string' ? answer.body.paused_reason : null
        this.period = this.isPaused && typeof answer.body.paused_period === 'string' ? answer.body.paused_period : null
        this.ignoring = answer.body.ignoring_pause === true
      } else {
        throw new BurnrateError('burnrate GET /agents/{agent_id}: the answer has no is_paused flag', { operation: 'refresh', code: 'invalid_response', status: answer.status, retryable: false })
      }
    } catch (err) {
      if (!(err instanceof BurnrateError && err.code === 'aborted')) this.report(err)
    }
    return this.isPaused
  }

  /**
   * Polls refresh() until the agent runs again (resolves true), `timeoutMs` passes or
   * `signal` aborts (resolves false). Checks at once, then every `pollIntervalMs`.
   */
  async waitUntilResumed(options: WaitOptions = {}): Promise<boolean> {
    const poll = positive(options.pollIntervalMs, 'pollIntervalMs', 5000)
    const timeoutMs = options.timeoutMs === undefined ? undefined : positive(options.timeoutMs, 'timeoutMs', 0, true)
    // One signal for the whole wait: the caller's, or the deadline, whichever comes first.
    const stop = new AbortController()
    const onAbort = () => stop.abort()
    const outer = options.signal
    if (outer?.aborted) return false
    outer?.addEventListener('abort', onAbort, { once: true })
    const deadline = timeoutMs === undefined ? undefined : setTimeout(onAbort, timeoutMs)
    try {
      for (;;) {
        await this.refresh({ signal: stop.signal })
        if (!this.isPaused) return true
        if (stop.signal.aborted || !(await sleep(poll, stop.signal))) return false
      }
    } finally {
      if (deadline !== undefined) clearTimeout(deadline)
      outer?.removeEventListener('abort', onAbort)
    }
  }

  /** Start-up POST /config, once: later sends retry it until it succeeds. Resolves false on failure. */
  private configure(): Promise<boolean> {
    const body = this.pendingConfig
    if (body === null) return Promise.resolve(true)
    this.configuring ??= (async () => {
      try {
        await this.request({ operation: 'config', method: 'POST', url: `${this.base}/config`, body })
        this.pendingConfig = null
        return true
      } catch (err) {
        this.report(err)
        return false
      } finally {
        this.configuring = undefined
      }
    })()
    return this.configuring
  }

  /** POST /holds; undefined (the error reported) when burnrate could not be asked. */
  private async askHold(body: HoldBody): Promise<HoldResponse | undefined> {
    try {
      const answer = await this.request({ operation: 'hold', method: 'POST', url: `${this.base}/holds`, body })
      const r = answer.body
      // Granted: a hold_id the llm_call can carry. Refused: why.
      const valid = isObject(r) && (r.allowed === true ? typeof r.hold_id === 'string' && isUuid(r.hold_id) : r.allowed === false && typeof r.reason === 'string')
      if (!valid) {
        throw new BurnrateError('burnrate POST /holds: the answer is neither a granted hold with its hold_id nor a refusal with its reason', { operation: 'hold', code: 'invalid_response', status: answer.status, retryable: false })
      }
      return r as unknown as HoldResponse
    } catch (err) {
      this.report(err)
      return undefined
    }
  }

  /** DELETE /holds/{id} of a hold its call left unsettled. Never throws: a failure goes to onError. */
  private async release(holdId: string): Promise<void> {
    try {
      await this.request({
        operation: 'release',
        method: 'DELETE',
        url: `${this.base}/holds/${encodeURIComponent(holdId)}`,
        // Not open any more (expired, or settled by a report whose answer was lost): nothing to release.
        accept: (status, body) => status === 404 && isObject(body) && body.code === 'hold_not_found',
      })
    } catch (err) {
      this.report(err)
    }
  }

  /** The Hold guard() hands its function: the report methods of the client, with the hold attached. */
  private holdFor(model: string, hold: HoldState, answer: HoldResponse | undefined): Hold {
    const report = (build: () => BurnrateEvent) => this.later(build, false, hold)
    return {
      holdId: hold.id,
      heldUsd: answer?.held_usd ?? 0,
      expiresAt: typeof answer?.expires_at === 'string' ? new Date(answer.expires_at) : null,
      llmCall: (usage, extras) => report(() => llmCallEvent(model, usage, extras)),
      fromOpenAIChat: (m, usage, extras) => report(() => openAIChatEvent(m, usage, extras)),
      fromOpenAIResponses: (m, usage, extras) => report(() => openAIResponsesEvent(m, usage, extras)),
      fromAnthropic: (m, usage, extras) => report(() => anthropicEvent(m, usage, extras)),
      fromUsage: (source, m, usage, extras) => report(() => usageEvent(source, m, usage, extras)),
    }
  }

  private request(req: Omit<JsonRequest, 'apiKey'>) {
    return requestJson(this.fetchFn, this.policy, { ...req, apiKey: this.apiKey })
  }

  /**
   * Builds the event (a TypeError becomes a rejection) with its run, then queues it (buffered
   * mode: tool calls, starts and ends unless `buffered` is false, others when it is true) or
   * posts it, with the hold of a guarded call when given (never queued).
   */
  private async later(build: () => BurnrateEvent, buffered?: boolean, hold?: HoldState): Promise<boolean> {
    let event = build()
    if (hold !== undefined) event = { run_id: hold.runId ?? undefined, ...event, ...(hold.id === null ? {} : { hold_id: hold.id }) }
    const body = this.inRun(buildEventBody(this.agent, event))
    if (hold === undefined && this.buffer !== null && !this.buffer.closed && (buffered ?? body.event_type !== 'llm_call')) {
      if (this.heldBack(body)) return false
      this.buffer.add(body)
      return this.answerNow()
    }
    return this.post(body, hold)
  }

  /**
   * Gives a valid event's body its run: an agent_start begins a new one (named by its own
   * run_id, else a new UUID), an agent_end is the current run's last event. Any other event
   * carries the current run's id, unless it names a run itself.
   */
  private inRun(body: EventBody): EventBody {
    if (body.event_type === 'agent_start') this.run = body.run_id ??= randomUuid()
    else if (this.run !== null) body.run_id ??= this.run
    if (body.event_type === 'agent_end') this.run = null
    if (body.event_type === 'agent_start' || body.event_type === 'agent_end') this.stoppedRun = this.stoppedReason = null
    return body
  }

  /** Whether `runId` is the current run, and stopped. */
  private stops(runId: string | null | undefined): boolean {
    return runId !== null && runId !== undefined && runId === this.run && this.stoppedRun === runId
  }

  /** Stops the run `runId` if it is still the current one: an answer about an older run (a batch that left late) stops nothing. */
  private stop(runId: string | null | undefined, reason: string): void {
    if (runId === null || runId === undefined || runId !== this.run) return
    this.stoppedRun = runId
    this.stoppedReason = reason
  }

  /** An event the client does not send: the agent is paused, or the event is of the current run and that run is stopped. */
  private heldBack(body: EventBody): boolean {
    return this.isPaused || this.stops(body.run_id)
  }

  /** What a buffered call resolves to, without waiting: false while paused, or (failMode "closed") while the last batch could not be sent. */
  private answerNow(): boolean {
    return !this.isPaused && (this.failMode === 'open' || !this.undelivered)
  }

  /**
   * An event's answer (of POST /events, or in its place in a batch) with its paused flag: the
   * pause, the last answer, the alerts. `paused_reason` 'run_budget' is about the event's run
   * (`runId`) only: it stops that run if it is the current one, and never pauses the agent.
   */
  private took(r: Record<string, unknown>, runId: string | undefined): void {
    this.last = r as unknown as EventResponse
    if (r.paused === true && r.paused_reason === 'run_budget') {
      this.stop(runId, r.paused_reason)
    } else if (r.paused === true) {
      this.isPaused = true
      this.reason = typeof r.paused_reason === 'string' ? r.paused_reason : null
      this.period = typeof r.paused_period === 'string' ? r.paused_period : null
    }
    if (Array.isArray(r.alerts) && r.alerts.length > 0 && this.onAlert) this.tellAlert({ levels: r.alerts as number[], response: this.last })
  }

  /** Sends one batch of the buffer (the start-up config first), and tells it what became of each event. Never rejects. */
  private async deliver(events: EventBody[]): Promise<Delivery> {
    const configured = await this.configure()
    const delivery = this.batchless ? await this.postEach(events) : await this.postBatch(events)
    this.undelivered = delivery.failed || !configured
    return delivery
  }

  /**
   * POST /events/batch. Each event's answer is taken as POST /events's would be; one refused
   * for the key's budget (429) stays queued, one refused otherwise (400 invalid, 404 its hold
   * unknown: sending it again cannot help) is reported and dropped. The whole request failing
   * after its retries (network, timeout, 5xx) leaves the batch queued; a final failure (401,
   * 400) drops it, reported. 413 (a proxy's smaller body limit): the halves, one after the
   * other. 404 (a burnrate without the endpoint): POST /events for each, from then on.
   */
  private async postBatch(events: EventBody[]): Promise<Delivery> {
    const all = events.map((_, i) => i)
    let answer: JsonAnswer
    try {
      answer = await this.request({ operation: 'batch', method: 'POST', url: `${this.base}/events/batch`, body: { events } })
    } catch (err) {
      if (err instanceof BurnrateError && err.status === 404) {
        this.batchless = true
        return this.postEach(events)
      }
      if (err instanceof BurnrateError && err.status === 413 && events.length > 1) return this.halves(events)
      this.report(err)
      // A 2xx that is not JSON came from something between: burnrate may not have seen the batch.
      const keep = !(err instanceof BurnrateError) || err.retryable || err.code === 'invalid_response'
      return { requeue: keep ? all : [], failed: true }
    }
    const results = isObject(answer.body) && Array.isArray(answer.body.results) ? (answer.body.results as unknown[]) : undefined
    if (results === undefined || results.length !== events.length) {
      this.report(new BurnrateError('burnrate POST /events/batch: the answer has not one result per event', { operation: 'batch', code: 'invalid_response', status: answer.status, retryable: false }))
      // Stored or not, sending them again counts nothing twice (event ids).
      return { requeue: all, failed: true }
    }
    const requeue: number[] = []
    results.forEach((r, i) => {
      const eventId = events[i]!.event_id
      if (isObject(r) && r.ok === true && typeof r.paused === 'boolean') return this.took(r, events[i]!.run_id)
      if (isObject(r) && r.status === 429) return void requeue.push(i)
      const problem = isObject(r) ? (r as Problem) : undefined
      const status = typeof problem?.status === 'number' ? problem.status : undefined
      const code = problem?.ok === true || status === undefined ? 'invalid_response' : typeof problem?.code === 'string' ? problem.code : `http_${status}`
      const detail = typeof problem?.detail === 'string' ? `: ${problem.detail}` : ''
      const what = code === 'invalid_response' ? 'has an answer burnrate does not give' : `refused: ${status} ${code}${detail}`
      this.report(new BurnrateError(`burnrate POST /events/batch: event ${i} ${what}`, { operation: 'event', code, status, problem, retryable: false, eventId }))
    })
    return { requeue, failed: false, retryAfterMs: answer.retryAfterMs }
  }

  /** A batch too large for what is in front of burnrate, sent as two. */
  private async halves(events: EventBody[]): Promise<Delivery> {
    const mid = Math.ceil(events.length / 2)
    const first = await this.postBatch(events.slice(0, mid))
    const rest = events.slice(mid).map((_, i) => i + mid)
    if (first.failed) return { requeue: [...first.requeue, ...rest], failed: true }
    const second = await this.postBatch(events.slice(mid))
    const waits = [first.retryAfterMs, second.retryAfterMs].filter((ms): ms is number => ms !== undefined)
    return { requeue: [...first.requeue, ...second.requeue.map((i) => i + mid)], failed: second.failed, retryAfterMs: waits.length > 0 ? Math.max(...waits) : undefined }
  }

  /** A burnrate without POST /events/batch: the batch's events one by one, in order, as send() posts them. */
  private async postEach(events: EventBody[]): Promise<Delivery> {
    for (let i = 0; i < events.length; i++) {
      const body = events[i]!
      try {
        const answer = await this.request({ operation: 'event', method: 'POST', url: `${this.base}/events`, body, eventId: body.event_id })
        const r = answer.body
        if (!isObject(r) || typeof r.paused !== 'boolean') {
          throw new BurnrateError('burnrate POST /events: the answer has no paused flag', { operation: 'event', code: 'invalid_response', status: answer.status, retryable: false, eventId: body.event_id })
        }
        this.took(r, body.run_id)
      } catch (err) {
        this.report(err)
        // Not sent (after its retries): it and the rest stay queued. Refused (400, 404): dropped.
        if (!(err instanceof BurnrateError) || err.retryable) return { requeue: events.slice(i).map((_, j) => i + j), failed: true }
      }
    }
    return { requeue: [], failed: false }
  }

  /** onAlert, whose own failure never reaches send(). */
  private tellAlert(alert: AlertInfo): void {
    try {
      this.onAlert?.(alert)
    } catch (err) {
      console.warn(`[burnrate] onAlert threw: ${err instanceof Error ? err.message : String(err)}`)
    }
  }

  private report(err: unknown): void {
    const error =
      err instanceof BurnrateError ? err : new BurnrateError(`burnrate: ${err instanceof Error ? err.message : String(err)}`, { operation: 'event', code: 'internal_error', retryable: false, cause: err })
    try {
      if (this.onError) this.onError(error)
      else console.warn(`[burnrate] ${error.message}`)
    } catch {
      // A failing error handler must not take the agent down either.
    }
  }
}
