import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { ModelInfo } from '@pydantic/genai-prices'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../../src/clock.ts'
import { nextPriceChange } from '../../src/pricing/catalogue.ts'
import type { CatalogueResolver, PricesFile } from '../../src/pricing/price-table.ts'
import { createPriceTable, genaiPricesCatalogue, loadPricesFile } from '../../src/pricing/price-table.ts'

/** The real catalogue, wrapped only to count how often it is searched. */
function countingCatalogue(): { resolver: CatalogueResolver; calls: () => number } {
  let n = 0
  return {
    resolver: (model, at) => {
      n++
      return genaiPricesCatalogue(model, at)
    },
    calls: () => n,
  }
}

describe('cost formula on catalogue prices', () => {
  const table = createPriceTable({})

  it('prices gpt-4o 1000 in / 500 out at 2.5 and 10 USD per 1M: 0.0075 USD', () => {
    // 1000 * 2.5 / 1e6 + 500 * 10 / 1e6 = 0.0025 + 0.005 = 0.0075 USD
    expect(table.cost('gpt-4o', { input_tokens: 1000, output_tokens: 500 })).toEqual({
      costNano: 7_500_000,
      fallback: false,
    })
  })

  it('prices a dated variant like its base model, as genai-prices matches it', () => {
    expect(table.lookup('gpt-4o-2024-08-06')).toMatchObject({ matched: 'gpt-4o', fallback: false, input: 2.5 })
    expect(table.cost('gpt-4o-2024-08-06', { input_tokens: 1000, output_tokens: 500 }).costNano).toBe(7_500_000)
    // claude-sonnet-4: 1000 * 3 + 500 * 15 = 10 500 USD per 1e6 tokens = 0.0105 USD
    expect(table.lookup('claude-sonnet-4-20250514').matched).toBe('claude-sonnet-4-0')
    expect(table.cost('claude-sonnet-4-20250514', { input_tokens: 1000, output_tokens: 500 }).costNano).toBe(10_500_000)
  })

  it('prices an unknown model at the default model (gpt-4o) and flags it as fallback', () => {
    expect(table.defaultModel).toBe('gpt-4o')
    expect(table.lookup('my-private-finetune')).toMatchObject({ matched: null, fallback: true, input: 2.5, output: 10 })
    expect(table.cost('my-private-finetune', { input_tokens: 1000, output_tokens: 500 })).toEqual({
      costNano: 7_500_000,
      fallback: true,
    })
  })

  it('charges cache-read tokens, which are part of input_tokens, at the cache-read rate', () => {
    // gpt-4o: 600 uncached * 2.5 + 400 cache-read * 1.25 = 2000 USD per 1e6 tokens
    expect(table.cost('gpt-4o', { input_tokens: 1000, output_tokens: 0, cache_read_tokens: 400 }).costNano).toBe(2_000_000)
  })

  it('charges cache-write tokens at the cache-write rate, or at the input rate when the model has none', () => {
    // claude-sonnet-4 cache_write 3.75; gpt-4o has no cache_write price, so 2.5
    const claude = { input_tokens: 1000, output_tokens: 0, cache_write_tokens: 1000 }
    expect(table.cost('claude-sonnet-4-20250514', claude).costNano).toBe(3_750_000)
    expect(table.cost('gpt-4o', { input_tokens: 1000, output_tokens: 0, cache_write_tokens: 400 }).costNano).toBe(2_500_000)
  })

  it('charges every reported cache token when cache counts exceed input_tokens, with no uncached remainder', () => {
    // 1000 cache-read tokens at 1.25, although input_tokens says 100: 1250 USD per 1e6
    expect(table.cost('gpt-4o', { input_tokens: 100, output_tokens: 0, cache_read_tokens: 1000 }).costNano).toBe(1_250_000)
  })

  it('prices a tiered model (gemini-2.5-pro) at base up to 200000 input tokens and at the tier above', () => {
    expect(table.lookup('gemini-2.5-pro').input).toEqual({ base: 1.25, tiers: [{ start: 200_000, price: 2.5 }] })
    // 200000 * 1.25 + 1000 * 10 = 260 000 USD per 1e6 tokens = 0.26 USD
    expect(table.cost('gemini-2.5-pro', { input_tokens: 200_000, output_tokens: 1000 }).costNano).toBe(260_000_000)
    // over the tier start every key moves up: 200001 * 2.5 + 1000 * 15 = 515 002.5 per 1e6
    expect(table.cost('gemini-2.5-pro', { input_tokens: 200_001, output_tokens: 1000 }).costNano).toBe(515_002_500)
    // the cache-read price tiers on the request's whole input too: 100000 * 2.5 + 100001 * 0.25
    const cached = { input_tokens: 200_001, output_tokens: 0, cache_read_tokens: 100_001 }
    expect(table.cost('gemini-2.5-pro', cached).costNano).toBe(275_000_250)
  })

  it('rejects token counts that are negative or not integers', () => {
    expect(() => table.cost('gpt-4o', { input_tokens: -1, output_tokens: 0 })).toThrow(/input_tokens/)
    expect(() => table.cost('gpt-4o', { input_tokens: 0, output_tokens: 1.5 })).toThrow(/output_tokens/)
  })
})

describe('integer nano-USD', () => {
  const table = createPriceTable({})

  it('makes N one-token events at 0.15 USD per 1M cost exactly N times one event, where floats drift', () => {
    const one = table.cost('gpt-4o-mini', { input_tokens: 1, output_tokens: 0 }).costNano
    expect(one).toBe(150) // 0.15 USD / 1e6 tokens = 150 nano-USD per token
    const three = [1, 2, 3].reduce((s) => s + table.cost('gpt-4o-mini', { input_tokens: 1, output_tokens: 0 }).costNano, 0)
    expect(three).toBe(3 * one)
    expect(three).toBe(table.cost('gpt-4o-mini', { input_tokens: 3, output_tokens: 0 }).costNano)
    // The same sum of ten events in float USD is not 10 * 0.15e-6; in nano-USD it is.
    let floatUsd = 0
    let nano = 0
    for (let i = 0; i < 10; i++) {
      floatUsd += (1 / 1e6) * 0.15
      nano += table.cost('gpt-4o-mini', { input_tokens: 1, output_tokens: 0 }).costNano
    }
    expect(floatUsd).not.toBe(1.5e-6)
    expect(nano).toBe(1500)
  })

  it('rounds half a nano-USD up, deterministically', () => {
    // 0.0005 USD per 1M = 500 pico-USD per token = 0.5 nano-USD
    const t = createPriceTable({ overrides: { default_model: 'half', models: { half: { input: 0.0005, output: 0 } } } })
    expect(t.cost('half', { input_tokens: 1, output_tokens: 0 }).costNano).toBe(1)
    expect(t.cost('half', { input_tokens: 3, output_tokens: 0 }).costNano).toBe(2) // 1.5 → 2
    expect(t.cost('half', { input_tokens: 0, output_tokens: 0 }).costNano).toBe(0)
  })

  it('prices the largest allowed token counts without losing precision', () => {
    const big = { input_tokens: 1e9, output_tokens: 1e9, cache_read_tokens: 0 }
    // 1e9 * 2.5 + 1e9 * 10 = 12.5e9 USD per 1e6 tokens = 12 500 USD
    expect(table.cost('gpt-4o', big).costNano).toBe(12_500 * 1e9)
  })
})

describe('PRICES_FILE overrides', () => {
  const overrides: PricesFile = {
    default_model: 'house-model',
    models: { 'gpt-4o': { input: 1, output: 2 }, 'house-model': { input: 0.5, output: 0.5, cache_read: 0.1 } },
  }
  const table = createPriceTable({ overrides })

  it('prices a listed model from the file before the catalogue', () => {
    expect(table.lookup('gpt-4o')).toMatchObject({ matched: 'gpt-4o', source: 'override', fallback: false })
    // 1000 * 1 + 500 * 2 = 2000 USD per 1e6 tokens
    expect(table.cost('gpt-4o', { input_tokens: 1000, output_tokens: 500 }).costNano).toBe(2_000_000)
  })

  it('matches override names exactly, so a dated variant still comes from the catalogue', () => {
    expect(table.lookup('gpt-4o-2024-08-06')).toMatchObject({ source: 'catalogue', input: 2.5 })
  })

  it("uses the file's default_model for unknown models", () => {
    expect(table.defaultModel).toBe('house-model')
    // 1000 * 0.5 + 500 * 0.5 = 750 USD per 1e6 tokens
    expect(table.cost('unknown-model', { input_tokens: 1000, output_tokens: 500 })).toEqual({
      costNano: 750_000,
      fallback: true,
    })
  })

  it('takes an unlisted default_model from the catalogue', () => {
    const t = createPriceTable({ overrides: { default_model: 'claude-sonnet-4-20250514', models: {} } })
    expect(t.lookup('unknown-model')).toMatchObject({ fallback: true, input: 3, output: 15, cache_write: 3.75 })
  })

  it('refuses to start when the default model cannot be priced at all', () => {
    expect(() => createPriceTable({ overrides: { default_model: 'no-such-model', models: {} } })).toThrow(
      /default model "no-such-model" cannot be priced/,
    )
  })
})

describe('memoisation', () => {
  it('searches the catalogue once per distinct name, never per event', () => {
    const cat = countingCatalogue()
    const table = createPriceTable({ catalogue: cat.resolver })
    const afterStart = cat.calls() // the default model is resolved at start
    const first = table.lookup('gpt-4o-mini')
    expect(table.lookup('gpt-4o-mini')).toBe(first)
    for (let i = 0; i < 100; i++) table.cost('gpt-4o-mini', { input_tokens: i, output_tokens: i })
    for (let i = 0; i < 100; i++) table.cost('some-unknown-model', { input_tokens: i, output_tokens: i })
    expect(cat.calls()).toBe(afterStart + 2)
  })

  it('bounds the memo, evicting the least recently used name', () => {
    const cat = countingCatalogue()
    const table = createPriceTable({ catalogue: cat.resolver, cacheSize: 3 })
    for (const m of ['a-model', 'b-model', 'c-model']) table.lookup(m)
    table.lookup('a-model') // a becomes the most recent; b is now the oldest
    table.lookup('d-model') // evicts b
    const before = cat.calls()
    table.lookup('a-model')
    expect(cat.calls()).toBe(before)
    table.lookup('b-model')
    expect(cat.calls()).toBe(before + 1)
  })

  it('resolves a time-of-day-priced model again when its price window ends (DeepSeek off-peak)', () => {
    const clock = new ManualClock(Date.UTC(2026, 0, 1, 12, 0, 0)) // peak: 00:30–16:30 UTC
    const cat = countingCatalogue()
    const table = createPriceTable({ clock, catalogue: cat.resolver })
    const peak = table.lookup('deepseek-chat')
    expect(peak.input).toBe(0.27)
    const before = cat.calls()
    clock.set(Date.UTC(2026, 0, 1, 16, 29, 59))
    expect(table.lookup('deepseek-chat')).toBe(peak)
    expect(cat.calls()).toBe(before)
    clock.set(Date.UTC(2026, 0, 1, 16, 30, 0))
    expect(table.lookup('deepseek-chat').input).toBe(0.135)
    expect(cat.calls()).toBe(before + 1)
  })

  it('computes the next price change from start-date and time-of-day constraints', () => {
    const model = {
      id: 'x',
      match: { equals: 'x' },
      prices: [
        { prices: { input_mtok: 1 } },
        { constraint: { type: 'start_date', start_date: '2026-03-01' }, prices: { input_mtok: 2 } },
        { constraint: { type: 'time_of_date', start_time: '08:00:00+08:00', end_time: '12:00:00Z' }, prices: {} },
      ],
    } as ModelInfo
    // 08:00+08:00 is 00:00Z; at 2026-02-28 06:00Z the next boundary is 12:00Z that day
    expect(nextPriceChange(model, Date.UTC(2026, 1, 28, 6))).toBe(Date.UTC(2026, 1, 28, 12))
    // at 23:00Z the next is the start date at midnight
    expect(nextPriceChange(model, Date.UTC(2026, 1, 28, 23))).toBe(Date.UTC(2026, 2, 1))
    expect(nextPriceChange({ ...model, prices: { input_mtok: 1 } }, 0)).toBe(Infinity)
  })
})

describe('loadPricesFile', () => {
  let dir = ''
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'burnrate-prices-'))
  })
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true })
  })
  async function file(name: string, body: string): Promise<string> {
    const path = join(dir, name)
    await writeFile(path, body)
    return path
  }

  it('loads a valid file', async () => {
    const body = { default_model: 'm', models: { m: { input: 1, output: 2, cache_read: 0.5 } } }
    await expect(loadPricesFile(await file('ok.json', JSON.stringify(body)))).resolves.toEqual(body)
  })

  it('rejects a negative price, naming the file and the field', async () => {
    const path = await file('neg.json', JSON.stringify({ models: { 'gpt-4o': { input: -1, output: 2 } } }))
    const err = loadPricesFile(path)
    await expect(err).rejects.toThrow(path)
    await expect(err).rejects.toThrow('models["gpt-4o"].input')
  })

  it('rejects a missing output price and a misspelt field', async () => {
    const path = await file('bad.json', JSON.stringify({ models: { m: { input: 1, cache_reads: 1 } } }))
    const err = loadPricesFile(path)
    await expect(err).rejects.toThrow('models.m.output')
    await expect(err).rejects.toThrow('cache_reads')
  })

  it('rejects a file that is not JSON or does not exist, naming it', async () => {
    const path = await file('broken.json', '{"models": ')
    await expect(loadPricesFile(path)).rejects.toThrow(`PRICES_FILE ${path}: not valid JSON`)
    await expect(loadPricesFile(join(dir, 'missing.json'))).rejects.toThrow(/missing\.json: cannot read/)
  })
})
