import type { ClickHouseClient } from '@clickhouse/client'
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from '../clock.ts'
import type { HotState } from '../hot-state/types.ts'
import { chDateTimeToMs } from '../storage/clickhouse.ts'
import { eventKey, storedEvents } from '../storage/events.ts'
import type { Ingest } from './types.ts'

/**
 * Older than the longest an INSERT may take (the client's 30 s request timeout), so a claim
 * whose instance is merely slow is never taken for a dead one.
 */
export const STALE_CLAIM_MS = 120_000

/**
 * Finishes the work of instances that died between claiming events and counting them:
 * a claimed event that is stored in ClickHouse is counted (once: record dedups), one that
 * is not is forgotten. Without it, the hot state would miss such an event until its client
 * retried it or the agent was loaded again. Any instance may run it; running it on several
 * at once is safe. Returns how many claims it settled.
 */
export async function sweepStaleClaims(deps: {
  clickhouse: ClickHouseClient
  hotState: HotState
  ingest: Ingest
  clock: Clock
  limit?: number
}): Promise<number> {
  const now = deps.clock.now()
  const claims = await deps.hotState.staleClaims(now - STALE_CLAIM_MS, deps.limit ?? 500)
  if (claims.length === 0) return 0
  const rows = claims.map((c) => ({ user_id: c.userId, agent_id: c.agentId, event_id: c.eventId }))
  const stored = await storedEvents(deps.clickhouse, rows)
  const found = rows.flatMap((r) => {
    const row = stored.get(eventKey(r))
    return row ? [row] : []
  })
  const results = await deps.hotState.record(
    found.map((row) => ({
      userId: row.user_id,
      agentId: row.agent_id,
      eventId: row.event_id,
      costNano: row.cost_nano,
      llmCall: row.event_type === 'llm_call',
      at: chDateTimeToMs(row.timestamp),
    })),
    now,
  )
  const transitions = results.flatMap((r) => r.transitions)
  if (transitions.length > 0) await deps.ingest.persistTransitions(transitions)
  await Promise.all(claims.filter((c) => !stored.has(eventKey({ user_id: c.userId, agent_id: c.agentId, event_id: c.eventId }))).map((c) => deps.hotState.dropClaim(c)))
  return claims.length
}

/** Runs the sweep every `everyMs`, logging (not throwing) what fails; stop() ends it. */
export function startSweeper(deps: Parameters<typeof sweepStaleClaims>[0] & { log: FastifyBaseLogger; everyMs?: number }) {
  let running: Promise<unknown> = Promise.resolve()
  const timer = setInterval(() => {
    running = sweepStaleClaims(deps).then(
      (settled) => settled > 0 && deps.log.warn({ settled }, 'settled event claims left by an instance that stopped'),
      (err: unknown) => deps.log.warn({ err }, 'could not sweep stale event claims; will try again'),
    )
  }, deps.everyMs ?? 30_000)
  timer.unref()
  return {
    async stop() {
      clearInterval(timer)
      await running
    },
  }
}
