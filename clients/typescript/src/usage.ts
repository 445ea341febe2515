import { checkTokens } from './event.js'
import type { BurnrateEvent, EventExtras, LlmUsage } from './types.js'

/**
 * The usage object of a provider's response, as its SDK returns it: `completion.usage`
 * (openai `CompletionUsage`), `response.usage` (openai `ResponseUsage`), `message.usage`
 * (@anthropic-ai/sdk `Usage`), `response.usageMetadata` (@google/genai). It is sent to burnrate
 * as it is: the server reads and prices every quantity in it (audio, cache writes by duration,
 * reasoning, web searches, …) with the price library's own extractors, so nothing is mapped,
 * or lost, here. The SDKs type `usage` as optional: `undefined` and `null` are accepted by
 * the types and refused at run time (a streamed response reports usage only when asked to).
 */
export type ProviderUsage = object | null | undefined

/** Where a usage object comes from: the price library's provider id, and the provider's API flavor. */
export interface UsageSource {
  provider: string
  /** The provider's API shape, where it has several: `chat` or `responses` for OpenAI. */
  apiFlavor?: string
}

/** The llm_call event of a provider's usage object (see ProviderUsage). */
export function fromUsage(source: UsageSource, model: string, usage: ProviderUsage, extras?: EventExtras): BurnrateEvent {
  if (typeof model !== 'string' || model.length === 0) throw new TypeError('burnrate: model must be a non-empty string')
  if (typeof usage !== 'object' || usage === null || Array.isArray(usage)) {
    throw new TypeError(`burnrate: the response's usage object is needed, got ${usage === null ? 'null' : Array.isArray(usage) ? 'an array' : typeof usage} (a streamed response reports usage only when asked to)`)
  }
  const event: BurnrateEvent = { event_type: 'llm_call', model, provider: source.provider, usage: usage as Record<string, unknown> }
  if (source.apiFlavor !== undefined) event.api_flavor = source.apiFlavor
  return withExtras(event, extras)
}

/** The llm_call event of token counts (cache counts are parts of inputTokens). */
export function llmCallEvent(model: string, usage: LlmUsage, extras?: EventExtras): BurnrateEvent {
  if (typeof usage !== 'object' || usage === null) throw new TypeError('burnrate: llmCall needs { inputTokens, outputTokens }')
  const event: BurnrateEvent = {
    event_type: 'llm_call',
    model,
    input_tokens: checkTokens(usage.inputTokens, 'inputTokens'),
    output_tokens: checkTokens(usage.outputTokens, 'outputTokens'),
  }
  if (usage.cacheReadTokens !== undefined) event.cache_read_tokens = usage.cacheReadTokens
  if (usage.cacheWriteTokens !== undefined) event.cache_write_tokens = usage.cacheWriteTokens
  return withExtras(event, extras)
}

/** Copies `metadata`, `eventId` and `runId` of `extras` onto `event`. */
export function withExtras(event: BurnrateEvent, extras?: EventExtras): BurnrateEvent {
  if (extras?.metadata !== undefined) event.metadata = extras.metadata
  if (extras?.eventId !== undefined) event.event_id = extras.eventId
  if (extras?.runId !== undefined) event.run_id = extras.runId
  return event
}

/** The llm_call of an OpenAI Chat Completions response: `fromOpenAIChat(completion.model, completion.usage)`. */
export function fromOpenAIChat(model: string, usage: ProviderUsage, extras?: EventExtras): BurnrateEvent {
  return fromUsage({ provider: 'openai', apiFlavor: 'chat' }, model, usage, extras)
}

/** The llm_call of an OpenAI Responses API response: `fromOpenAIResponses(response.model, response.usage)`. */
export function fromOpenAIResponses(model: string, usage: ProviderUsage, extras?: EventExtras): BurnrateEvent {
  return fromUsage({ provider: 'openai', apiFlavor: 'responses' }, model, usage, extras)
}

/** The llm_call of an Anthropic Messages response: `fromAnthropic(message.model, message.usage)`. */
export function fromAnthropic(model: string, usage: ProviderUsage, extras?: EventExtras): BurnrateEvent {
  return fromUsage({ provider: 'anthropic' }, model, usage, extras)
}
