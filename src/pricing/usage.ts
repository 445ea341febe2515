/**
 * A provider's usage object as its SDK returns it: the quantities in it are read
 * by the price library's own extractors (@pydantic/genai-prices `extractUsage`), never by a
 * mapping kept here, and priced by the library's own calculation (`calcPrice`), which knows
 * every quantity its data prices: text, audio, image and video tokens, cache reads and
 * writes by duration, reasoning, web searches and other per-request charges.
 */
import { calcPrice, findProvider, type Provider, type UsageExtractor } from '@pydantic/genai-prices'
import { LRUCache } from 'lru-cache'
import { Problem } from '../errors.ts'
import type { Nano } from '../money.ts'
import { readUsage, type Counts } from './usage-reader.ts'

/** Quantity name (the library's usage keys: input_tokens, cache_write_1h_tokens, web_searches, …) → count. */
export type Quantities = Record<string, number>

/** A count no real call reaches; larger is refused rather than priced. */
const MAX_COUNT = 1_000_000_000_000

const providers = new Map<string, Provider | null>()

function providerOf(id: string): Provider | null {
  let p = providers.get(id)
  if (p === undefined) {
    p = findProvider({ providerId: id }) ?? null
    providers.set(id, p)
  }
  return p
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
  for (const [name, count] of Object.entries(counts)) {
    if (count === undefined) continue
    if (!Number.isSafeInteger(count) || count < 0 || count > MAX_COUNT) throw invalid('usage', `${name} must be a whole number of at least 0, got ${count}`)
    if (count > 0) into[name] = (into[name] ?? 0) + count
  }
}

// provider\0model → the provider narrowed to the model's own entry (all its dated and
// time-of-day prices kept), or null when the provider has no such model: the library then
// matches one model, not a provider's hundred, on every event (14 -> 10 us a call, bench/).
const modelProviders = new LRUCache<string, { provider: Provider } | { provider: null }>({ max: 10_000 })

function modelProvider(providerId: string, model: string): Provider | null {
  const key = `${providerId}\0${model}`
  const hit = modelProviders.get(key)
  if (hit) return hit.provider
  const full = providerOf(providerId)
  const found = full && calcPrice({}, model, { provider: full })
  const narrowed = full && found ? { ...full, models: [found.model] } : null
  modelProviders.set(key, { provider: narrowed })
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
  unpriced: string[]
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
): { costNano: Nano; unpriced: string[] } | null {
  const own = provider ?? modelProvider(providerId, model)
  if (own === null) return null
  const timestamp = new Date(at)
  const r = pricePlanned(own, model, quantities, timestamp)
  if (r === null) return null
  // A token quantity is a refinement of input or output tokens, priced at its own rate where
  // the data has one and at its parent's otherwise; a per-request quantity (web searches, …)
  // has a price of its own, or none.
  const unpriced = Object.keys(quantities).filter((q) => !q.endsWith('_tokens') && r.model_price[`${q}_kcount`] === undefined)
  return { costNano: Math.round(r.total_price * 1e9), unpriced }
}

type Priced = NonNullable<ReturnType<typeof calcPrice>>

function calc(quantities: Quantities, model: string, provider: Provider, timestamp: Date): Priced | null {
  try {
    return calcPrice(quantities, model, { provider, timestamp })
  } catch (err) {
    // The library refuses counts it cannot price consistently (a part larger than its whole,
    // an overlap it needs split): the usage object is at fault, not the service.
    throw invalid('usage', err instanceof Error ? err.message : String(err))
  }
}

// ---------------------------------------------------------------------------------------
// Memoised per (model, quantity set): the price keys a call can reach.
//
// The library's calculation costs 5-8 us an event, most of it checking the model's price
// data (every price key's ancestors, every pair's join: quadratic in the keys) and splitting
// the usage over every price key, when a call reports two or three of a model's five to
// fifteen priced quantities. A price key whose quantity a call does not report, and which is
// no ancestor of one it does, adds a leaf of exactly 0 to the library's sums, and x + 0 is x
// in floating point: the same calculation over only the keys a quantity set can reach gives
// the same total, bit for bit (1.6 against 5.1 us for gpt-4o's input and output tokens).
//
// Which keys those are is found once per (price entry, quantity set) from the library: the
// keys of the reported quantities, by the data's naming (`<x>_tokens` is priced by `<x>_mtok`,
// a count `<x>` by `<x>_kcount`), and every ancestor or join key the library then asks for.
// The plan is kept only if the library's full calculation and the plan's give the same total
// for the event that found it, which the library priced: a set whose plan disagrees (a
// per-request price such as requests_kcount) is priced in full for good.

/** Quantity sets remembered per price entry (each a handful in practice; bounded for safety). */
const MAX_SETS_PER_ENTRY = 256
// price entry → quantity set → the model's provider with only the reachable price keys, or
// null: price in full.
const plans = new WeakMap<object, Map<string, Provider | null>>()

function pricePlanned(provider: Provider, model: string, quantities: Quantities, timestamp: Date): Priced | null {
  const entry = singleEntry(provider)
  // Dated and time-of-day prices (an array of entries) are priced in full: rare, and their
  // entry depends on the time.
  if (entry === null) return calc(quantities, model, provider, timestamp)
  let sets = plans.get(entry)
  if (!sets) plans.set(entry, (sets = new Map()))
  const set = Object.keys(quantities).sort().join(',')
  const plan = sets.get(set)
  if (plan !== undefined) return calc(quantities, model, plan ?? provider, timestamp)
  const full = calc(quantities, model, provider, timestamp)
  // Learnt from a priced event only: a refusal says nothing of the next counts of the set.
  if (full === null) return full
  const pruned = prune(provider, entry, quantities, model, timestamp)
  const agrees = pruned !== null && calcOrNull(quantities, model, pruned, timestamp)?.total_price === full.total_price
  if (sets.size < MAX_SETS_PER_ENTRY) sets.set(set, agrees ? pruned : null)
  return full
}

function calcOrNull(quantities: Quantities, model: string, provider: Provider, timestamp: Date): Priced | null {
  try {
    return calcPrice(quantities, model, { provider, timestamp })
  } catch {
    return null
  }
}

/** The one price entry of a model whose prices do not change with the date or time of day. */
function singleEntry(provider: Provider): Record<string, unknown> | null {
  const only = provider.models.length === 1 ? provider.models[0]! : null
  return only && !Array.isArray(only.prices) ? (only.prices as Record<string, unknown>) : null
}

const MISSING_KEY = /^Missing (?:ancestor|join) price key (\S+)/

/** The provider narrowed to the price keys `quantities` reach, or null when none can be found. */
function prune(provider: Provider, entry: Record<string, unknown>, quantities: Quantities, model: string, timestamp: Date): Provider | null {
  const keys = new Set(Object.keys(quantities).map((q) => (q.endsWith('_tokens') ? `${q.slice(0, -'_tokens'.length)}_mtok` : `${q}_kcount`)))
  const narrowed = () => {
    const prices = Object.fromEntries(Object.entries(entry).filter(([k]) => keys.has(k)))
    return { ...provider, models: [{ ...provider.models[0]!, prices }] } as Provider
  }
  // Each refusal names one missing ancestor or join: a handful of rounds at most.
  for (let round = 0; round <= Object.keys(entry).length; round++) {
    const candidate = narrowed()
    try {
      calcPrice(quantities, model, { provider: candidate, timestamp })
      return candidate
    } catch (err) {
      const missing = MISSING_KEY.exec(err instanceof Error ? err.message : '')?.[1]
      if (missing === undefined || keys.has(missing) || !(missing in entry)) return missing === undefined ? candidate : null
      keys.add(missing)
    }
  }
  return null
}
