import { z } from 'zod'

/** DECISIONS.md "Value rules". */
export const MAX_METADATA_BYTES = 16 * 1024
export const MAX_BODY_BYTES = 64 * 1024
const MAX_TOKENS = 1_000_000_000

// Control characters (C0, DEL, C1) would corrupt logs, CSV exports and chat messages.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

export const agentId = z
  .string()
  .min(1, 'must be 1 to 128 characters')
  .max(128, 'must be 1 to 128 characters')
  .refine((s) => !CONTROL.test(s), 'must not contain control characters')

const tokens = z.number().int('must be an integer').min(0, 'must be >= 0').max(MAX_TOKENS, `must be <= ${MAX_TOKENS}`)

const metadata = z
  .record(z.string(), z.unknown())
  .refine((m) => Buffer.byteLength(JSON.stringify(m)) <= MAX_METADATA_BYTES, `must be at most ${MAX_METADATA_BYTES} bytes as JSON`)

export const EVENT_TYPES = ['llm_call', 'tool_call', 'agent_start', 'agent_end'] as const

/** The body of POST /events (SPEC.md 2.2 plus the optional fields of DECISIONS.md). */
export const eventBody = z
  .strictObject({
    agent_id: agentId,
    event_type: z.enum(EVENT_TYPES, { error: `must be one of ${EVENT_TYPES.join(', ')}` }),
    event_id: z.uuid('must be a UUID').transform((s) => s.toLowerCase()).optional(),
    model: z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters').optional(),
    input_tokens: tokens.default(0),
    output_tokens: tokens.default(0),
    cache_read_tokens: tokens.default(0),
    cache_write_tokens: tokens.default(0),
    tool_name: z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters').nullable().optional(),
    metadata: metadata.optional(),
  })
  .superRefine((e, ctx) => {
    if (e.event_type === 'llm_call' && e.model === undefined) {
      ctx.addIssue({ code: 'custom', path: ['model'], message: 'is required when event_type is llm_call' })
    }
    if (e.event_type === 'tool_call' && (e.tool_name === undefined || e.tool_name === null)) {
      ctx.addIssue({ code: 'custom', path: ['tool_name'], message: 'is required when event_type is tool_call' })
    }
    // Cache tokens are parts of input_tokens (DECISIONS.md), so they cannot exceed it.
    if (e.cache_read_tokens + e.cache_write_tokens > e.input_tokens) {
      ctx.addIssue({ code: 'custom', path: ['cache_read_tokens'], message: 'cache_read_tokens + cache_write_tokens must not exceed input_tokens' })
    }
  })

export type EventBody = z.output<typeof eventBody>
