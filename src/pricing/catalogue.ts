/**
 * The bundled price catalogue (@pydantic/genai-prices), reduced to what burnrate needs:
 * which catalogue model a name matches, its per-1M-token prices, and until when those
 * prices hold. Searching the catalogue costs ~0.1–2 ms, so the price table calls this once
 * per distinct model name (and again only when `validUntil` passes), never per event.
 */
import { calcPrice } from '@pydantic/genai-prices'
import type { ModelInfo } from '@pydantic/genai-prices'

/** genai-prices TieredPrices: `base` below every tier; a tier's price once input_tokens > start. */
export interface TieredPrice {
  base: number
  tiers: ReadonlyArray<{ start: number; price: number }>
}

/** USD per 1M tokens, flat or tiered. */
export type Price = number | TieredPrice

export interface CatalogueMatch {
  /** catalogue model id, e.g. "gpt-4o" for "gpt-4o-2024-08-06" */
  id: string
  provider: string
  input: Price | null
  output: Price | null
  cache_read: Price | null
  cache_write: Price | null
  /**
   * Epoch ms at which these prices stop being the active ones (the catalogue has
   * date-dependent and time-of-day prices, e.g. DeepSeek off-peak); Infinity when never.
   */
  validUntil: number
}

/** Resolves a model name at an instant; null when the catalogue has no such model. */
export type CatalogueResolver = (model: string, atMs: number) => CatalogueMatch | null

const DAY_MS = 86_400_000

/** Same grammar as genai-prices' time-of-day constraints ("00:30:00Z", "08:00:00+08:00"); ms after UTC midnight. */
function timeOfDayMs(s: string): number | null {
  const m = /^(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|([+-])(\d{2}):(\d{2}))$/.exec(s)
  if (!m) return null
  const [, hh, mm, ss, frac = '', zone, sign, oh = '00', om = '00'] = m
  const local = ((Number(hh) * 60 + Number(mm)) * 60 + Number(ss) + Number(`0.${frac}`)) * 1000
  const offset = zone === 'Z' ? 0 : (sign === '+' ? 1 : -1) * (Number(oh) * 60 + Number(om)) * 60_000
  return (((local - offset) % DAY_MS) + DAY_MS) % DAY_MS
}

/**
 * The next instant after `atMs` at which the model's active price set may change. Any
 * constraint boundary is a candidate; re-resolving at a boundary that turns out not to
 * change anything costs one catalogue search, which is cheap at that frequency.
 */
export function nextPriceChange(model: ModelInfo, atMs: number): number {
  if (!Array.isArray(model.prices)) return Infinity
  let next = Infinity
  const midnight = atMs - (((atMs % DAY_MS) + DAY_MS) % DAY_MS)
  for (const { constraint } of model.prices) {
    if (constraint === undefined) continue
    if (constraint.type === 'start_date') {
      // genai-prices compares against `new Date(start_date)`: a date-only string is UTC midnight.
      const t = new Date(constraint.start_date).getTime()
      if (t > atMs && t < next) next = t
    } else {
      for (const bound of [constraint.start_time, constraint.end_time]) {
        const ms = timeOfDayMs(bound)
        // Unparseable: re-check in a minute rather than cache a possibly wrong price forever.
        const t = ms === null ? atMs + 60_000 : midnight + ms > atMs ? midnight + ms : midnight + DAY_MS + ms
        if (t < next) next = t
      }
    }
  }
  return next
}

function isPrice(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0
}

/** Copies a catalogue price into a plain value; null when absent, throws when malformed. */
function toPrice(v: unknown): Price | null {
  if (v === undefined) return null
  if (isPrice(v)) return v
  const { base, tiers } = (typeof v === 'object' && v !== null ? v : {}) as { base?: unknown; tiers?: unknown }
  if (!isPrice(base) || !Array.isArray(tiers)) throw new Error('malformed catalogue price')
  const out: Array<{ start: number; price: number }> = []
  for (const t of tiers as Array<{ start?: unknown; price?: unknown }>) {
    if (!isPrice(t.start) || !isPrice(t.price)) throw new Error('malformed catalogue price')
    out.push({ start: t.start, price: t.price })
  }
  out.sort((a, b) => a.start - b.start)
  return { base, tiers: out }
}

/** The default resolver: genai-prices' own model matching (dated variants, case, aliases). */
export const genaiPricesCatalogue: CatalogueResolver = (model, atMs) => {
  try {
    const result = calcPrice({ input_tokens: 1, output_tokens: 1 }, model, { timestamp: new Date(atMs) })
    if (!result) return null
    const p = result.model_price
    return {
      id: result.model.id,
      provider: result.provider.id,
      input: toPrice(p.input_mtok),
      output: toPrice(p.output_mtok),
      cache_read: toPrice(p.cache_read_mtok),
      cache_write: toPrice(p.cache_write_mtok),
      validUntil: nextPriceChange(result.model, atMs),
    }
  } catch {
    // An entry the catalogue cannot price for token usage is, for burnrate, an unknown
    // model: it falls back to the default model's prices and is flagged as such.
    return null
  }
}
