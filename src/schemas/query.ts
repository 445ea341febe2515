import { z } from 'zod'
import { agentId } from './event.ts'

/** An integer query parameter: digits only (no "1e3", no "12abc"), within bounds. */
function intParam(min: number, max: number, fallback: number) {
  return z
    .string()
    .regex(/^\d{1,9}$/, 'must be an integer')
    .transform(Number)
    .pipe(z.number().min(min, `must be between ${min} and ${max}`).max(max, `must be between ${min} and ${max}`))
    .default(fallback)
}

export const eventsQuery = z.strictObject({ limit: intParam(1, 1000, 50) })

export const agentQuery = z.strictObject({
  limit: intParam(1, 1000, 100),
  before: z.iso.datetime({ offset: true, error: 'must be an ISO 8601 timestamp' }).optional(),
})

export const hourlyQuery = z.strictObject({ hours: intParam(1, 720, 24) })

export const agentParams = z.strictObject({ agent_id: agentId })
