import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import type { AgentRef } from '../hot-state/agent-ref.ts'
import type { RunStop } from '../hot-state/types.ts'
import type { Nano } from '../money.ts'
import { toChDateTime } from './clickhouse.ts'
import { agentsFilter, agentsParams } from './events.ts'
import { select } from './query.ts'

const int = z.coerce.number().int()

/** A row of run_stops (sql/0023): a run its agent's run budget stopped, written once. */
export interface RunStopRow {
  user_id: string
  agent_id: string
  run_id: string
  at: string
  version: number
  spent_nano: Nano
  held_nano: Nano
  budget_nano: Nano
}

export function runStopRow(r: RunStop): RunStopRow {
  return { user_id: r.userId, agent_id: r.agentId, run_id: r.runId, at: toChDateTime(r.at), version: r.version, spent_nano: r.spentNano, held_nano: r.heldNano, budget_nano: r.budgetNano }
}

/**
 * When its run budget stopped each of these runs of a user that it did stop, epoch ms by
 * `agent_id\0run_id`.
 */
export async function runStopTimes(client: ClickHouseClient, userId: string, runIds: readonly string[]): Promise<Map<string, number>> {
  if (runIds.length === 0) return new Map()
  const rows = await select(
    client,
    `SELECT agent_id, run_id, toUnixTimestamp64Milli(min(at)) AS at_ms FROM run_stops
     WHERE user_id = {user:String} AND run_id IN {runs:Array(String)}
     GROUP BY agent_id, run_id`,
    { user: userId, runs: [...new Set(runIds)] },
    z.object({ agent_id: z.string(), run_id: z.string(), at_ms: int }),
  )
  return new Map(rows.map((r) => [`${r.agent_id}\0${r.run_id}`, r.at_ms]))
}

/** A run of an agent with a run budget, as the stored events say it: for a hot state that rebuilds or loads its runs. */
export interface StoredRun {
  user_id: string
  agent_id: string
  run_id: string
  cost_nano: Nano
  /** Its newest event's time, epoch ms. */
  last_ms: number
  ended: boolean
  stopped: boolean
}

const storedRun = z.object({ user_id: z.string(), agent_id: z.string(), run_id: z.string(), cost_nano: int, last_ms: int, ended: z.coerce.boolean(), stopped: z.coerce.boolean() })

/**
 * The runs of these agents with an event since `sinceMs` that a hot state keeps for their
 * run budget: those not ended, and those a stop holds (to answer their late events).
 */
export function keptRuns(client: ClickHouseClient, refs: readonly AgentRef[], sinceMs: number): Promise<StoredRun[]> {
  if (refs.length === 0) return Promise.resolve([])
  return select(
    client,
    `SELECT user_id, agent_id, run_id, cost_nano, last_ms, ended, (user_id, agent_id, run_id) IN (SELECT user_id, agent_id, run_id FROM run_stops WHERE 1 ${agentsFilter(refs)}) AS stopped
     FROM (
       SELECT user_id, agent_id, run_id, sum(cost_nano) AS cost_nano, toUnixTimestamp64Milli(max(last_at)) AS last_ms, max(end_at) IS NOT NULL AS ended
       FROM runs WHERE 1 ${agentsFilter(refs)}
       GROUP BY user_id, agent_id, run_id
       HAVING last_ms >= {since:Int64}
     )
     WHERE NOT ended OR stopped`,
    { ...agentsParams(refs), since: sinceMs },
    storedRun,
  )
}
