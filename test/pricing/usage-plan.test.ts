import { calcPrice, findProvider } from '@pydantic/genai-prices'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { pricePlanned } from '../../src/pricing/price-plan.ts'
import { priceQuantities, type Quantities } from '../../src/pricing/usage.ts'

/**
 * Pricing is memoised per (model, quantity set): the model's price data narrowed to the keys
 * a quantity set reaches, and the library's arithmetic over them learnt from the library
 * (src/pricing/price-plan.ts). Whatever the set and the counts, the cost must stay the
 * library's own full calculation to the nano-dollar, and a usage the library refuses must
 * still be refused.
 */

const PROVIDERS = ['openai', 'anthropic', 'google', 'mistral', 'deepseek', 'x-ai', 'perplexity']

// Every quantity the library's extractors can report (its own names), across providers.
const QUANTITIES = [
  ...new Set(
    PROVIDERS.flatMap((id) => findProvider({ providerId: id })?.extractors ?? []).flatMap((e) => e.mappings.map((m) => m.dest)),
  ),
  'web_searches',
].sort()

// A few models of each provider whose prices do not change with the time of day.
const MODELS = PROVIDERS.flatMap((id) => {
  const provider = findProvider({ providerId: id })
  if (!provider) return []
  return provider.models
    .filter((m) => !Array.isArray(m.prices))
    .slice(0, 12)
    .map((m) => ({ provider: id, model: m.id }))
})

const AT = Date.UTC(2026, 10, 1)

function library(provider: string, model: string, q: Quantities): { nano: number } | 'refused' | null {
  try {
    const r = calcPrice(q, model, { providerId: provider, timestamp: new Date(AT) })
    return r === null ? null : { nano: Math.round(r.total_price * 1e9) }
  } catch {
    return 'refused'
  }
}

function ours(provider: string, model: string, q: Quantities): { nano: number } | 'refused' | null {
  try {
    const r = priceQuantities(provider, model, q, AT)
    return r === null ? null : { nano: r.costNano }
  } catch {
    return 'refused'
  }
}

const counts = fc.oneof(fc.integer({ min: 1, max: 2_000 }), fc.integer({ min: 1, max: 5_000_000 }))

describe('memoised pricing plans', () => {
  it('the quantity sets used (sanity: the library reports these)', () => {
    expect(QUANTITIES).toEqual(expect.arrayContaining(['input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'input_audio_tokens']))
    expect(MODELS.length).toBeGreaterThan(30)
  })

  it('price every quantity set of every model as the full calculation does, refusals included', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...MODELS),
        fc.subarray(QUANTITIES, { minLength: 1, maxLength: 6 }),
        fc.array(counts, { minLength: 6, maxLength: 6 }),
        // The same set again with other counts: the second call goes through the plan.
        fc.array(counts, { minLength: 6, maxLength: 6 }),
        ({ provider, model }, names, first, second) => {
          for (const values of [first, second]) {
            const q = Object.fromEntries(names.map((n, i) => [n, values[i]!]))
            expect(ours(provider, model, q), `${provider} ${model} ${JSON.stringify(q)}`).toEqual(library(provider, model, q))
          }
        },
      ),
      { numRuns: 5_000 },
    )
  })

  it('keeps per-request prices a call does not report: requests and web searches', () => {
    // Anthropic prices web searches per 1,000; a set without them must not lose a price
    // that the library would charge, nor charge one it would not.
    const sets: Quantities[] = [{ input_tokens: 100, output_tokens: 5 }, { input_tokens: 100, output_tokens: 5, web_searches: 2 }, { input_tokens: 7, output_tokens: 9 }]
    for (const q of sets) {
      expect(ours('anthropic', 'claude-sonnet-4-5', q)).toEqual(library('anthropic', 'claude-sonnet-4-5', q))
      // Perplexity's sonar charges every request ($12 per 1,000) whatever it reports.
      expect(ours('perplexity', 'sonar', q)).toEqual(library('perplexity', 'sonar', q))
    }
    expect(ours('perplexity', 'sonar', { input_tokens: 1000, output_tokens: 1000 })).toEqual({ nano: 1000 * 1000 + 1000 * 1000 + 12_000_000 })
  })

  // Tiered prices (Gemini 2.5 Pro, Claude Sonnet 4.5 and GPT-5.4 above 200k input tokens),
  // Anthropic's cache writes by duration, audio, reasoning, per-request prices.
  const PRICED = [
    ['openai', 'gpt-4o'],
    ['openai', 'gpt-4o-mini'],
    ['openai', 'o4-mini'],
    ['openai', 'gpt-audio'],
    ['openai', 'gpt-5.4'],
    ['anthropic', 'claude-sonnet-4-5'],
    ['anthropic', 'claude-3-5-haiku-latest'],
    ['anthropic', 'claude-3-opus-latest'],
    ['google', 'gemini-2.5-pro'],
    ['google', 'gemini-2.5-flash'],
    ['google', 'gemini-1.5-pro'],
    ['x-ai', 'grok-4.20'],
    ['perplexity', 'sonar'],
  ].map(([provider, model]) => ({ provider: provider!, model: model! }))

  // Whole input and output counts on both sides of the tiers; their parts mostly smaller.
  const whole = fc.oneof(fc.integer({ min: 1, max: 200_000 }), fc.integer({ min: 190_000, max: 5_000_000 }))
  const part = fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 1, max: 3_000 }) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 300_000 }) })
  const usageOf = (names: readonly string[]) =>
    fc.tuple(...names.map((n) => (n === 'input_tokens' || n === 'output_tokens' ? whole : part))).map((counts) => Object.fromEntries(names.map((n, i) => [n, counts[i]!])))

  /** The library's total to the last bit (not only to the nano-dollar), or 'refused'. */
  const libraryTotal = (provider: string, model: string, q: Quantities) => {
    try {
      return calcPrice(q, model, { providerId: provider, timestamp: new Date(AT) })?.total_price ?? null
    } catch {
      return 'refused'
    }
  }
  // The provider narrowed to the model, as priceQuantities narrows it.
  const narrowed = new Map(
    PRICED.map(({ provider, model }) => {
      const full = findProvider({ providerId: provider })!
      return [model, { ...full, models: [calcPrice({}, model, { provider: full })!.model] }]
    }),
  )
  const plannedTotal = (model: string, q: Quantities) => {
    try {
      return pricePlanned(narrowed.get(model)!, model, q, AT)?.total ?? null
    } catch {
      return 'refused'
    }
  }

  it('price through the learnt arithmetic as the full calculation does, to the last bit: tiers, cache writes, audio, refusals', () => {
    const others = QUANTITIES.filter((q) => q !== 'input_tokens' && q !== 'output_tokens')
    fc.assert(
      fc.property(
        fc.constantFrom(...PRICED),
        // Mostly both wholes, and a few of the parts, in the order an extractor reports them.
        fc.subarray(['input_tokens', 'output_tokens'], { minLength: 1 }),
        fc.subarray(others, { maxLength: 4 }),
        fc.integer({ min: 1, max: 2 ** 31 }),
        ({ provider, model }, wholes, parts, seed) => {
          const names = [...wholes, ...parts]
          // The set's first event teaches it; the later ones are priced by what it taught.
          for (const q of fc.sample(usageOf(names), { numRuns: 5, seed })) {
            const label = `${provider} ${model} ${JSON.stringify(q)}`
            expect(ours(provider, model, q), label).toEqual(library(provider, model, q))
            expect(plannedTotal(model, q), label).toBe(libraryTotal(provider, model, q))
          }
        },
      ),
      { numRuns: 3_000 },
    )
  })
})
