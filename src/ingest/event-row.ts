import type { PriceTable } from '../pricing/price-table.ts'
import type { EventBody } from '../schemas/event.ts'
import { toChDateTime64us } from '../storage/clickhouse.ts'
import type { EventRow } from '../storage/events.ts'

/** The events row of an accepted event, priced (SPEC.md 4.1 cost rules), received at `micros`. */
export function eventRow(prices: PriceTable, userId: string, eventId: string, e: EventBody, micros: number): EventRow {
  const priced =
    e.event_type === 'llm_call'
      ? prices.cost(e.model!, {
          input_tokens: e.input_tokens,
          output_tokens: e.output_tokens,
          cache_read_tokens: e.cache_read_tokens,
          cache_write_tokens: e.cache_write_tokens,
        })
      : { costNano: 0, fallback: false }
  return {
    user_id: userId,
    agent_id: e.agent_id,
    timestamp: toChDateTime64us(micros),
    event_id: eventId,
    event_type: e.event_type,
    model: e.model ?? '',
    input_tokens: e.input_tokens,
    output_tokens: e.output_tokens,
    cache_read_tokens: e.cache_read_tokens,
    cache_write_tokens: e.cache_write_tokens,
    tool_name: e.tool_name ?? null,
    metadata: e.metadata ? JSON.stringify(e.metadata) : '',
    cost_nano: priced.costNano,
    price_fallback: priced.fallback,
  }
}
