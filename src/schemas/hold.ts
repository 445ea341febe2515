import { z } from 'zod'
import { agentId, holdId, runId, tokens } from './event.ts'

/** How long a hold lives unless its call settles it first, and at most. */
export const DEFAULT_HOLD_TTL_SECONDS = 300
export const MAX_HOLD_TTL_SECONDS = 3600

/** POST /holds: the worst case of a coming llm_call, to reserve against the budget. */
export const holdBody = z.strictObject({
  agent_id: agentId,
  model: z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters'),
  input_tokens: tokens,
  max_output_tokens: tokens,
  // The client's own id for the hold, so a retry of a request whose answer was lost is the
  // same hold, not a second one (as event_id is for events); one is made when absent.
  hold_id: holdId.optional(),
  // The run the call belongs to: with a run budget on the agent, held against it too.
  run_id: runId.optional(),
  ttl_seconds: z
    .number()
    .int('must be an integer')
    .min(1, `must be between 1 and ${MAX_HOLD_TTL_SECONDS}`)
    .max(MAX_HOLD_TTL_SECONDS, `must be between 1 and ${MAX_HOLD_TTL_SECONDS}`)
    .default(DEFAULT_HOLD_TTL_SECONDS),
})

export type HoldBody = z.output<typeof holdBody>

export const holdParams = z.strictObject({ hold_id: holdId })
