/**
 * A provider's usage object as its SDK returns it: the quantities in it are read
 * by the price library's own extractors (@pydantic/genai-prices `extractUsage`), never by a
 * mapping kept here, and priced by the library's own calculation (`calcPrice`), which knows
 * every quantity its data prices: text, audio, image and video tokens, cache reads and
 * writes by duration, reasoning, web searches and other per-request charges. Both are
 * memoised from the library and checked against it: the reading per shape of usage object
 * (usage-reader.ts), the calculation per quantity set of a price entry (price-plan.ts).
 */
import { calcPrice, findProvider, type Provider, type UsageExtractor } from '@pydantic/genai-prices'
import { LRUCache } from 'lru-cache'
import { Problem } from '../errors.ts'
import type { Nano } from '../money.ts'
import { pricePlanned } from './price-plan.ts'
import { readUsage, type Counts } from './usage-reader.ts'

/** Quantity name (the library's usage keys: input_tokens, cache_write_1h_tokens, web_searches, …) → count. */
export type Quantities = Record<string, number>

/** A count no real call reaches; larger is refused rather than priced. */
const MAX_COUNT = 1_000_000_000_000

// provider id as sent → the library's provider, or null (bounded: any string may be sent).
const providers = new LRUCache<string, { provider: Provider | null }>({ max: 1_000 })

function providerOf(id: string): Provider | null {
  let hit = providers.get(id)
  if (hit === undefined) providers.set(id, (hit = { provider: findProvider({ providerId: id }) ?? null }))
  return hit.provider
}

function invalid(field: string, message: string): Problem {
  return new Problem('invalid_body', `${field}: ${message}`, { errors: [{ field, message }] })
}

/**
 * The quantities of `usage`, for `model` at `provider` (its API flavor: `chat` or
 * `responses` for OpenAI, …; the provider's first when omitted). Throws a 400 naming the
 * field for an unknown provider or flavor, a usage object the extractor cannot read, or a
 * count that is not a non-negative integer.
 */
export function extractQuantities(providerId: string, apiFlavor: string | undefined, model: string, usage: Record<string, unknown>): Quantities {
  const provider = providerOf(providerId)
  if (!provider) throw invalid('provider', `unknown provider ${JSON.stringify(providerId)} (the price library's provider ids: openai, anthropic, google, …)`)
  const extractors = provider.extractors ?? []
  const extractor = apiFlavor === undefined ? extractors[0] : extractors.find((e) => e.api_flavor === apiFlavor)
  if (!extractor) {
    const known = extractors.map((e) => e.api_flavor).join(', ')
    throw invalid(apiFlavor === undefined ? 'provider' : 'api_flavor', known ? `${providerId} knows the API flavors ${known}` : `no usage extractor for ${providerId}: send the flat token fields`)
  }
  const quantities: Quantities = {}
  add(quantities, read(provider, extractor, model, usage, 'usage'))
  // Anthropic's compaction (beta) reports the work of each compaction as an entry of
  // usage.iterations, shaped as a usage object and NOT included in the top-level counts
  // (@anthropic-ai/sdk BetaUsage.iterations): each is read by the same extractor and added.
  const iterations = (usage as { iterations?: unknown }).iterations
  if (Array.isArray(iterations)) {
    iterations.forEach((entry: unknown, i) => {
      if (typeof entry !== 'object' || entry === null || (entry as { type?: unknown }).type !== 'compaction') return
      add(quantities, read(provider, extractor, model, entry as Record<string, unknown>, `usage.iterations.${i}`))
    })
  }
  return quantities
}

function read(provider: Provider, extractor: UsageExtractor, model: string, usage: Record<string, unknown>, field: string): Counts {
  try {
    return readUsage(provider, extractor, model, usage)
  } catch (err) {
    throw invalid(field, `not a ${provider.id} ${extractor.api_flavor} usage object: ${err instanceof Error ? err.message.replace('usage.', '') : String(err)}`)
  }
}

function add(into: Quantities, counts: Counts): void {
  for (const name in counts) {
    const count = counts[name]
    if (count === undefined) continue
    if (!Number.isSafeInteger(count) || count < 0 || count > MAX_COUNT) throw invalid('usage', `${name} must be a whole number of at least 0, got ${count}`)
    if (count > 0) into[name] = (into[name] ?? 0) + count
  }
}

// provider → model → the provider narrowed to the model's own entry (all its dated and
// time-of-day prices kept), or null when the provider has no such model: the library then
// matches one model, not a provider's hundred, on every event (14 -> 10 us a call, bench/).
// Per provider, so that the key is the model name as sent, not a string built per event.
const modelProviders = new WeakMap<Provider, LRUCache<string, { provider: Provider | null }>>()

function modelProvider(providerId: string, model: string): Provider | null {
  const full = providerOf(providerId)
  if (full === null) return null
  let models = modelProviders.get(full)
  if (!models) modelProviders.set(full, (models = new LRUCache({ max: 10_000 })))
  const hit = models.get(model)
  if (hit) return hit.provider
  const found = calcPrice({}, model, { provider: full })
  const narrowed = found ? { ...full, models: [found.model] } : null
  models.set(model, { provider: narrowed })
  return narrowed
}

/**
 * A provider of one model with the given prices (the price library's price keys), so that
 * PRICES_FILE prices are applied by the library's own calculation, every quantity alike.
 */
export function providerOfPrices(model: string, prices: Record<string, number>): Provider {
  return { id: 'prices-file', name: 'PRICES_FILE', api_pattern: '', models: [{ id: model, match: { equals: model }, prices }] }
}

export interface UsageCost {
  costNano: Nano
  /** Priced with the default model's prices: the provider's data has no such model. */
  fallback: boolean
  /** Quantities the price data has no price for (counted, shown, never silently free). */
  unpriced: readonly string[]
}

/**
 * The cost of `quantities` at `model`'s prices in the library's data, at `at`: its own
 * calculation, rounded once to whole nano-USD (a total is then the exact sum of its events).
 * Null when the provider's data has no such model.
 */
export function priceQuantities(
  providerId: string,
  model: string,
  quantities: Quantities,
  at: number,
  provider?: Provider,
): { costNano: Nano; unpriced: readonly string[] } | null {
  const own = provider ?? modelProvider(providerId, model)
  if (own === null) return null
  const r = pricePlanned(own, model, quantities, at)
  return r && { costNano: Math.round(r.total * 1e9), unpriced: r.unpriced }
}
