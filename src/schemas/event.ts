import { z } from 'zod'

/** An event's value limits: metadata at most 16 KiB as JSON, a body at most 64 KiB, token counts 0 to 10^9. */
export const MAX_METADATA_BYTES = 16 * 1024
export const MAX_BODY_BYTES = 64 * 1024
const MAX_TOKENS = 1_000_000_000

// Control characters (C0, DEL, C1) would corrupt logs, CSV exports and chat messages.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

/** An id the client names: 1 to 128 characters, none of them control characters. */
const clientId = z
  .string()
  .min(1, 'must be 1 to 128 characters')
  .max(128, 'must be 1 to 128 characters')
  .refine((s) => !CONTROL.test(s), 'must not contain control characters')

export const agentId = clientId

/** A run's id: one task of an agent, from its start to its end (the clients make one per start()). */
export const runId = clientId

export const tokens = z.number().int('must be an integer').min(0, 'must be >= 0').max(MAX_TOKENS, `must be <= ${MAX_TOKENS}`)

const metadata = z
  .record(z.string(), z.unknown())
  .refine((m) => Buffer.byteLength(JSON.stringify(m)) <= MAX_METADATA_BYTES, `must be at most ${MAX_METADATA_BYTES} bytes as JSON`)

/** A budget hold's id, as POST /holds answers it. */
export const holdId = z.uuid('must be a UUID: a hold_id POST /holds answered').transform((s) => s.toLowerCase())

export const EVENT_TYPES = ['llm_call', 'tool_call', 'agent_start', 'agent_end'] as const
/** The flat token fields of an llm_call (or, instead, a usage object). */
export const TOKEN_FIELDS = ['input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens'] as const

/** The body of POST /events; a field not named here is refused. */
export const eventBody = z
  .strictObject({
    agent_id: agentId,
    event_type: z.enum(EVENT_TYPES, { error: `must be one of ${EVENT_TYPES.join(', ')}` }),
    event_id: z.uuid('must be a UUID').transform((s) => s.toLowerCase()).optional(),
    model: z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters').optional(),
    input_tokens: tokens.optional(),
    output_tokens: tokens.optional(),
    cache_read_tokens: tokens.optional(),
    cache_write_tokens: tokens.optional(),
    // The provider's usage object as its SDK returned it, instead of the token fields. Any
    // object: the price library's extractor reads it. (A loose object, not a record: the same
    // check without one schema call per key, 0.4 us an event.)
    usage: z.looseObject({}, { error: "must be an object: the SDK's usage object" }).optional(),
    provider: z.string().min(1, 'must not be empty').max(64, 'must be at most 64 characters').optional(),
    api_flavor: z.string().min(1, 'must not be empty').max(64, 'must be at most 64 characters').optional(),
    // The provider's service tier (OpenAI reports it beside usage; Anthropic's usage holds it).
    service_tier: z.string().min(1, 'must not be empty').max(64, 'must be at most 64 characters').optional(),
    tool_name: z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters').nullable().optional(),
    metadata: metadata.optional(),
    // The run the event belongs to; an agent_start without one opens a run named by its event_id.
    run_id: runId.optional(),
    // The budget hold this llm_call settles: the hold_id POST /holds answered.
    hold_id: holdId.optional(),
  })
  .superRefine((e, ctx) => {
    if (e.event_type === 'llm_call' && e.model === undefined) {
      ctx.addIssue({ code: 'custom', path: ['model'], message: 'is required when event_type is llm_call' })
    }
    if (e.hold_id !== undefined && e.event_type !== 'llm_call') {
      ctx.addIssue({ code: 'custom', path: ['hold_id'], message: 'is for llm_call events only' })
    }
    if (e.service_tier !== undefined && e.event_type !== 'llm_call') {
      ctx.addIssue({ code: 'custom', path: ['service_tier'], message: 'is for llm_call events only' })
    }
    if (e.event_type === 'tool_call' && (e.tool_name === undefined || e.tool_name === null)) {
      ctx.addIssue({ code: 'custom', path: ['tool_name'], message: 'is required when event_type is tool_call' })
    }
    if (e.usage !== undefined) {
      if (e.event_type !== 'llm_call') ctx.addIssue({ code: 'custom', path: ['usage'], message: 'is for llm_call events only' })
      if (e.provider === undefined) ctx.addIssue({ code: 'custom', path: ['provider'], message: 'is required with usage (the price library\'s provider id, e.g. openai)' })
      for (const field of TOKEN_FIELDS) {
        if (e[field] !== undefined) ctx.addIssue({ code: 'custom', path: [field], message: 'must not be sent with usage: send the usage object or the token fields, not both' })
      }
      return
    }
    for (const field of ['provider', 'api_flavor'] as const) {
      if (e[field] !== undefined) ctx.addIssue({ code: 'custom', path: [field], message: 'is only sent with usage' })
    }
    // Cache tokens are parts of input_tokens, so they cannot exceed it.
    if ((e.cache_read_tokens ?? 0) + (e.cache_write_tokens ?? 0) > (e.input_tokens ?? 0)) {
      ctx.addIssue({ code: 'custom', path: ['cache_read_tokens'], message: 'cache_read_tokens + cache_write_tokens must not exceed input_tokens' })
    }
  })

export type EventBody = z.output<typeof eventBody>

/** The events POST /events/batch takes at most, and its body's limit: a thousand events of a few hundred bytes each fit, with room. */
export const MAX_BATCH_EVENTS = 1000
export const MAX_BATCH_BYTES = 4 * 1024 * 1024

/**
 * The body of POST /events/batch: the events, each as POST /events takes it. Each event is
 * checked on its own (a bad one is answered in its place, the others are stored): only the
 * list itself is checked here.
 */
export const batchBody = z.strictObject({
  events: z
    .array(z.unknown(), { error: 'must be an array of events' })
    .min(1, 'must hold at least one event')
    .max(MAX_BATCH_EVENTS, `must hold at most ${MAX_BATCH_EVENTS} events`),
})

/** batchBody as OpenAPI documents it: a list of events. */
export const batchBodyDoc = z.strictObject({ events: z.array(eventBody).min(1).max(MAX_BATCH_EVENTS) })
