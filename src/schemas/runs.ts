import { z } from 'zod'
import type { RunPosition } from '../storage/runs.ts'
import { runId } from './event.ts'
import { eventsQuery } from './query.ts'

/**
 * A GET /agents/{agent_id}/runs page cursor (next_cursor), opaque to clients: base64url of
 * JSON [the last run's start in epoch microseconds, its run_id]. The next page starts after
 * that run in the listing's order, so runs that start meanwhile do not shift it.
 */
export function encodeRunCursor(p: RunPosition): string {
  return Buffer.from(JSON.stringify([p.startedUs, p.runId])).toString('base64url')
}

const CURSOR_MESSAGE = 'must be a next_cursor of GET /agents/{agent_id}/runs'
const cursorJson = z.tuple([z.number().int().min(0).max(Number.MAX_SAFE_INTEGER), runId])

const runCursor = z
  .string()
  .max(1024, CURSOR_MESSAGE)
  .transform((s, ctx): RunPosition => {
    let parsed: unknown
    try {
      parsed = JSON.parse(Buffer.from(s, 'base64url').toString('utf8'))
    } catch {
      parsed = undefined
    }
    const c = cursorJson.safeParse(parsed)
    if (!c.success) {
      ctx.addIssue({ code: 'custom', message: CURSOR_MESSAGE })
      return z.NEVER
    }
    return { startedUs: c.data[0], runId: c.data[1] }
  })

/** GET /agents/{agent_id}/runs: a page of `limit` (1 to 1000, default 50), after `cursor`. */
export const runsQuery = z.strictObject({ limit: eventsQuery.shape.limit, cursor: runCursor.optional() })

export const runParams = z.strictObject({ run_id: runId })
