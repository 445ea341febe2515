/**
 * The price table: model name → prices → cost of one llm_call in integer nano-USD.
 * Pure apart from the clock: some catalogue prices depend on the date or the time of day.
 *
 * Order of precedence for a model name:
 *   1. PRICES_FILE `models[name]` (exact name),
 *   2. the bundled genai-prices catalogue (its own matching: dated variants, case),
 *   3. the default model's prices, for a name neither knows, flagged `fallback: true`.
 */
import type { Clock } from '../clock.ts'
import { systemClock } from '../clock.ts'
import type { Nano } from '../money.ts'
import { genaiPricesCatalogue } from './catalogue.ts'
import type { CatalogueResolver, Price } from './catalogue.ts'
import type { PricesFile } from './prices-file.ts'
import { priceQuantities, providerOfPrices, type Quantities, type UsageCost } from './usage.ts'

export { genaiPricesCatalogue } from './catalogue.ts'
export type { CatalogueMatch, CatalogueResolver, Price, TieredPrice } from './catalogue.ts'
export { loadPricesFile, parsePricesFile, pricesFileSchema } from './prices-file.ts'
export type { PricesFile, PricesFileModel } from './prices-file.ts'

/** The fallback default model when PRICES_FILE names none. */
export const DEFAULT_MODEL = 'gpt-4o'
/** Bound on memoised names, so a client sending random model names cannot grow memory. */
export const DEFAULT_CACHE_SIZE = 10_000

export interface ModelPrice {
  /** the name asked for */
  readonly model: string
  /** catalogue model id it matched, or the PRICES_FILE name; null when fallback */
  readonly matched: string | null
  /** true when priced with the default model's prices (the model was unknown) */
  readonly fallback: boolean
  /** where the prices came from (for a fallback: where the default model's came from) */
  readonly source: 'override' | 'catalogue'
  /** catalogue provider id; null for PRICES_FILE prices */
  readonly provider: string | null
  /** USD per 1M tokens. A catalogue model without a token price (free tiers) has 0. */
  readonly input: Price
  readonly output: Price
  /** null: cache-read tokens are charged at the input price */
  readonly cache_read: Price | null
  /** null: cache-write tokens are charged at the input price */
  readonly cache_write: Price | null
}

export interface TokenUsage {
  input_tokens: number
  output_tokens: number
  /** part of input_tokens; absent = 0 */
  cache_read_tokens?: number
  /** part of input_tokens; absent = 0 */
  cache_write_tokens?: number
}

export interface PriceTable {
  /** Memoised: the catalogue is searched once per distinct model name, never per event. */
  lookup(model: string): ModelPrice
  /** cost of one llm_call in integer nano-USD */
  cost(model: string, usage: TokenUsage): { costNano: Nano; fallback: boolean }
  /**
   * Cost of one llm_call reported as a provider's usage object, from the
   * quantities the price library extracted: priced by the library for `provider`'s `model`,
   * by PRICES_FILE prices where it names the model, by the default model's otherwise.
   */
  costOfUsage(model: string, provider: string, quantities: Quantities): UsageCost
  /**
   * What a provider's service tier does to a price: the PRICES_FILE multiplier, 1 for the
   * standard tiers (absent, default, standard, auto); `known: false` for any other tier the
   * file does not name (priced as standard, and shown as unpriced).
   */
  serviceTier(name: string | undefined): { multiplier: number; known: boolean }
  readonly defaultModel: string
}

export interface PriceTableOptions {
  overrides?: PricesFile | null
  /** for date- and time-of-day-dependent catalogue prices; tests pass a ManualClock */
  clock?: Clock
  /** the catalogue search; tests wrap the real one to count calls */
  catalogue?: CatalogueResolver
  /** max memoised model names (default 10 000) */
  cacheSize?: number
}

/** Pico-USD per token, and per tier. Integers, so costs are exact and order-independent. */
interface Rate {
  base: bigint
  tiers: ReadonlyArray<{ start: number; pico: bigint }>
}

interface Entry {
  price: ModelPrice
  input: Rate
  output: Rate
  cacheRead: Rate
  cacheWrite: Rate
  /** epoch ms at which the prices must be resolved again (Infinity: never) */
  validUntil: number
}

/** Prices as found, before they are attached to a name. */
type Resolved = Omit<ModelPrice, 'model' | 'matched' | 'fallback'> & { id: string; validUntil: number }

/**
 * USD per 1M tokens → pico-USD (1e-12) per token: usd_per_M * 1e6, rounded once here.
 * Precision below 1e-6 USD per 1M tokens is dropped (no real price list goes that fine).
 */
function toPico(usdPerMillion: number): bigint {
  return BigInt(Math.round(usdPerMillion * 1e6))
}

function compileRate(p: Price): Rate {
  if (typeof p === 'number') return { base: toPico(p), tiers: [] }
  const tiers = [...p.tiers].sort((a, b) => a.start - b.start).map((t) => ({ start: t.start, pico: toPico(t.price) }))
  return { base: toPico(p.base), tiers }
}

/**
 * genai-prices tier semantics: the whole request is priced at the highest tier whose
 * `start` the request's input_tokens exceed (strictly: its data sets xAI's ">= 200k" tier
 * at start 199999 for this reason), else at base. Every price key uses the same basis.
 */
function rateAt(r: Rate, inputTokens: number): bigint {
  let pico = r.base
  for (const t of r.tiers) if (inputTokens > t.start) pico = t.pico
  return pico
}

function checkTokens(field: string, v: number | undefined): number {
  if (v === undefined) return 0
  if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`${field} must be a non-negative integer, got ${v}`)
  return v
}

export function createPriceTable(opts: PriceTableOptions = {}): PriceTable {
  const clock = opts.clock ?? systemClock
  const catalogue = opts.catalogue ?? genaiPricesCatalogue
  const maxEntries = Math.max(1, opts.cacheSize ?? DEFAULT_CACHE_SIZE)
  const overrides = new Map(Object.entries(opts.overrides?.models ?? {}))
  const defaultModel = opts.overrides?.default_model ?? DEFAULT_MODEL
  const cache = new Map<string, Entry>()

  function resolve(name: string, now: number): Resolved | null {
    const o = overrides.get(name)
    if (o !== undefined) {
      return {
        id: name,
        source: 'override',
        provider: null,
        input: o.input,
        output: o.output,
        cache_read: o.cache_read ?? null,
        cache_write: o.cache_write ?? null,
        validUntil: Infinity,
      }
    }
    const m = catalogue(name, now)
    if (m === null) return null
    return {
      id: m.id,
      source: 'catalogue',
      provider: m.provider,
      input: m.input ?? 0,
      output: m.output ?? 0,
      cache_read: m.cache_read,
      cache_write: m.cache_write,
      validUntil: m.validUntil,
    }
  }

  function compile(model: string, r: Resolved, fallback: boolean, validUntil: number): Entry {
    const input = compileRate(r.input)
    return {
      price: {
        model,
        matched: fallback ? null : r.id,
        fallback,
        source: r.source,
        provider: r.provider,
        input: r.input,
        output: r.output,
        cache_read: r.cache_read,
        cache_write: r.cache_write,
      },
      input,
      output: compileRate(r.output),
      cacheRead: r.cache_read === null ? input : compileRate(r.cache_read),
      cacheWrite: r.cache_write === null ? input : compileRate(r.cache_write),
      validUntil,
    }
  }

  // The default model must be priceable now: an unknown model would otherwise have no price.
  const initialDefault = resolve(defaultModel, clock.now())
  if (initialDefault === null) {
    throw new Error(
      `default model "${defaultModel}" cannot be priced: it is neither in PRICES_FILE models nor in the genai-prices catalogue`,
    )
  }
  let defaultResolved: Resolved = initialDefault

  function currentDefault(now: number): Resolved {
    let d = defaultResolved
    if (now >= d.validUntil) {
      // The catalogue does not shrink at run time, so this stays non-null; keep the old one if it did.
      d = resolve(defaultModel, now) ?? { ...d, validUntil: Infinity }
      defaultResolved = d
    }
    return d
  }

  function entryFor(model: string): Entry {
    const now = clock.now()
    const hit = cache.get(model)
    if (hit !== undefined) {
      cache.delete(model) // LRU: re-inserting moves it to the newest end
      if (now < hit.validUntil) {
        cache.set(model, hit)
        return hit
      }
    }
    const own = resolve(model, now)
    let entry: Entry
    if (own !== null) {
      entry = compile(model, own, false, own.validUntil)
    } else {
      const d = currentDefault(now)
      entry = compile(model, d, true, d.validUntil)
    }
    if (cache.size >= maxEntries) {
      const oldest = cache.keys().next()
      if (oldest.done !== true) cache.delete(oldest.value)
    }
    cache.set(model, entry)
    return entry
  }

  // PRICES_FILE models as providers of their own, so the price library prices every
  // quantity of a usage object with the file's prices (built once per model).
  const fileProviders = new Map<string, ReturnType<typeof providerOfPrices>>()
  function filePrices(model: string, quantities: Quantities, now: number): { costNano: Nano; unpriced: readonly string[] } | null {
    const o = overrides.get(model)
    if (o === undefined) return null
    let provider = fileProviders.get(model)
    if (!provider) {
      const prices: Record<string, number> = { input_mtok: o.input, output_mtok: o.output, ...o.quantities }
      if (o.cache_read !== undefined) prices.cache_read_mtok = o.cache_read
      if (o.cache_write !== undefined) prices.cache_write_mtok = o.cache_write
      fileProviders.set(model, (provider = providerOfPrices(model, prices)))
    }
    return priceQuantities(provider.id, model, quantities, now, provider)
  }

  // The price library checks a model's price keys as a set (with input_audio_mtok and
  // cache_read_mtok, it wants cache_audio_read_mtok too): a file it refuses stops the start.
  for (const model of overrides.keys()) {
    try {
      filePrices(model, {}, clock.now())
    } catch (err) {
      throw new Error(`PRICES_FILE models[${JSON.stringify(model)}]: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
    }
  }

  const tiers = new Map(Object.entries(opts.overrides?.service_tiers ?? {}))
  const STANDARD_TIERS = new Set(['default', 'standard', 'auto'])

  const table: PriceTable = {
    defaultModel,
    lookup: (model) => entryFor(model).price,
    costOfUsage(model, provider, quantities) {
      const now = clock.now()
      const own = filePrices(model, quantities, now) ?? priceQuantities(provider, model, quantities, now)
      if (own !== null) return { ...own, fallback: false }
      const d = currentDefault(now)
      const byDefault = filePrices(defaultModel, quantities, now) ?? (d.provider === null ? null : priceQuantities(d.provider, d.id, quantities, now))
      // The default model is priceable (checked at start-up): one of the two answers.
      return { ...byDefault!, fallback: true }
    },
    serviceTier(name) {
      if (name === undefined || STANDARD_TIERS.has(name)) return { multiplier: tiers.get(name ?? 'standard') ?? 1, known: true }
      const multiplier = tiers.get(name)
      return multiplier === undefined ? { multiplier: 1, known: false } : { multiplier, known: true }
    },
    cost(model, usage) {
      const input = checkTokens('input_tokens', usage.input_tokens)
      const output = checkTokens('output_tokens', usage.output_tokens)
      const cacheRead = checkTokens('cache_read_tokens', usage.cache_read_tokens)
      const cacheWrite = checkTokens('cache_write_tokens', usage.cache_write_tokens)
      const e = entryFor(model)
      // Cache tokens are parts of input_tokens. If a client reports more cache tokens than
      // input tokens (e.g. it passed a provider's uncached-only count as input_tokens), every
      // reported cache token is still charged at its cache rate and the uncached remainder is
      // 0: the input total is taken as max(input_tokens, cache_read + cache_write). Charging
      // less than what the client said was processed would let agents overrun budgets.
      const totalInput = Math.max(input, cacheRead + cacheWrite)
      const uncached = totalInput - cacheRead - cacheWrite
      const pico =
        BigInt(uncached) * rateAt(e.input, totalInput) +
        BigInt(cacheRead) * rateAt(e.cacheRead, totalInput) +
        BigInt(cacheWrite) * rateAt(e.cacheWrite, totalInput) +
        BigInt(output) * rateAt(e.output, totalInput)
      // Round half up to whole nano-USD (1 nano = 1000 pico); pico is never negative.
      const nano = (pico + 500n) / 1000n
      if (nano > BigInt(Number.MAX_SAFE_INTEGER)) {
        throw new RangeError(`cost of one ${model} call exceeds ${Number.MAX_SAFE_INTEGER} nano-USD`)
      }
      return { costNano: Number(nano), fallback: e.price.fallback }
    },
  }
  return table
}
