import { z } from 'zod'
import { AUDIT_SCOPES } from '../storage/audit.ts'
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

/** A page cursor of the audit log (next_before): the record's time, sequence and id. */
const AUDIT_CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)_(\d{1,20})_([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/

/** GET /audit: `before` is a next_before cursor, or an ISO time (records strictly older). */
export const auditQuery = z.strictObject({
  agent_id: agentId.optional(),
  scope: z.enum(AUDIT_SCOPES).optional(),
  limit: intParam(1, 1000, 100),
  before: z
    .union([
      z.string().regex(AUDIT_CURSOR).transform((s) => {
        const [, at, seq, id] = AUDIT_CURSOR.exec(s)!
        return { at: at!, after: { seq: seq!, id: id! } }
      }),
      z.iso.datetime({ offset: true }).transform((at) => ({ at, after: null })),
    ], { error: 'must be a next_before cursor or an ISO 8601 timestamp' })
    .optional(),
})
