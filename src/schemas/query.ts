import { z } from 'zod'
import { AUDIT_SCOPES } from '../storage/audit.ts'
import { agentId } from './event.ts'

/** An integer query parameter: digits only (no "1e3", no "12abc"), within bounds. */
function intValue(min: number, max: number) {
  return z
    .string()
    .regex(/^\d{1,9}$/, 'must be an integer')
    .transform(Number)
    .pipe(z.number().min(min, `must be between ${min} and ${max}`).max(max, `must be between ${min} and ${max}`))
}

export function intParam(min: number, max: number, fallback: number) {
  return intValue(min, max).default(fallback)
}

export const eventsQuery = z.strictObject({ limit: intParam(1, 1000, 50) })

export const AGENT_SORTS = ['cost', 'recent', 'agent_id'] as const
export type AgentSort = (typeof AGENT_SORTS)[number]

/**
 * A GET /agents page cursor (next_cursor), opaque to clients: base64url of JSON
 * [sort, the last row's sort value, its agent_id]. The next page starts after that row, so a
 * page is not shifted by agents that joined or moved meanwhile.
 */
export interface AgentCursor {
  sort: AgentSort
  value: number
  agentId: string
}

export function encodeAgentCursor(c: AgentCursor): string {
  return encodeCursor([c.sort, c.value, c.agentId])
}

const agentCursor = opaqueCursor(z.tuple([z.enum(AGENT_SORTS), z.number(), z.string()]), 'must be a next_cursor of GET /agents', 1024).transform(
  ([sort, value, agentId]): AgentCursor => ({ sort, value, agentId }),
)

/** A page cursor as the API hands it out, opaque to clients: base64url of the JSON of `position`. */
export function encodeCursor(position: unknown): string {
  return Buffer.from(JSON.stringify(position)).toString('base64url')
}

/**
 * A page cursor parameter: text of at most `maxLength` characters that decodes (encodeCursor)
 * to what `position` accepts, else `message`, the same whatever was wrong with it.
 */
export function opaqueCursor<T extends z.ZodType>(position: T, message: string, maxLength: number) {
  return z
    .string()
    .max(maxLength, message)
    .transform((s, ctx): z.output<T> => {
      let parsed: unknown
      try {
        parsed = JSON.parse(Buffer.from(s, 'base64url').toString('utf8'))
      } catch {
        parsed = undefined
      }
      const c = position.safeParse(parsed)
      if (!c.success) {
        ctx.addIssue({ code: 'custom', message })
        return z.NEVER
      }
      return c.data
    })
}

const flag = z.enum(['true', 'false'], { error: 'must be true or false' }).transform((v) => v === 'true').optional()

/**
 * GET /agents: without `limit`, every agent (as the SPEC has it); with it, a page and the
 * cursor of the next. Filters and the order apply either way.
 */
export const agentsQuery = z
  .strictObject({
    limit: intValue(1, 1000).optional(),
    cursor: agentCursor.optional(),
    sort: z.enum(AGENT_SORTS, { error: `must be one of ${AGENT_SORTS.join(', ')}` }).default('cost'),
    paused: flag,
    ignoring_pause: flag,
    alerted: flag,
    // The start of an agent id: an id's own bounds.
    prefix: agentId.optional(),
  })
  .superRefine((q, ctx) => {
    if (q.cursor === undefined) return
    if (q.limit === undefined) ctx.addIssue({ code: 'custom', path: ['cursor'], message: 'needs limit' })
    else if (q.cursor.sort !== q.sort) ctx.addIssue({ code: 'custom', path: ['cursor'], message: `belongs to sort=${q.cursor.sort}` })
  })
export type AgentsQuery = z.output<typeof agentsQuery>

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
