import { z } from 'zod'
import type { RunPosition } from '../storage/runs.ts'
import { runId } from './event.ts'
import { encodeCursor, eventsQuery, opaqueCursor } from './query.ts'

/**
 * A GET /agents/{agent_id}/runs page cursor (next_cursor), opaque to clients: base64url of
 * JSON [the last run's start in epoch microseconds, its run_id]. The next page starts after
 * that run in the listing's order, so runs that start meanwhile do not shift it.
 */
export function encodeRunCursor(p: RunPosition): string {
  return encodeCursor([p.startedUs, p.runId])
}

const CURSOR_MESSAGE = 'must be a next_cursor of GET /agents/{agent_id}/runs'
const cursorJson = z.tuple([z.number().int().min(0).max(Number.MAX_SAFE_INTEGER), runId])

const runCursor = opaqueCursor(cursorJson, CURSOR_MESSAGE, 1024).transform(([startedUs, runId]): RunPosition => ({ startedUs, runId }))

/** GET /agents/{agent_id}/runs: a page of `limit` (1 to 1000, default 50), after `cursor`. */
export const runsQuery = z.strictObject({ limit: eventsQuery.shape.limit, cursor: runCursor.optional() })

export const runParams = z.strictObject({ run_id: runId })
