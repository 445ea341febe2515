import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import type { AgentRef } from '../hot-state/agent-ref.ts'
import type { Transition, TransitionReason } from '../hot-state/types.ts'
import type { Nano } from '../money.ts'
import { chDateTimeToMs, toChDateTime } from './clickhouse.ts'
import { agentsFilter, agentsParams } from './events.ts'
import { select } from './query.ts'

/** A row of pause_transitions as burnrate writes it. */
export interface TransitionRow {
  user_id: string
  agent_id: string
  at: string
  /** Orders an agent's transitions: the newest version is its current state. */
  version: number
  is_paused: boolean
  reason: TransitionReason
  override: boolean
  total_nano: Nano
  actor: string
}

export function transitionRow(t: Transition): TransitionRow {
  return {
    user_id: t.userId,
    agent_id: t.agentId,
    at: toChDateTime(t.at),
    version: t.version,
    is_paused: t.paused,
    reason: t.reason,
    override: t.override,
    total_nano: t.totalNano,
    actor: t.actor,
  }
}

const latestRow = z
  .object({
    user_id: z.string(),
    agent_id: z.string(),
    is_paused: z.coerce.boolean(),
    reason: z.string(),
    override: z.coerce.boolean(),
    last_version: z.coerce.number().int(),
    last_at: z.string(),
  })
  .transform(({ last_at, last_version, ...r }) => ({ ...r, version: last_version, atMs: chDateTimeToMs(last_at) }))
export type LatestTransition = z.output<typeof latestRow>

/** The newest transition of every agent: its pause state as last decided. */
export function latestTransitions(client: ClickHouseClient, refs?: readonly AgentRef[]): Promise<LatestTransition[]> {
  return select(
    client,
    `SELECT user_id, agent_id,
            argMax(is_paused, version) AS is_paused,
            argMax(reason, version) AS reason,
            argMax(override, version) AS override,
            max(version) AS last_version,
            toString(max(at)) AS last_at
     FROM pause_transitions WHERE 1 ${agentsFilter(refs)} GROUP BY user_id, agent_id`,
    agentsParams(refs),
    latestRow,
  )
}

