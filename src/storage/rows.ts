import type { Nano } from '../money.ts'

/** A row of the events table as burnrate writes it. */
export interface EventRow {
  user_id: string
  agent_id: string
  timestamp: string
  event_id: string
  event_type: 'llm_call' | 'tool_call' | 'agent_start' | 'agent_end'
  model: string
  input_tokens: number
  output_tokens: number
  cache_read_tokens: number
  cache_write_tokens: number
  /** Every billed quantity by the price library's names; absent in rows written before sql/0009. */
  quantities?: Record<string, number>
  /** Quantities the price data had no price for ('service_tier' for a tier PRICES_FILE does not price). */
  unpriced_quantities?: readonly string[]
  /** The provider's service tier, '' when none was reported. */
  service_tier?: string
  tool_name: string | null
  /** The run the event belongs to, '' for none; absent in rows written before sql/0018. */
  run_id?: string
  metadata: string
  cost_nano: Nano
  price_fallback: boolean
}
