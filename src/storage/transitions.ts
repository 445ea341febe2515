import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import type { Transition } from '../hot-state/types.ts'
import { chDateTimeToMs, toChDateTime } from './clickhouse.ts'
import { insert, select } from './query.ts'

let seq = 0

export function insertTransitions(client: ClickHouseClient, transitions: readonly Transition[]): Promise<void> {
  return insert(
    client,
    'pause_transitions',
    transitions.map((t) => ({
      user_id: t.userId,
      agent_id: t.agentId,
      at: toChDateTime(t.at),
      // Orders transitions of the same millisecond: a process's own sequence suffices,
      // because one agent's transitions are decided by one writer at a time.
      seq: (seq = (seq + 1) % Number.MAX_SAFE_INTEGER),
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
export function latestTransitions(client: ClickHouseClient): Promise<LatestTransition[]> {
  return select(
    client,
    `SELECT user_id, agent_id,
            argMax(is_paused, (at, seq)) AS is_paused,
            argMax(reason, (at, seq)) AS reason,
            argMax(override, (at, seq)) AS override,
            toString(max(at)) AS last_at
     FROM pause_transitions GROUP BY user_id, agent_id`,
    {},
    latestRow,
  )
}

