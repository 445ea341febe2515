import { checkTokens } from './event.js'
import type { BurnrateEvent, EventExtras } from './types.js'

/**
 * `usage` of an OpenAI Chat Completions response (`CompletionUsage` of the openai SDK).
 * prompt_tokens includes the cached tokens; completion_tokens includes reasoning tokens.
 */
export interface OpenAIChatUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens?: number
  prompt_tokens_details?: { cached_tokens?: number | null; audio_tokens?: number | null } | null
  completion_tokens_details?: { reasoning_tokens?: number | null; audio_tokens?: number | null; accepted_prediction_tokens?: number | null; rejected_prediction_tokens?: number | null } | null
}

/**
 * `usage` of an OpenAI Responses API response (`ResponseUsage` of the openai SDK).
 * input_tokens includes the cached tokens; output_tokens includes reasoning tokens.
 */
export interface OpenAIResponsesUsage {
  input_tokens: number
  output_tokens: number
  total_tokens?: number
  input_tokens_details?: { cached_tokens?: number | null } | null
  output_tokens_details?: { reasoning_tokens?: number | null } | null
}

/**
 * `usage` of an Anthropic Messages response (`Usage` of the @anthropic-ai/sdk).
 * Unlike OpenAI's, input_tokens EXCLUDES the tokens read from or written to the cache.
 */
export interface AnthropicUsage {
  input_tokens: number
  output_tokens: number
  cache_creation_input_tokens?: number | null
  cache_read_input_tokens?: number | null
  cache_creation?: { ephemeral_5m_input_tokens?: number | null; ephemeral_1h_input_tokens?: number | null } | null
  server_tool_use?: unknown
  service_tier?: string | null
}

function usageObject(usage: unknown, helper: string): Record<string, unknown> {
  if (typeof usage !== 'object' || usage === null) {
    throw new TypeError(`burnrate: ${helper} needs the response's usage object, got ${usage === null ? 'null' : typeof usage} (a streamed response reports usage only when asked to)`)
  }
  return usage as Record<string, unknown>
}

function optional(v: unknown, field: string): number {
  return v === undefined || v === null ? 0 : checkTokens(v, field)
}

function detail(details: unknown, key: string, field: string): number {
  if (typeof details !== 'object' || details === null) return 0
  return optional((details as Record<string, unknown>)[key], field)
}

function llmEvent(model: string, input: number, output: number, cacheRead: number, cacheWrite: number, extras?: EventExtras): BurnrateEvent {
  if (typeof model !== 'string' || model.length === 0) throw new TypeError('burnrate: model must be a non-empty string')
  const event: BurnrateEvent = { event_type: 'llm_call', model, input_tokens: input, output_tokens: output }
  if (cacheRead > 0) event.cache_read_tokens = cacheRead
  if (cacheWrite > 0) event.cache_write_tokens = cacheWrite
  return withExtras(event, extras)
}

/** Copies `metadata` and `eventId` of `extras` onto `event`. */
export function withExtras(event: BurnrateEvent, extras?: EventExtras): BurnrateEvent {
  if (extras?.metadata !== undefined) event.metadata = extras.metadata
  if (extras?.eventId !== undefined) event.event_id = extras.eventId
  return event
}

/**
 * The llm_call event of an OpenAI Chat Completions call:
 * input = prompt_tokens (cached included), output = completion_tokens,
 * cache_read = prompt_tokens_details.cached_tokens.
 */
export function fromOpenAIChat(model: string, usage: OpenAIChatUsage, extras?: EventExtras): BurnrateEvent {
  const u = usageObject(usage, 'fromOpenAIChat')
  return llmEvent(
    model,
    checkTokens(u.prompt_tokens, 'usage.prompt_tokens'),
    checkTokens(u.completion_tokens, 'usage.completion_tokens'),
    detail(u.prompt_tokens_details, 'cached_tokens', 'usage.prompt_tokens_details.cached_tokens'),
    0,
    extras,
  )
}

/**
 * The llm_call event of an OpenAI Responses API call:
 * input = input_tokens (cached included), output = output_tokens,
 * cache_read = input_tokens_details.cached_tokens.
 */
export function fromOpenAIResponses(model: string, usage: OpenAIResponsesUsage, extras?: EventExtras): BurnrateEvent {
  const u = usageObject(usage, 'fromOpenAIResponses')
  return llmEvent(
    model,
    checkTokens(u.input_tokens, 'usage.input_tokens'),
    checkTokens(u.output_tokens, 'usage.output_tokens'),
    detail(u.input_tokens_details, 'cached_tokens', 'usage.input_tokens_details.cached_tokens'),
    0,
    extras,
  )
}

/**
 * The llm_call event of an Anthropic Messages call. Anthropic's input_tokens excludes the
 * cache, burnrate's includes it: input = input_tokens + cache_creation_input_tokens +
 * cache_read_input_tokens, cache_read = cache_read_input_tokens,
 * cache_write = cache_creation_input_tokens.
 */
export function fromAnthropic(model: string, usage: AnthropicUsage, extras?: EventExtras): BurnrateEvent {
  const u = usageObject(usage, 'fromAnthropic')
  const uncached = checkTokens(u.input_tokens, 'usage.input_tokens')
  const cacheWrite = optional(u.cache_creation_input_tokens, 'usage.cache_creation_input_tokens')
  const cacheRead = optional(u.cache_read_input_tokens, 'usage.cache_read_input_tokens')
  return llmEvent(model, uncached + cacheWrite + cacheRead, checkTokens(u.output_tokens, 'usage.output_tokens'), cacheRead, cacheWrite, extras)
}
