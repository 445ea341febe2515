import { calcPrice, findProvider } from '@pydantic/genai-prices'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { priceQuantities, type Quantities } from '../../src/pricing/usage.ts'

/**
 * Pricing is memoised per (model, quantity set) by narrowing the model's price
 * data to the keys a quantity set reaches (src/pricing/usage.ts). Whatever the set and the
 * counts, the cost must stay the library's own full calculation to the nano-dollar, and a
 * usage the library refuses must still be refused.
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
})
