import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import type { AgentRef, Transition } from '../hot-state/types.ts'
import { chDateTimeToMs, toChDateTime } from './clickhouse.ts'
import { agentFilter } from './events.ts'
import { insert, select } from './query.ts'
import { nextVersion } from './version.ts'

export function insertTransitions(client: ClickHouseClient, transitions: readonly Transition[]): Promise<void> {
  return insert(
    client,
    'pause_transitions',
    transitions.map((t) => ({
      user_id: t.userId,
      agent_id: t.agentId,
      at: toChDateTime(t.at),
      version: nextVersion(t.at),
      is_paused: t.paused,
      reason: t.reason,
      override: t.override,
      total_nano: t.totalNano,
    })),
  )
}

const latestRow = z
  .object({ user_id: z.string(), agent_id: z.string(), is_paused: z.coerce.boolean(), reason: z.string(), override: z.coerce.boolean(), last_at: z.string() })
  .transform(({ last_at, ...r }) => ({ ...r, atMs: chDateTimeToMs(last_at) }))
export type LatestTransition = z.output<typeof latestRow>

/** The newest transition of every agent: its pause state as last decided. */
export function latestTransitions(client: ClickHouseClient, ref?: AgentRef): Promise<LatestTransition[]> {
  return select(
    client,
    `SELECT user_id, agent_id,
            argMax(is_paused, version) AS is_paused,
            argMax(reason, version) AS reason,
            argMax(override, version) AS override,
            toString(max(at)) AS last_at
     FROM pause_transitions WHERE 1 ${agentFilter(ref)} GROUP BY user_id, agent_id`,
    { user: ref?.userId, agent: ref?.agentId },
    latestRow,
  )
}

