/** The kinds of event burnrate accepts (SPEC.md 2.2). */
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
  /** A UUID; the client generates one when absent. The same id is sent on every retry. */
  event_id?: string
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
}

/** The body of a 200 answer to POST /events. */
export interface EventResponse {
  ok: true
  event_id: string
  cost_usd: number
  paused: boolean
  /**
   * Why it is paused: 'budget', 'velocity' or 'manual' (the agent's own), 'fleet_budget',
   * 'fleet_velocity' or 'fleet_manual' (its user's fleet); null while it runs. Any pause stops the client.
   */
  paused_reason: string | null
  total_cost_24h: number
  /** The budget minus the 24 h total (negative when over it). */
  remaining_usd: number
  /** When the total reaches the budget at the last hour's spend rate (ISO 8601), null when it never would. */
  projected_exhaustion_at: string | null
  /** The alert levels (fractions of the budget) this event took the total to or past. */
  alerts: number[]
  /** The alert levels of its user's fleet budget this event took the fleet's total to or past. */
  fleet_alerts: number[]
  /** Present (true) when the event_id had been accepted before: counted once. */
  duplicate?: true
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

/** What the client was doing when a request failed. */
export type Operation = 'config' | 'event' | 'refresh'

/**
 * `open` (default): a failure to reach burnrate does not stop the agent; send() returns true
 * (unless the agent is known to be paused). `closed`: send() returns false on a failure.
 */
export type FailMode = 'open' | 'closed'
