/**
 * The price library's calculation (@pydantic/genai-prices `calcPrice`) memoised per (price
 * entry, quantity set).
 *
 * The library's calculation costs 2 to 8 us an event, most of it checking the model's price
 * data (every price key's ancestors, every pair's join: quadratic in the keys) and splitting
 * the usage over every price key, each time. For one price entry and one set of reported
 * quantities, all of that comes out the same on every event: only the counts differ. So it is
 * learnt once, from the library, in two steps.
 *
 * The price keys a set can reach. A price key whose quantity a call does not report, and which
 * is no ancestor of one it does, adds a leaf of exactly 0 to the library's sums, and x + 0 is x
 * in floating point: the same calculation over only the keys a quantity set can reach gives the
 * same total, bit for bit. Those keys are the reported quantities' own, by the data's naming
 * (`<x>_tokens` is priced by `<x>_mtok`, a count `<x>` by `<x>_kcount`), and every ancestor or
 * join key the library then asks for.
 *
 * The library's arithmetic over those keys. Each reported quantity's leaf is its count less the
 * leaves of the quantities it contains (cache reads are part of input tokens), and each price
 * key adds price × leaf / per unit to the input, output or other part of the total, in the
 * entry's order; the parts are then added. What the arithmetic needs of the library's unit
 * registry is asked of the library itself, key by key, on price data of its own making: which
 * keys contain which (the ancestors its check names), the direction and the unit (a call that
 * reports only that key's tokens). Per event, the counts then go through the same float
 * operations in the same order without the library (0.3 against 2.5 us).
 *
 * A plan is kept only if it prices as the library does the event that found it and scaled
 * copies of it, which cross the entry's tiers; otherwise the set is priced by the library, over
 * the reachable keys or in full. Dated and time-of-day prices are always priced in full.
 */
import { calcPrice, type Provider } from '@pydantic/genai-prices'
import { Problem } from '../errors.ts'

/** Quantity name (the library's usage keys) → count. */
type Quantities = Record<string, number>

export interface PlannedPrice {
  /** The library's total_price, USD. */
  total: number
  /** Quantities the price data has no price for. */
  unpriced: readonly string[]
}

type Priced = NonNullable<ReturnType<typeof calcPrice>>

/**
 * A set's plan: the library's arithmetic, or else the library over the reachable keys (a
 * narrowed provider) or in full (null).
 */
interface LibraryPlan {
  /** The set: its quantities' names, as reported. */
  names: readonly string[]
  provider: Provider | null
  arithmetic: Arithmetic | null
  unpriced: readonly string[]
}

/** Quantity sets remembered per price entry (each a handful in practice; bounded for safety). */
const MAX_SETS_PER_ENTRY = 256
/** Larger counts are priced by the library (none is stored anyway: see MAX_COUNT in usage.ts). */
const MAX_PLANNED_COUNT = 1_000_000_000_000
/**
 * The sets an entry priced last, tried first by comparing names: no key is built for them
 * (joining the names cost more than the arithmetic).
 */
const MAX_RECENT = 4

// price entry → its sets by their names joined, and the ones it priced last.
const plans = new WeakMap<object, { sets: Map<string, LibraryPlan>; recent: LibraryPlan[] }>()

/**
 * The library's price of `quantities` at the one model of `provider` (narrowed to it), at `at`:
 * its total and the quantities it has no price for. Null when the library finds no such model.
 * Throws a 400 problem for counts the library refuses.
 */
export function pricePlanned(provider: Provider, model: string, quantities: Quantities, at: number): PlannedPrice | null {
  const entry = singleEntry(provider)
  // Dated and time-of-day prices (an array of entries) are priced in full: rare, and their
  // entry depends on the time.
  if (entry === null) {
    const full = calc(quantities, model, provider, new Date(at))
    return full && { total: full.total_price, unpriced: unpricedOf(quantities, full) }
  }
  let known = plans.get(entry)
  if (!known) plans.set(entry, (known = { sets: new Map(), recent: [] }))
  const plan = recentPlan(known.recent, quantities) ?? known.sets.get(Object.keys(quantities).join(','))
  if (plan !== undefined) {
    if (known.recent[0] !== plan) remember(known.recent, plan)
    const total = plan.arithmetic && evaluate(plan.arithmetic, quantities)
    if (total !== null) return { total, unpriced: plan.unpriced }
    const priced = calc(quantities, model, plan.provider ?? provider, new Date(at))
    return priced && { total: priced.total_price, unpriced: plan.unpriced }
  }
  const timestamp = new Date(at)
  const full = calc(quantities, model, provider, timestamp)
  // Learnt from a priced event only: a refusal says nothing of the next counts of the set.
  if (full === null) return full
  const unpriced = unpricedOf(quantities, full)
  if (known.sets.size < MAX_SETS_PER_ENTRY) {
    const learnt = learn(provider, entry, quantities, model, timestamp, full.total_price, unpriced)
    known.sets.set(learnt.names.join(','), learnt)
  }
  return { total: full.total_price, unpriced }
}

/** The plan among `recent` of the set `quantities` reports, its names in the same order. */
function recentPlan(recent: readonly LibraryPlan[], quantities: Quantities): LibraryPlan | undefined {
  search: for (const plan of recent) {
    let i = 0
    for (const name in quantities) if (plan.names[i++] !== name) continue search
    if (i === plan.names.length) return plan
  }
  return undefined
}

/** `plan` first among the recent plans (once), the oldest dropped past MAX_RECENT. */
function remember(recent: LibraryPlan[], plan: LibraryPlan): void {
  const at = recent.indexOf(plan)
  if (at >= 0) recent.splice(at, 1)
  recent.unshift(plan)
  if (recent.length > MAX_RECENT) recent.pop()
}

/**
 * A token quantity is a refinement of input or output tokens, priced at its own rate where the
 * data has one and at its parent's otherwise; a per-request quantity (web searches, …) has a
 * price of its own, or none.
 */
function unpricedOf(quantities: Quantities, priced: Priced): readonly string[] {
  return Object.freeze(Object.keys(quantities).filter((q) => !q.endsWith('_tokens') && priced.model_price[`${q}_kcount`] === undefined))
}

function calc(quantities: Quantities, model: string, provider: Provider, timestamp: Date): Priced | null {
  try {
    return calcPrice(quantities, model, { provider, timestamp })
  } catch (err) {
    // The library refuses counts it cannot price consistently (a part larger than its whole,
    // an overlap it needs split): the usage object is at fault, not the service.
    const message = err instanceof Error ? err.message : String(err)
    throw new Problem('invalid_body', `usage: ${message}`, { errors: [{ field: 'usage', message }] })
  }
}

/** The library's total, or 'refused'. */
function library(quantities: Quantities, model: string, provider: Provider, timestamp: Date): number | null | 'refused' {
  try {
    return calcPrice(quantities, model, { provider, timestamp })?.total_price ?? null
  } catch {
    return 'refused'
  }
}

/** The one price entry of a model whose prices do not change with the date or time of day. */
function singleEntry(provider: Provider): Record<string, unknown> | null {
  const only = provider.models.length === 1 ? provider.models[0]! : null
  return only && !Array.isArray(only.prices) ? (only.prices as Record<string, unknown>) : null
}

/** The plan of a set whose event the library priced at `total`. */
function learn(provider: Provider, entry: Record<string, unknown>, quantities: Quantities, model: string, timestamp: Date, total: number, unpriced: readonly string[]): LibraryPlan {
  const names = Object.keys(quantities)
  const pruned = prune(provider, entry, quantities, model, timestamp)
  if (pruned === null || library(quantities, model, pruned, timestamp) !== total) return { names, provider: null, arithmetic: null, unpriced }
  const arithmetic = learnArithmetic(pruned, quantities, model, timestamp)
  // Against the library's full calculation: the event itself, copies three and seven times
  // larger (a tier further), and half as large (rounded up: maybe refused, as the plan must
  // then refuse it too).
  const checks = [1, 3, 7, 0.5]
    .map((k) => Object.fromEntries(Object.entries(quantities).map(([q, n]) => [q, Math.ceil(n * k)])))
    .filter((q) => Object.values(q).every((n) => n <= MAX_PLANNED_COUNT))
  const agrees = arithmetic !== null && checks.every((q) => (evaluate(arithmetic, q) ?? 'refused') === library(q, model, provider, timestamp))
  return { names, provider: pruned, arithmetic: agrees ? arithmetic : null, unpriced }
}

const MISSING_KEY = /^Missing (?:ancestor|join) price key (\S+)/

/** The price key whose absence the library's check of a price entry refused it for, if that was the refusal. */
function missingKey(err: unknown): string | undefined {
  return MISSING_KEY.exec(err instanceof Error ? err.message : '')?.[1]
}

/** The provider narrowed to the price keys `quantities` reach, or null when none can be found. */
function prune(provider: Provider, entry: Record<string, unknown>, quantities: Quantities, model: string, timestamp: Date): Provider | null {
  const keys = new Set(Object.keys(quantities).map(priceKeyOf))
  const narrowed = () => withPrices(provider, Object.fromEntries(Object.entries(entry).filter(([k]) => keys.has(k))))
  // Each refusal names one missing ancestor or join: a handful of rounds at most.
  for (let round = 0; round <= Object.keys(entry).length; round++) {
    const candidate = narrowed()
    try {
      calcPrice(quantities, model, { provider: candidate, timestamp })
      return candidate
    } catch (err) {
      const missing = missingKey(err)
      if (missing === undefined || keys.has(missing) || !(missing in entry)) return missing === undefined ? candidate : null
      keys.add(missing)
    }
  }
  return null
}

/** The price key of a quantity, by the data's naming. */
function priceKeyOf(quantity: string): string {
  return quantity.endsWith('_tokens') ? `${quantity.slice(0, -'_tokens'.length)}_mtok` : `${quantity}_kcount`
}

/** The quantity a price key prices and per how many, by the data's naming; null for any other key. */
function unitOf(priceKey: string): { quantity: string; per: number } | null {
  if (priceKey.endsWith('_mtok')) return { quantity: `${priceKey.slice(0, -'_mtok'.length)}_tokens`, per: 1e6 }
  if (priceKey.endsWith('_kcount')) return { quantity: priceKey.slice(0, -'_kcount'.length), per: 1e3 }
  return null
}

// ---------------------------------------------------------------------------------------
// The library's arithmetic over one set's price keys

interface Tiered {
  base: number
  /** By start, ascending, as the library sorts them. */
  tiers: ReadonlyArray<{ start: number; price: number }>
}

interface Arithmetic {
  /** The reported quantities that have a price key, the most specific first: each leaf is its count less its descendants' leaves. */
  leaves: ReadonlyArray<{ quantity: string; descendants: readonly number[] }>
  /** The price keys in the entry's order, each with its leaf (-1: none reported, 0). */
  terms: ReadonlyArray<{ leaf: number; price: number | Tiered; per: number; direction: 'input' | 'output' | 'other' }>
  /** A tiered price is chosen by the input tokens. */
  tiered: boolean
  /** Every quantity the set reports. */
  quantities: readonly string[]
}

/**
 * The library's total for `quantities` by the plan's arithmetic, or null when a count is not
 * one it takes (not a whole count from 1 to MAX_PLANNED_COUNT) or the library would refuse the
 * counts (a part larger than its whole).
 */
function evaluate(a: Arithmetic, quantities: Quantities): number | null {
  for (const q of a.quantities) {
    const n = quantities[q]
    if (n === undefined || !Number.isSafeInteger(n) || n < 1 || n > MAX_PLANNED_COUNT) return null
  }
  const leaves: number[] = []
  for (const { quantity, descendants } of a.leaves) {
    let parts = 0
    for (const d of descendants) parts += leaves[d]!
    const leaf = quantities[quantity]! - parts
    if (leaf < 0) return null
    leaves.push(leaf)
  }
  const inputTokens = a.tiered ? quantities.input_tokens! : 0
  let input = 0
  let output = 0
  let other = 0
  for (const { leaf: at, price, per, direction } of a.terms) {
    const leaf = at < 0 ? 0 : leaves[at]!
    // The library's own operations, in its order (a tiered price per million, then per unit).
    const cost = typeof price === 'number' ? (price * leaf) / per : ((leaf <= 0 ? 0 : (tierPrice(price, inputTokens) * leaf) / 1e6) * 1e6) / per
    if (direction === 'input') input += cost
    else if (direction === 'output') output += cost
    else other += cost
  }
  return input + output + other
}

/** The price of the highest tier whose start the input tokens exceed, else the base. */
function tierPrice(p: Tiered, inputTokens: number): number {
  let price = p.base
  for (const t of p.tiers) if (inputTokens > t.start) price = t.price
  return price
}

/**
 * The arithmetic of `pruned`'s price keys for the set of `quantities`, learnt from the library,
 * or null when a key is not one it can learn (a per-request price, a name the data's naming
 * does not explain, a unit the library does not confirm).
 */
function learnArithmetic(pruned: Provider, quantities: Quantities, model: string, timestamp: Date): Arithmetic | null {
  const prices = pruned.models[0]!.prices as Record<string, number | Tiered | undefined>
  const reported = new Set(Object.keys(quantities))
  const keys = Object.entries(prices).filter((e): e is [string, number | Tiered] => e[1] !== undefined)
  const units = new Map<string, { quantity: string; per: number; ancestors: Set<string>; direction: 'input' | 'output' | 'other' }>()
  for (const [key] of keys) {
    const unit = unitOf(key)
    // The library prices `requests` once per call, whatever is reported.
    if (unit === null || unit.quantity === 'requests') return null
    const ancestors = ancestorsOf(key, pruned, model, timestamp)
    if (ancestors === null || [...ancestors].some((k) => prices[k] === undefined)) return null
    const direction = directionOf(key, ancestors, pruned, model, timestamp, unit.per)
    if (direction === null) return null
    units.set(key, { ...unit, ancestors, direction })
  }
  const tiered = keys.some(([, p]) => typeof p === 'object')
  if (tiered && !reported.has('input_tokens')) return null
  // Leaves of the reported quantities that have a price key; a descendant has more ancestors.
  const leafKeys = [...units.keys()].filter((k) => reported.has(units.get(k)!.quantity)).sort((a, b) => units.get(b)!.ancestors.size - units.get(a)!.ancestors.size)
  const leaves = leafKeys.map((k) => ({
    quantity: units.get(k)!.quantity,
    descendants: leafKeys.flatMap((d, i) => (units.get(d)!.ancestors.has(k) ? [i] : [])),
  }))
  const terms = keys.map(([key, price]) => {
    const { per, direction } = units.get(key)!
    const own = typeof price === 'number' ? price : { base: price.base, tiers: [...price.tiers].sort((a, b) => a.start - b.start) }
    return { leaf: leafKeys.indexOf(key), price: own, per, direction }
  })
  return { leaves, terms, tiered, quantities: [...reported] }
}

/** The price keys the library requires beside `key` (its check names them one at a time), or null. */
function ancestorsOf(key: string, pruned: Provider, model: string, timestamp: Date): Set<string> | null {
  const found = new Set<string>()
  for (let round = 0; round <= Object.keys(pruned.models[0]!.prices).length; round++) {
    const prices = Object.fromEntries([key, ...found].map((k) => [k, 0]))
    try {
      calcPrice({}, model, { provider: withPrices(pruned, prices), timestamp })
      return found
    } catch (err) {
      const missing = missingKey(err)
      if (missing === undefined || missing === key || found.has(missing)) return null
      found.add(missing)
    }
  }
  return null
}

/**
 * Which part of the total `key` adds to, from the library: priced at 1 with its ancestors at 0,
 * a call reporting a million of its quantity (and of its ancestors', whose leaves are then 0)
 * costs 1e6 / per in the input part, the output part or neither. Null when it does not.
 */
function directionOf(key: string, ancestors: Set<string>, pruned: Provider, model: string, timestamp: Date, per: number): 'input' | 'output' | 'other' | null {
  const prices = Object.fromEntries([[key, 1], ...[...ancestors].map((k) => [k, 0] as const)])
  const usage = Object.fromEntries([key, ...ancestors].map((k) => [unitOf(k)?.quantity ?? k, 1e6]))
  let r: Priced | null
  try {
    r = calcPrice(usage, model, { provider: withPrices(pruned, prices), timestamp })
  } catch {
    return null
  }
  if (r === null || r.total_price !== 1e6 / per) return null
  if (r.input_price === r.total_price && r.output_price === 0) return 'input'
  if (r.output_price === r.total_price && r.input_price === 0) return 'output'
  return r.input_price === 0 && r.output_price === 0 ? 'other' : null
}

/** The provider of one model with other prices (its price keys, as the library's data has them). */
function withPrices(provider: Provider, prices: Record<string, unknown>): Provider {
  return { ...provider, models: [{ ...provider.models[0]!, prices }] } as Provider
}
