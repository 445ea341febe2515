import type { PriceTable } from '../pricing/price-table.ts'
import { extractQuantities, type Quantities, type UsageCost } from '../pricing/usage.ts'
import { TOKEN_FIELDS, type EventBody } from '../schemas/event.ts'
import { toChDateTime64us } from '../storage/clickhouse.ts'
import type { EventRow } from '../storage/rows.ts'

/**
 * The events row of an accepted event, priced (only an llm_call costs anything), received at
 * `micros`. An llm_call carries the token fields, or the provider's usage object, whose
 * quantities the price library extracts and prices; either way the row keeps every quantity
 * next to the cost, and the four token columns. Throws a 400 problem for a usage object the
 * library cannot read: nothing is counted or stored then.
 */
export function eventRow(prices: PriceTable, userId: string, eventId: string, e: EventBody, micros: number): EventRow {
  let quantities: Quantities = {}
  let priced: UsageCost = { costNano: 0, fallback: false, unpriced: [] }
  if (e.event_type === 'llm_call' && e.usage !== undefined) {
    quantities = extractQuantities(e.provider!, e.api_flavor, e.model!, e.usage)
    priced = prices.costOfUsage(e.model!, e.provider!, quantities)
  } else if (e.event_type === 'llm_call') {
    for (const k of TOKEN_FIELDS) if (e[k]) quantities[k] = e[k]
    priced = { ...prices.cost(e.model!, { input_tokens: e.input_tokens ?? 0, output_tokens: e.output_tokens ?? 0, cache_read_tokens: e.cache_read_tokens, cache_write_tokens: e.cache_write_tokens }), unpriced: [] }
  }
  // The tier, as the event names it or (Anthropic) as its usage object does.
  const reported = e.service_tier ?? (typeof e.usage?.service_tier === 'string' ? e.usage.service_tier : undefined)
  if (e.event_type === 'llm_call') {
    const tier = prices.serviceTier(reported)
    priced.costNano = Math.round(priced.costNano * tier.multiplier)
    if (!tier.known) priced.unpriced = [...priced.unpriced, 'service_tier']
  }
  return {
    user_id: userId,
    agent_id: e.agent_id,
    timestamp: toChDateTime64us(micros),
    event_id: eventId,
    event_type: e.event_type,
    model: e.model ?? '',
    input_tokens: quantities.input_tokens ?? e.input_tokens ?? 0,
    output_tokens: quantities.output_tokens ?? e.output_tokens ?? 0,
    cache_read_tokens: quantities.cache_read_tokens ?? e.cache_read_tokens ?? 0,
    cache_write_tokens: quantities.cache_write_tokens ?? e.cache_write_tokens ?? 0,
    quantities,
    unpriced_quantities: priced.unpriced,
    service_tier: reported ?? '',
    tool_name: e.tool_name ?? null,
    // An agent_start without a run_id opens the run its own event_id names.
    run_id: e.run_id ?? (e.event_type === 'agent_start' ? eventId : ''),
    metadata: e.metadata ? JSON.stringify(e.metadata) : '',
    cost_nano: priced.costNano,
    price_fallback: priced.fallback,
  }
}
