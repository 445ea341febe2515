import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import type { AgentRef } from '../hot-state/agent-ref.ts'
import type { Ignored, IgnoredPause } from '../hot-state/types.ts'
import type { Nano } from '../money.ts'
import { toChDateTime } from './clickhouse.ts'
import { agentsFilter, agentsParams } from './events.ts'
import { select } from './query.ts'

/** A row of ignored_pauses (sql/0015): the flag raised for an agent that went on calling the model after its pause. */
export interface IgnoredRow {
  user_id: string
  agent_id: string
  at: string
  version: number
  /** When the pause it ignored began (epoch ms: the hot state's PauseState.since). */
  paused_at_ms: number
  calls: number
  cost_nano: Nano
}

export function ignoredRow(i: IgnoredPause): IgnoredRow {
  return { user_id: i.userId, agent_id: i.agentId, at: toChDateTime(i.at), version: i.version, paused_at_ms: i.pausedSince, calls: i.calls, cost_nano: i.costNano }
}

/** A record as the hot state keeps it: the counts as of the flag, against the pause it names. */
export function ignoredOf(r: Pick<IgnoredRow, 'paused_at_ms' | 'calls' | 'cost_nano'>): Ignored {
  return { since: r.paused_at_ms, calls: r.calls, nano: r.cost_nano, flagged: true }
}

const int = z.coerce.number().int()
const latestRow = z
  .object({ user_id: z.string(), agent_id: z.string(), paused_at_ms: int, calls: int, cost_nano: int, last_version: int })
  .transform((r) => ({ user_id: r.user_id, agent_id: r.agent_id, version: r.last_version, ignored: ignoredOf(r) }))

/** Each agent's newest ignoring-pause record, as the hot state keeps it. */
export function latestIgnored(client: ClickHouseClient, refs?: readonly AgentRef[]): Promise<Array<{ user_id: string; agent_id: string; version: number; ignored: Ignored }>> {
  return select(
    client,
    `SELECT user_id, agent_id, argMax(paused_at_ms, version) AS paused_at_ms, argMax(calls, version) AS calls, argMax(cost_nano, version) AS cost_nano,
            max(version) AS last_version
     FROM ignored_pauses WHERE 1 ${agentsFilter(refs)} GROUP BY user_id, agent_id`,
    agentsParams(refs),
    latestRow,
  )
}
