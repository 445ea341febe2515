import { extractUsage, findProvider, type Provider, type UsageExtractor } from '@pydantic/genai-prices'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { Problem } from '../../src/errors.ts'
import { extractQuantities } from '../../src/pricing/usage.ts'
import { readUsage } from '../../src/pricing/usage-reader.ts'

/**
 * A usage object is read by the price library's extractor, memoised per shape of the object
 * (src/pricing/usage-reader.ts): whatever the object, the quantities must be the library's
 * own `extractUsage`, and what it refuses must be refused with its words.
 */

function extractorOf(providerId: string, flavor: string): { provider: Provider; extractor: UsageExtractor } {
  const provider = findProvider({ providerId })!
  return { provider, extractor: provider.extractors!.find((e) => e.api_flavor === flavor)! }
}

/** The library's own extraction of a usage object, as the response of `model` would carry it. */
function library(provider: Provider, extractor: UsageExtractor, model: string, usage: unknown): unknown {
  const root = typeof extractor.root === 'string' ? [extractor.root] : (extractor.root as string[])
  const response: Record<string, unknown> = { [extractor.model_path as string]: model }
  let at = response
  for (const step of root.slice(0, -1)) at = (at[step] ??= {}) as Record<string, unknown>
  at[root.at(-1)!] = usage
  return outcome(() => extractUsage(provider, response, extractor.api_flavor).usage)
}

/** A result with its keys in order, or the error's message. */
function outcome(f: () => unknown): unknown {
  try {
    return { entries: Object.entries(f() as object) }
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) }
  }
}

// A usage object's skeleton: where its numbers go, and its other values as they are. Each
// skeleton is filled several times with other numbers: the first object of a shape is read by
// the library, the second teaches the shape, the later ones are read from what it taught.
// A slot of a modality (Gemini's array items are matched by it) is filled with one of them.
type Skeleton = { slot: true } | { modality: true } | string | boolean | null | Skeleton[] | { [key: string]: Skeleton }
const SLOT = { slot: true } as const
const MODALITIES = ['TEXT', 'AUDIO', 'IMAGE', 'DOCUMENT', 'VIDEO'] as const

/** Counts as clients send them, and what the library refuses or sums in its own way. */
const count = fc.oneof(
  { weight: 30, arbitrary: fc.integer({ min: 0, max: 5_000_000 }) },
  { weight: 1, arbitrary: fc.constantFrom(-1, -250, 0.5, 1e12, 1e12 + 1, 2 ** 53, 2 ** 53 + 2, 1e300, Infinity) },
  { weight: 1, arbitrary: fc.double({ min: 0, max: 1e6, noNaN: true }) },
)

/** Any value at a key, mostly a number. */
const value = (inner: fc.Arbitrary<Skeleton> | null): fc.Arbitrary<Skeleton> =>
  fc.oneof(
    { weight: 12, arbitrary: fc.constant(SLOT) },
    { weight: 1, arbitrary: fc.constantFrom<Skeleton>(null, 'standard', true, '12') },
    ...(inner ? [{ weight: 2, arbitrary: inner }] : []),
  )

/**
 * An object of some of `keys` (and maybe one the extractor does not know), in any order; the
 * first two, which the extractors mostly require, more often than not.
 */
function objectOf(keys: readonly string[], valueOf: (key: string) => fc.Arbitrary<Skeleton>): fc.Arbitrary<Skeleton> {
  const [first, second, ...others] = keys
  const required = fc.oneof({ weight: 4, arbitrary: fc.constant([first!, second!]) }, { weight: 1, arbitrary: fc.subarray([first!, second!]) })
  return fc
    .tuple(required, fc.subarray([...others, 'some_new_field']))
    .chain(([some, more]) => fc.shuffledSubarray([...some, ...more], { minLength: some.length + more.length }))
    .chain((chosen) => fc.tuple(...chosen.map((k) => valueOf(k).map((v) => [k, v] as const))))
    .map((entries) => Object.fromEntries(entries))
}

const details = (keys: readonly string[]) => objectOf(keys, () => value(null))

const openaiChat = objectOf(['prompt_tokens', 'completion_tokens', 'total_tokens', 'prompt_tokens_details', 'completion_tokens_details'], (k) =>
  k === 'prompt_tokens_details'
    ? value(details(['cached_tokens', 'audio_tokens', 'cache_write_tokens']))
    : k === 'completion_tokens_details'
      ? value(details(['reasoning_tokens', 'audio_tokens', 'accepted_prediction_tokens', 'rejected_prediction_tokens']))
      : value(null),
)

const openaiResponses = objectOf(['input_tokens', 'output_tokens', 'total_tokens', 'input_tokens_details', 'output_tokens_details'], (k) =>
  k === 'input_tokens_details' ? value(details(['cached_tokens', 'cache_write_tokens'])) : k === 'output_tokens_details' ? value(details(['reasoning_tokens'])) : value(null),
)

const ANTHROPIC_TOP = ['input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens', 'cache_creation', 'server_tool_use', 'service_tier', 'output_tokens_details'] as const
const anthropicEntry = (nested: fc.Arbitrary<Skeleton> | null): fc.Arbitrary<Skeleton> =>
  objectOf([...ANTHROPIC_TOP, ...(nested ? ['iterations'] : [])], (k) => {
    if (k === 'cache_creation') return value(details(['ephemeral_5m_input_tokens', 'ephemeral_1h_input_tokens']))
    if (k === 'server_tool_use') return value(details(['web_search_requests', 'web_fetch_requests']))
    if (k === 'output_tokens_details') return value(details(['thinking_tokens']))
    if (k === 'service_tier') return fc.constantFrom<Skeleton>('standard', 'priority', SLOT)
    if (k === 'iterations' && nested) return fc.array(nested, { maxLength: 3 })
    return value(null)
  })
// Compaction iterations: each a usage object of its own, with a type.
const iteration = anthropicEntry(null).map((entry) => ({ type: 'compaction', ...(entry as object) }) as Skeleton)
const anthropic = anthropicEntry(fc.oneof(iteration, fc.constant<Skeleton>({ type: 'message', input_tokens: SLOT, output_tokens: SLOT })))

const modality = fc.array(
  fc.record({ modality: fc.constantFrom<Skeleton>({ modality: true }, ...MODALITIES), tokenCount: value(null) }).map((r) => r as Skeleton),
  { maxLength: 4 },
)
const google = objectOf(
  ['promptTokenCount', 'candidatesTokenCount', 'totalTokenCount', 'cachedContentTokenCount', 'thoughtsTokenCount', 'toolUsePromptTokenCount', 'promptTokensDetails', 'cacheTokensDetails', 'candidatesTokensDetails', 'toolUsePromptTokensDetails'],
  (k) => (k.endsWith('Details') ? value(modality) : value(null)),
)

const SHAPES = [
  { provider: 'openai', flavor: 'chat', model: 'gpt-4o', usage: openaiChat },
  { provider: 'openai', flavor: 'responses', model: 'o4-mini', usage: openaiResponses },
  { provider: 'anthropic', flavor: 'default', model: 'claude-sonnet-4-5', usage: anthropic },
  { provider: 'google', flavor: 'default', model: 'gemini-2.5-pro', usage: google },
] as const

/** The skeleton with its slots filled from `numbers` and `modalities`, in turn. */
function fill(skeleton: Skeleton, numbers: readonly number[], modalities: readonly string[]): unknown {
  let i = 0
  let m = 0
  const go = (s: Skeleton): unknown => {
    if (s === null || typeof s !== 'object') return s
    if (Array.isArray(s)) return s.map(go)
    if ('slot' in s && s.slot === true) return numbers[i++ % numbers.length]
    if ('modality' in s && s.modality === true) return modalities[m++ % modalities.length]
    return Object.fromEntries(Object.entries(s).map(([k, v]) => [k, go(v)]))
  }
  return go(skeleton)
}

/** How extractQuantities read usage objects before it was memoised: the library on each, added up. */
function reference(providerId: string, flavor: string, model: string, usage: Record<string, unknown>): unknown {
  const { provider, extractor } = extractorOf(providerId, flavor)
  const quantities: Record<string, number> = {}
  const add = (field: string, got: unknown) => {
    if ('error' in (got as object)) throw new Problem('invalid_body', `${field}: not a ${providerId} ${flavor} usage object: ${(got as { error: string }).error.replace('usage.', '')}`)
    for (const [name, n] of (got as { entries: [string, number][] }).entries) {
      if (!Number.isSafeInteger(n) || n < 0 || n > 1e12) throw new Problem('invalid_body', `usage: ${name} must be a whole number of at least 0, got ${n}`)
      if (n > 0) quantities[name] = (quantities[name] ?? 0) + n
    }
  }
  add('usage', library(provider, extractor, model, usage))
  const iterations = usage.iterations
  if (Array.isArray(iterations)) {
    iterations.forEach((entry: unknown, i) => {
      if (typeof entry !== 'object' || entry === null || (entry as { type?: unknown }).type !== 'compaction') return
      add(`usage.iterations.${i}`, library(provider, extractor, model, entry))
    })
  }
  return quantities
}

describe('usage objects read per shape', () => {
  it.each(SHAPES)('$provider $flavor: the library\'s extraction, whatever the object and its numbers', ({ provider: providerId, flavor, model, usage }) => {
    const { provider, extractor } = extractorOf(providerId, flavor)
    // Each skeleton filled six times: its numbers, and its modalities where it has slots for them.
    const fills = fc.array(fc.tuple(fc.array(count, { minLength: 1, maxLength: 12 }), fc.array(fc.constantFrom(...MODALITIES), { minLength: 1, maxLength: 4 })), { minLength: 6, maxLength: 6 })
    fc.assert(
      fc.property(usage, fills, (skeleton, each) => {
        for (const [numbers, modalities] of each) {
          const object = fill(skeleton, numbers, modalities) as Record<string, unknown>
          const label = JSON.stringify(object)
          expect(outcome(() => readUsage(provider, extractor, model, object)), label).toEqual(library(provider, extractor, model, object))
          expect(outcome(() => extractQuantities(providerId, flavor, model, object)), label).toEqual(outcome(() => reference(providerId, flavor, model, object)))
        }
      }),
      { numRuns: 1_500 },
    )
  })

  it('reads an object of a shape it learnt as the library does, numbers of every kind included', () => {
    const { provider, extractor } = extractorOf('openai', 'chat')
    const usage = (prompt: number, cached: unknown) => ({ prompt_tokens: prompt, completion_tokens: 7, prompt_tokens_details: { cached_tokens: cached } })
    // Learnt on the second sighting; read from the plan from the third.
    for (let i = 0; i < 3; i++) readUsage(provider, extractor, 'gpt-4o', usage(100 + i, 5))
    for (const [prompt, cached] of [[120, 30], [-1, 0], [2.5, 1], [2 ** 53 + 2, 0], [5, -3], [5, 'x'], [5, null]] as const) {
      expect(outcome(() => readUsage(provider, extractor, 'gpt-4o', usage(prompt, cached)))).toEqual(library(provider, extractor, 'gpt-4o', usage(prompt, cached)))
    }
  })
})
