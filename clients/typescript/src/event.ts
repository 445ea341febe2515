import { isUuid, randomUuid } from './id.js'
import type { BurnrateEvent, EventType, GuardCall, Metadata } from './types.js'

/** The server's value rules, checked before anything is sent. */
export const MAX_TOKENS = 1_000_000_000
export const MAX_NAME_LENGTH = 256
export const MAX_METADATA_BYTES = 16 * 1024
export const MAX_HOLD_TTL_SECONDS = 3600

const EVENT_TYPES: readonly EventType[] = ['llm_call', 'tool_call', 'agent_start', 'agent_end']
const FIELDS = new Set(['event_type', 'model', 'input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'usage', 'provider', 'api_flavor', 'tool_name', 'metadata', 'run_id', 'event_id', 'hold_id'])
const GUARD_FIELDS = new Set(['model', 'inputTokens', 'maxOutputTokens', 'ttlSeconds'])
const TOKEN_FIELDS = ['input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens'] as const

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

/** The wire body of POST /events. */
export type EventBody = BurnrateEvent & { agent_id: string; event_id: string }

/** Throws a TypeError unless `id` is a valid agent_id or run_id (the same rule: 1–128 characters, no control characters). */
export function checkAgentId(id: unknown, what = 'agentId'): string {
  if (typeof id !== 'string' || id.length < 1 || id.length > 128 || CONTROL.test(id)) {
    throw new TypeError(`burnrate: ${what} must be a string of 1 to 128 characters without control characters`)
  }
  return id
}

/** Throws a TypeError unless `v` is a token count (an integer 0 … 10^9). */
export function checkTokens(v: unknown, field: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_TOKENS) {
    throw new TypeError(`burnrate: ${field} must be an integer from 0 to ${MAX_TOKENS}, got ${String(v)}`)
  }
  return v
}

function checkName(v: unknown, field: string): string {
  if (typeof v !== 'string' || v.length < 1 || v.length > MAX_NAME_LENGTH) {
    throw new TypeError(`burnrate: ${field} must be a string of 1 to ${MAX_NAME_LENGTH} characters`)
  }
  return v
}

function checkMetadata(v: unknown): Metadata {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new TypeError('burnrate: metadata must be a plain object')
  let json: string
  try {
    json = JSON.stringify(v)
  } catch (err) {
    throw new TypeError(`burnrate: metadata must be serializable as JSON (${err instanceof Error ? err.message : String(err)})`, { cause: err })
  }
  if (new TextEncoder().encode(json).length > MAX_METADATA_BYTES) {
    throw new TypeError(`burnrate: metadata must be at most ${MAX_METADATA_BYTES} bytes as JSON`)
  }
  return v as Metadata
}

/**
 * The POST /events body of `event` for `agentId`, with an event_id (the event's own, or a
 * new random UUID). Throws a TypeError for an event the server would refuse with 400: that
 * is a programming error, not a monitoring failure.
 */
export function buildEventBody(agentId: string, event: BurnrateEvent): EventBody {
  if (typeof event !== 'object' || event === null || Array.isArray(event)) throw new TypeError('burnrate: an event must be an object')
  for (const key of Object.keys(event)) {
    if (key === 'agent_id') throw new TypeError('burnrate: an event has no agent_id: the client sets the agentId it was created with')
    if (!FIELDS.has(key)) throw new TypeError(`burnrate: unknown event field ${JSON.stringify(key)}`)
  }
  const e = event as unknown as Record<string, unknown>
  if (!EVENT_TYPES.includes(e.event_type as EventType)) {
    throw new TypeError(`burnrate: event_type must be one of ${EVENT_TYPES.join(', ')}, got ${JSON.stringify(e.event_type)}`)
  }
  const body: EventBody = { agent_id: agentId, event_type: e.event_type as EventType, event_id: '' }
  if (e.model !== undefined) body.model = checkName(e.model, 'model')
  else if (e.event_type === 'llm_call') throw new TypeError('burnrate: model is required for an llm_call event')
  if (e.tool_name !== undefined && e.tool_name !== null) body.tool_name = checkName(e.tool_name, 'tool_name')
  else if (e.event_type === 'tool_call') throw new TypeError('burnrate: tool_name is required for a tool_call event')
  if (e.usage !== undefined) {
    // The provider's usage object goes as it is: the server reads it (fromUsage).
    if (e.event_type !== 'llm_call') throw new TypeError('burnrate: usage is for llm_call events only')
    if (typeof e.usage !== 'object' || e.usage === null || Array.isArray(e.usage)) throw new TypeError('burnrate: usage must be the provider\'s usage object')
    if (TOKEN_FIELDS.some((f) => e[f] !== undefined)) throw new TypeError('burnrate: send the usage object or the token fields, not both')
    body.usage = e.usage as Record<string, unknown>
    body.provider = checkName(e.provider, 'provider')
    if (e.api_flavor !== undefined) body.api_flavor = checkName(e.api_flavor, 'api_flavor')
  } else if (e.provider !== undefined || e.api_flavor !== undefined) {
    throw new TypeError('burnrate: provider and api_flavor go with usage')
  }
  for (const field of TOKEN_FIELDS) {
    if (e[field] !== undefined) body[field] = checkTokens(e[field], field)
  }
  if ((body.cache_read_tokens ?? 0) + (body.cache_write_tokens ?? 0) > (body.input_tokens ?? 0)) {
    throw new TypeError('burnrate: cache_read_tokens + cache_write_tokens are parts of input_tokens and must not exceed it')
  }
  if (e.metadata !== undefined) body.metadata = checkMetadata(e.metadata)
  if (e.run_id !== undefined) body.run_id = checkAgentId(e.run_id, 'run_id')
  if (e.event_id !== undefined) {
    if (typeof e.event_id !== 'string' || !isUuid(e.event_id)) throw new TypeError('burnrate: event_id must be a UUID')
    body.event_id = e.event_id.toLowerCase()
  } else {
    body.event_id = randomUuid()
  }
  if (e.hold_id !== undefined) {
    if (e.event_type !== 'llm_call') throw new TypeError('burnrate: hold_id is for llm_call events only')
    if (typeof e.hold_id !== 'string' || !isUuid(e.hold_id)) throw new TypeError('burnrate: hold_id must be a UUID: a hold_id POST /holds answered')
    body.hold_id = e.hold_id.toLowerCase()
  }
  return body
}

/** The wire body of POST /holds. */
export interface HoldBody {
  agent_id: string
  model: string
  input_tokens: number
  max_output_tokens: number
  /** The client's own id, sent on every retry: a retry whose first answer was lost is the same hold. */
  hold_id: string
  /** The run the call belongs to: with a run budget, burnrate holds the worst case against it too. */
  run_id?: string
  ttl_seconds?: number
}

/** The POST /holds body of guard()'s `call` for `agentId`, in run `runId` (null: none). Throws a TypeError for a call the server would refuse with 400. */
export function buildHoldBody(agentId: string, call: GuardCall, runId: string | null): HoldBody {
  if (typeof call !== 'object' || call === null || Array.isArray(call)) throw new TypeError('burnrate: guard needs { model, inputTokens, maxOutputTokens, ttlSeconds? }')
  for (const key of Object.keys(call)) {
    if (!GUARD_FIELDS.has(key)) throw new TypeError(`burnrate: unknown guard field ${JSON.stringify(key)}`)
  }
  const body: HoldBody = {
    agent_id: agentId,
    model: checkName(call.model, 'model'),
    input_tokens: checkTokens(call.inputTokens, 'inputTokens'),
    max_output_tokens: checkTokens(call.maxOutputTokens, 'maxOutputTokens'),
    hold_id: randomUuid(),
  }
  if (runId !== null) body.run_id = runId
  if (call.ttlSeconds !== undefined) {
    const ttl = call.ttlSeconds
    if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 1 || ttl > MAX_HOLD_TTL_SECONDS) {
      throw new TypeError(`burnrate: ttlSeconds must be an integer from 1 to ${MAX_HOLD_TTL_SECONDS}, got ${String(ttl)}`)
    }
    body.ttl_seconds = ttl
  }
  return body
}
