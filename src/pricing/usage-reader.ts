/**
 * The price library's extraction of a usage object (@pydantic/genai-prices `extractUsage`),
 * memoised per shape of the object.
 *
 * What the library's extractor reads from a usage object depends on its shape alone: its
 * keys and nesting, the type of each value, and the strings an array item is matched by
 * (Gemini's `{ modality: 'AUDIO', tokenCount }`). The numbers only add up: each quantity it
 * reports is the sum of the numbers at the paths its mappings name (Anthropic's input_tokens
 * adds its cache reads and writes, Gemini's output_tokens its thoughts). So once per shape,
 * the library itself is asked which numbers add up to which quantity: the usage object with
 * every number 0, then with each number in turn 1 and the others 0. Every later object of the
 * shape is read by adding its numbers so, without the library (0.3 against 2.4 us an event).
 *
 * A shape is learnt on its second sighting only (a client sending a new shape with every
 * event costs no learning), and kept only if the sums agree with the library's extraction of
 * the event that taught it. An object with a number the sums would not add exactly as the
 * library does (negative, fractional, huge) is read by the library.
 */
import { extractUsage, type ExtractPath, type Provider, type UsageExtractor } from '@pydantic/genai-prices'
import { LRUCache } from 'lru-cache'

/** Quantity name (the library's usage keys) → count, as the library's extractor reports it. */
export type Counts = Record<string, number | undefined>

/**
 * A shape: the walk of a usage object (own keys as `for…in` visits them, arrays in order),
 * each value a marker and each key its string. A string value is its marker and the string.
 */
type Skeleton = ReadonlyArray<string | number>
const NUMBER = 0
const OBJECT = 1
const ARRAY = 2
const END = 3
const STRING = 4
const TRUE = 5
const FALSE = 6
const NULL = 7

/**
 * The quantities a shape reports, in the library's order, each with the numbers (by their
 * place in the walk; one repeated when the library adds it twice) that add up to it.
 */
type Plan = ReadonlyArray<{ name: string; numbers: readonly number[] }>

interface Learnt {
  skeleton: Skeleton
  plan: Plan
}

/** Larger objects are read by the library every time (and never learnt). */
const MAX_NUMBERS = 64
const MAX_DEPTH = 16
const MAX_SHAPE = 4096
/** No number beyond this is summed here: sums of up to MAX_NUMBERS of them stay exact integers. */
const MAX_SUMMED = 1_000_000_000_000

/**
 * provider\0flavor\0shape → seen once (not learnt yet), learnt, or found not to add up
 * (always the library).
 */
const shapes = new LRUCache<string, { known: 'seen' | Learnt | null }>({ max: 2_000 })

/**
 * The shapes an extractor read last, tried first: matching an object against a skeleton
 * takes a tenth of what encoding its shape as a key and looking it up does.
 */
const MAX_RECENT = 8
const recents = new WeakMap<UsageExtractor, Learnt[]>()

/**
 * The quantities the library's `extractor` of `provider` extracts from `usage` (as found at the
 * extractor's root of a response for `model`). Throws what the library throws.
 */
export function readUsage(provider: Provider, extractor: UsageExtractor, model: string, usage: Record<string, unknown>): Counts {
  let recent = recents.get(extractor)
  if (!recent) recents.set(extractor, (recent = []))
  const numbers: number[] = []
  for (let i = 0; i < recent.length; i++) {
    const learnt = recent[i]!
    numbers.length = 0
    if (matches(usage, learnt.skeleton, 0, numbers) !== learnt.skeleton.length) continue
    if (i > 0) recent.unshift(...recent.splice(i, 1))
    return sums(learnt.plan, numbers) ?? library(provider, extractor, model, usage)
  }

  numbers.length = 0
  const skeleton: Array<string | number> = []
  if (!walk(usage, skeleton, numbers, 0)) return library(provider, extractor, model, usage)
  const shape = JSON.stringify(skeleton)
  if (shape.length > MAX_SHAPE) return library(provider, extractor, model, usage)
  const key = `${provider.id}\0${extractor.api_flavor}\0${shape}`
  const entry = shapes.get(key)
  if (entry === undefined) {
    shapes.set(key, { known: 'seen' })
    return library(provider, extractor, model, usage)
  }
  const { known } = entry
  if (known !== null && known !== 'seen') {
    remember(recent, known)
    return sums(known.plan, numbers) ?? library(provider, extractor, model, usage)
  }
  const counts = library(provider, extractor, model, usage)
  // Learnt from an object the library read, and whose numbers the sums take (else on a later
  // one: a client repeating odd numbers costs no learning either): the plan's quantities must
  // be the library's.
  if (known === 'seen' && numbers.every(summable)) {
    const plan = learn(provider, extractor, model, usage, numbers.length)
    const own = plan && sums(plan, numbers)
    entry.known = plan && own && sameCounts(own, counts) ? { skeleton, plan } : null
    if (entry.known) remember(recent, entry.known)
  }
  return counts
}

function remember(recent: Learnt[], learnt: Learnt): void {
  recent.unshift(learnt)
  if (recent.length > MAX_RECENT) recent.pop()
}

function library(provider: Provider, extractor: UsageExtractor, model: string, usage: unknown): Counts {
  return extractUsage(provider, response(extractor, model, usage), extractor.api_flavor).usage
}

/** The response the extractor reads: the usage object, and the model, where the response has them. */
function response(extractor: UsageExtractor, model: string, usage: unknown): Record<string, unknown> {
  const r: Record<string, unknown> = {}
  place(r, extractor.model_path, model)
  place(r, extractor.root, usage)
  return r
}

function place(target: Record<string, unknown>, path: ExtractPath, value: unknown): void {
  const steps = (typeof path === 'string' ? [path] : path).filter((s): s is string => typeof s === 'string')
  let at = target
  for (const step of steps.slice(0, -1)) at = (at[step] ??= {}) as Record<string, unknown>
  at[steps.at(-1)!] = value
}

/** The plan's quantities from `numbers`, or null when one of them is not one the sums take. */
function sums(plan: Plan, numbers: readonly number[]): Counts | null {
  const counts: Counts = {}
  for (const { name, numbers: at } of plan) {
    let sum = 0
    for (const i of at) {
      const n = numbers[i]!
      if (!summable(n)) return null
      sum += n
    }
    counts[name] = sum
  }
  return counts
}

/** A whole count the sums add exactly as the library does. */
function summable(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0 && n <= MAX_SUMMED
}

function sameCounts(a: Counts, b: Counts): boolean {
  const names = Object.keys(a)
  const others = Object.keys(b)
  return names.length === others.length && names.every((name, i) => others[i] === name && a[name] === b[name])
}

/**
 * The plan of `usage`'s shape, from the library: which of its `count` numbers add up to which
 * quantity. Null when the library refuses the shape, or reports anything but whole sums.
 */
function learn(provider: Provider, extractor: UsageExtractor, model: string, usage: Record<string, unknown>, count: number): Plan | null {
  const probe = (one: number) => {
    let i = 0
    return library(provider, extractor, model, withNumbers(usage, () => (i++ === one ? 1 : 0)))
  }
  try {
    const names = Object.keys(probe(-1))
    const plan = names.map((name) => ({ name, numbers: [] as number[] }))
    for (let n = 0; n < count; n++) {
      const got = probe(n)
      const gotNames = Object.keys(got)
      if (gotNames.length !== names.length || gotNames.some((name, i) => name !== names[i])) return null
      for (const q of plan) {
        const times = got[q.name]
        if (times === undefined || !Number.isInteger(times) || times < 0 || times > MAX_NUMBERS) return null
        for (let t = 0; t < times; t++) q.numbers.push(n)
      }
    }
    return plan
  } catch {
    return null
  }
}

/**
 * Appends `value`'s skeleton to `skeleton` and its numbers to `numbers`, in walk order;
 * false when it is too large to memoise.
 */
function walk(value: unknown, skeleton: Array<string | number>, numbers: number[], depth: number): boolean {
  switch (typeof value) {
    case 'number':
      skeleton.push(NUMBER)
      numbers.push(value)
      return numbers.length <= MAX_NUMBERS
    case 'string':
      skeleton.push(STRING, value)
      return true
    case 'boolean':
      skeleton.push(value ? TRUE : FALSE)
      return true
    case 'object':
      break
    default:
      return false
  }
  if (value === null) {
    skeleton.push(NULL)
    return true
  }
  if (depth >= MAX_DEPTH) return false
  if (Array.isArray(value)) {
    skeleton.push(ARRAY)
    for (const item of value) if (!walk(item, skeleton, numbers, depth + 1)) return false
  } else {
    skeleton.push(OBJECT)
    for (const key in value) {
      if (!Object.hasOwn(value, key)) continue
      // A copy for learning would set its prototype instead (bodies refuse it anyway).
      if (key === '__proto__') return false
      skeleton.push(key)
      if (!walk((value as Record<string, unknown>)[key], skeleton, numbers, depth + 1)) return false
    }
  }
  skeleton.push(END)
  return true
}

/**
 * Where the walk of `value` against `skeleton` from `at` ends, appending its numbers to
 * `numbers`; -1 when the shapes differ.
 */
function matches(value: unknown, skeleton: Skeleton, at: number, numbers: number[]): number {
  const expected = skeleton[at]
  switch (typeof value) {
    case 'number':
      if (expected !== NUMBER) return -1
      numbers.push(value)
      return at + 1
    case 'string':
      return expected === STRING && skeleton[at + 1] === value ? at + 2 : -1
    case 'boolean':
      return expected === (value ? TRUE : FALSE) ? at + 1 : -1
    case 'object':
      break
    default:
      return -1
  }
  if (value === null) return expected === NULL ? at + 1 : -1
  at++
  if (Array.isArray(value)) {
    if (expected !== ARRAY) return -1
    for (const item of value) if ((at = matches(item, skeleton, at, numbers)) < 0) return -1
  } else {
    if (expected !== OBJECT) return -1
    for (const key in value) {
      if (!Object.hasOwn(value, key)) continue
      if (skeleton[at] !== key) return -1
      if ((at = matches((value as Record<string, unknown>)[key], skeleton, at + 1, numbers)) < 0) return -1
    }
  }
  return skeleton[at] === END ? at + 1 : -1
}

/** A copy of `value` with each number replaced by `next()`, in walk order. */
function withNumbers(value: unknown, next: () => number): unknown {
  if (typeof value === 'number') return next()
  if (value === null || typeof value !== 'object') return value
  if (Array.isArray(value)) return value.map((item: unknown) => withNumbers(item, next))
  const copy: Record<string, unknown> = {}
  for (const key in value) if (Object.hasOwn(value, key)) copy[key] = withNumbers((value as Record<string, unknown>)[key], next)
  return copy
}
