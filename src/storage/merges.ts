import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { select } from './query.ts'

/**
 * What ClickHouse's background merges have cost and left, for the metrics: the merges and
 * their time since its process started (system.events: chDB's process when embedded, the
 * server's otherwise, every database alike), and the active parts of each of burnrate's
 * tables (a table whose parts pile up is one whose merges fall behind its inserts).
 */
export interface MergeStats {
  merges: number
  mergeMs: number
  parts: ReadonlyArray<{ table: string; parts: number }>
}

const counters = z.object({ merges: z.coerce.number(), merge_ms: z.coerce.number() })
const tableParts = z.object({ table: z.string(), parts: z.coerce.number() })

export async function mergeStats(client: ClickHouseClient): Promise<MergeStats> {
  const [events, parts] = await Promise.all([
    select(
      client,
      `SELECT sumIf(value, event = 'Merge') AS merges, sumIf(value, event = 'MergeTotalMilliseconds') AS merge_ms FROM system.events`,
      {},
      counters,
    ),
    select(client, `SELECT table, count() AS parts FROM system.parts WHERE database = currentDatabase() AND active GROUP BY table ORDER BY table`, {}, tableParts),
  ])
  return { merges: events[0]?.merges ?? 0, mergeMs: events[0]?.merge_ms ?? 0, parts }
}
