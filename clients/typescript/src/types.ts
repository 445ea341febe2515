import type { ProviderUsage, UsageSource } from './usage.js'

/** The kinds of event burnrate accepts. */
export type EventType = 'llm_call' | 'tool_call' | 'agent_start' | 'agent_end'

/** Arbitrary key-value pairs stored with an event (a JSON object of at most 16 KiB). */
export type Metadata = Record<string, unknown>

/**
 * One event, in the wire fields of POST /events without `agent_id` (the client adds it).
 * Token counts are integers 0 … 10^9; the cache counts are parts of `input_tokens`.
 */
export interface BurnrateEvent {
  event_type: EventType
  /** Required for llm_call: the model name the server prices. */
  model?: string
  /** All input/prompt tokens, cached ones included. */
  input_tokens?: number
  output_tokens?: number
  /** The part of input_tokens read from the provider's prompt cache. */
  cache_read_tokens?: number
  /** The part of input_tokens written to the provider's prompt cache. */
  cache_write_tokens?: number
  /** Instead of the token fields: the provider's usage object as its SDK returned it (see fromUsage). */
  usage?: Record<string, unknown>
  /** With usage: the price library's provider id (openai, anthropic, google, …). */
  provider?: string
  /** With usage: the provider's API flavor (chat or responses for OpenAI). */
  api_flavor?: string
  /** Required for tool_call. */
  tool_name?: string | null
  metadata?: Metadata
  /**
   * The run (one task of the agent, from its start to its end) the event belongs to: 1–128
   * characters. The client sets its current run's id (see Burnrate.runId) when absent.
   */
  run_id?: string
  /** A UUID; the client generates one when absent. The same id is sent on every retry. */
  event_id?: string
  /**
   * llm_call only: the budget hold this call settles (a hold_id POST /holds answered; guard()
   * sets it). burnrate releases the hold and counts the real cost in one step, once under retries.
   */
  hold_id?: string
}

/** Token counts of one LLM call, for `llmCall`. */
export interface LlmUsage {
  /** All input tokens, cached ones included. */
  inputTokens: number
  outputTokens: number
  /** The part of inputTokens read from the prompt cache. */
  cacheReadTokens?: number
  /** The part of inputTokens written to the prompt cache. */
  cacheWriteTokens?: number
}

/** Optional extras of the convenience calls. */
export interface EventExtras {
  metadata?: Metadata
  /** Your own event id (a UUID), e.g. to make a retry of your own idempotent. */
  eventId?: string
  /**
   * The run this event belongs to, in place of the client's current run (e.g. a run another
   * agent started and handed over): 1–128 characters. For start(), the new run's id.
   */
  runId?: string
  /**
   * With the client's `buffer` on: `true` queues this llm_call for the next batch instead of
   * posting it at once (a call reported after the fact, whose answer the agent does not wait
   * for); the call then resolves at once from what the client already knows. `false` posts a
   * tool call or a start at once. Ignored without a buffer, and by guard()'s hold reports,
   * which always post at once (the hold is settled by their answer).
   */
  buffered?: boolean
}

/** Options of send(). */
export interface SendOptions {
  /**
   * With the client's `buffer` on, whether the event goes to the buffer (resolving at once) or
   * is posted now. Default: buffered for tool_call, agent_start and agent_end, posted now for
   * llm_call. Ignored without a buffer.
   */
  buffered?: boolean
}

/**
 * The buffered mode: events whose answer the agent does not wait for are queued and sent
 * together (POST /events/batch). See the README's "Buffered mode".
 */
export interface BufferOptions {
  /** Flush once this many events are queued. Default 100 (or maxQueued, when smaller). A batch holds at most 1000: more go in several. */
  maxEvents?: number
  /** Flush once the oldest queued event is this old (ms). Default 1000. */
  maxAgeMs?: number
  /**
   * At most this many events wait (the batch in flight aside); past it the oldest are dropped,
   * reported once to onError (`buffer_full`) until a batch goes through again. Default 10 000
   * (or maxEvents, when larger).
   */
  maxQueued?: number
}

/**
 * A budget over a calendar period in a time zone: a day, a week or a month, each beginning at
 * local midnight. A pause by it ends by itself when the next period begins.
 */
export interface CalendarBudget {
  period: 'day' | 'week' | 'month'
  /** USD the period may spend; an event that takes its spend strictly over it pauses the agent. More than 0, at most 10^9. */
  limitUsd: number
  /** An IANA time zone name ("Europe/Paris"); default "UTC". The server checks the name. */
  timeZone?: string
  /** The day a week begins on; default "monday". */
  weekStarts?: 'monday' | 'sunday'
  /** The day of the month (1 to 28) a month begins on; default 1. */
  monthStartsOn?: number
}

/**
 * A budget over a rolling window of whole days (the current UTC hour and the hours before it),
 * named `window_<n>d`. A pause by it ends once its spend is back within the limit.
 */
export interface RollingBudget {
  /** The window's length, 1 to 31 days. */
  windowDays: number
  /** USD the window may spend; more than 0, at most 10^9. */
  limitUsd: number
}

/** One of an agent's period budgets, beside its rolling 24 h budget: at most four, one per period. */
export type PeriodBudget = CalendarBudget | RollingBudget

/** A period of the agent's period budgets, as an answer shows it. */
export interface PeriodResponse {
  /** "day", "week", "month" or "window_<n>d". */
  period: string
  spent_usd: number
  limit_usd: number
  /** The limit minus the spend (negative when over it). */
  remaining_usd: number
  /** ISO 8601: the period's first instant (a rolling window's first whole UTC hour). */
  starts_at: string
  /** ISO 8601: a calendar period's end, where the next one begins; null for a rolling window. */
  ends_at: string | null
  /** ISO 8601: when the limit is reached at the last hour's spend rate, if before the period ends; else null. */
  projected_exhaustion_at: string | null
}

/** A period of the agent's period budgets, as of the client's last answer. */
export interface Period {
  /** "day", "week", "month" or "window_<n>d". */
  period: string
  spentUsd: number
  limitUsd: number
  /** The limit minus the spend (negative when over it). */
  remainingUsd: number
  /** The period's first instant (a rolling window's first whole UTC hour). */
  startsAt: Date
  /** A calendar period's end, where the next one begins; null for a rolling window. */
  endsAt: Date | null
  /** When the limit is reached at the last hour's spend rate, if before the period ends; else null. */
  projectedExhaustionAt: Date | null
}

/** The body of a 200 answer to POST /events. */
export interface EventResponse {
  ok: true
  event_id: string
  cost_usd: number
  paused: boolean
  /**
   * Why it is paused: 'budget', 'velocity', 'period_budget' or 'manual' (the agent's own),
   * 'fleet_budget', 'fleet_velocity', 'fleet_period_budget' or 'fleet_manual' (its user's fleet),
   * each of which pauses the client; 'run_budget': the event's run went over its run budget,
   * which stops that run only (Burnrate.runStopped); null while it runs.
   */
  paused_reason: string | null
  /** With paused_reason 'period_budget' or 'fleet_period_budget': the period over its limit ("month", "window_30d"); else null. */
  paused_period: string | null
  total_cost_24h: number
  /** The budget minus the 24 h total (negative when over it). */
  remaining_usd: number
  /** When the total reaches the budget at the last hour's spend rate (ISO 8601), null when it never would. */
  projected_exhaustion_at: string | null
  /** Each period of the agent's period budgets, after this event; empty without period budgets. */
  periods: PeriodResponse[]
  /** The alert levels (fractions of the budget) this event took the total to or past. */
  alerts: number[]
  /** The alert levels of its user's fleet budget this event took the fleet's total to or past. */
  fleet_alerts: number[]
  /** Present (true) when the event_id had been accepted before: counted once. */
  duplicate?: true
}

/** The body of a 200 answer to POST /holds: always the same keys, granted or refused. */
export interface HoldResponse {
  ok: true
  allowed: boolean
  /** null when granted. 'run_budget': the hold's run is stopped (then paused, paused_reason 'run_budget'), or the worst case would take it over its run budget. */
  reason: 'paused' | 'budget' | 'fleet_budget' | 'period_budget' | 'fleet_period_budget' | 'run_budget' | null
  /** null when refused: nothing is held then. */
  hold_id: string | null
  /** The worst case held; 0 when refused. */
  held_usd: number
  /** The call's worst case: all of its input and max_output_tokens of output, at its model's prices. */
  worst_case_usd: number
  /** The budget minus the 24 h total and the open holds. */
  remaining_usd: number
  /** ISO 8601; null when refused. */
  expires_at: string | null
  paused: boolean
  paused_reason: string | null
  /** With paused_reason 'period_budget' or 'fleet_period_budget': the period over its limit; else null. */
  paused_period: string | null
}

/** What onAlert is told: the levels an event crossed, and the answer that said so. */
export interface AlertInfo {
  levels: number[]
  response: EventResponse
}

/** An RFC 9457 problem as burnrate sends it (application/problem+json). */
export interface Problem {
  type?: string
  title?: string
  status?: number
  code?: string
  detail?: string
  errors?: Array<{ field?: string; message?: string; [key: string]: unknown }>
  [key: string]: unknown
}

/** What the client was doing when a request failed ('batch': a POST /events/batch of the buffered mode, as a whole). */
export type Operation = 'config' | 'event' | 'batch' | 'refresh' | 'hold' | 'release'

/**
 * `open` (default): a failure to reach burnrate does not stop the agent; send() returns true
 * (unless the agent is known to be paused). `closed`: send() returns false on a failure.
 */
export type FailMode = 'open' | 'closed'

/** The worst case of the LLM call guard() is about to make, to hold against the budget. */
export interface GuardCall {
  /** The model the server prices the worst case at (and llmCall reports). */
  model: string
  /** All input tokens the call sends (every one priced as uncached input: the worst case). */
  inputTokens: number
  /** The call's output limit (max_tokens / max_output_tokens). */
  maxOutputTokens: number
  /** How long burnrate holds it unless the call is reported first: 1 to 3600 seconds. Default 300 (the server's). */
  ttlSeconds?: number
}

/**
 * What guard() hands its function: the hold, and report methods that send the call's llm_call
 * with `hold_id`, so burnrate settles the hold with the real cost. Each resolves as send() does.
 * Without a hold (failMode "open" and burnrate unreachable) they send the llm_call without it.
 */
export interface Hold {
  /** The hold's id; null when the call runs unguarded (burnrate could not be reached). */
  readonly holdId: string | null
  /** The worst case held against the budget, USD; 0 without a hold. */
  readonly heldUsd: number
  /** When burnrate lets the hold go unless the call is reported first; null without a hold. */
  readonly expiresAt: Date | null
  /** The call as token counts, for the guarded model: like Burnrate.llmCall without the model. */
  llmCall(usage: LlmUsage, extras?: EventExtras): Promise<boolean>
  fromOpenAIChat(model: string, usage: ProviderUsage, extras?: EventExtras): Promise<boolean>
  fromOpenAIResponses(model: string, usage: ProviderUsage, extras?: EventExtras): Promise<boolean>
  fromAnthropic(model: string, usage: ProviderUsage, extras?: EventExtras): Promise<boolean>
  fromUsage(source: UsageSource, model: string, usage: ProviderUsage, extras?: EventExtras): Promise<boolean>
}

/**
 * Why guard() did not run its function: the agent or its fleet is paused (`paused`), the call's
 * worst case does not fit in what is left of the agent's budget (`budget`) or its fleet's
 * (`fleet_budget`), would take a period of the agent's period budgets over its limit
 * (`period_budget`) or one of its fleet's (`fleet_period_budget`), the current run is stopped
 * by its run budget or the worst case would take it over that budget (`run_budget`), or burnrate
 * could not be reached with failMode "closed" (`unreachable`).
 */
export type GuardRefusalReason = 'paused' | 'budget' | 'fleet_budget' | 'period_budget' | 'fleet_period_budget' | 'run_budget' | 'unreachable'

/** What guard() resolves to: the function's value, or why it did not run. */
export type GuardResult<T> =
  | {
      allowed: true
      value: T
      /** The hold the call ran under; null when it ran unguarded (failMode "open", burnrate unreachable). */
      holdId: string | null
    }
  | {
      allowed: false
      reason: GuardRefusalReason
      /**
       * With reason 'paused': why, as `Burnrate.pausedReason`. With reason 'run_budget':
       * 'run_budget' when the run is stopped (as `Burnrate.runStoppedReason`), null when only
       * this call's worst case would take it over. Else null.
       */
      pausedReason: string | null
      /** With reason 'paused' by a period budget: its period, as `Burnrate.pausedPeriod`; else null. */
      pausedPeriod: string | null
      /** What is left of the budget, open holds deducted, as burnrate answered the hold; null when it did not answer one. */
      remainingUsd: number | null
      /** The call's worst case as burnrate priced it; null when it did not answer. */
      worstCaseUsd: number | null
    }
