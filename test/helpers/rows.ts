import { toChDateTime64us } from '../../src/storage/clickhouse.ts'
import type { EventRow } from '../../src/storage/rows.ts'

/** An llm_call row of the events table as burnrate writes it, received at `at` (epoch ms). */
export function eventRow(o: Partial<EventRow> & { event_id: string; at: number }): EventRow {
  const { at, ...rest } = o
  return {
    user_id: 'u',
    agent_id: 'a',
    timestamp: toChDateTime64us(at * 1000),
    event_type: 'llm_call',
    model: 'gpt-4o',
    input_tokens: 10,
    output_tokens: 5,
    cache_read_tokens: 0,
    cache_write_tokens: 0,
    tool_name: null,
    metadata: '',
    cost_nano: 100,
    price_fallback: false,
    ...rest,
  }
}
