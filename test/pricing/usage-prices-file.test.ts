import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { calcPrice } from '@pydantic/genai-prices'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createPriceTable } from '../../src/pricing/price-table.ts'
import { parsePricesFile } from '../../src/pricing/prices-file.ts'
import { freshDataDir } from '../helpers/process.ts'
import { startHarness, unique, type Harness } from '../helpers/harness.ts'

/**
 * PRICES_FILE prices any quantity of a model (an in-house fine-tune with audio),
 * applied by the price library's own calculation, and gives service tiers their multipliers.
 */
const PRICES = {
  models: { 'our-audio-model': { input: 2, output: 8, quantities: { input_audio_mtok: 40, output_audio_mtok: 80, web_searches_kcount: 5 } } },
  service_tiers: { batch: 0.5, priority: 1.8 },
}
let h: Harness
beforeAll(async () => {
  const file = join(freshDataDir(), 'prices.json')
  writeFileSync(file, JSON.stringify(PRICES))
  h = await startHarness({ env: { PRICES_FILE: file } })
})
afterAll(() => h?.close())

async function stored(key: string) {
  const [event] = (await h.get('/agents/events', key)).json().events
  return event as { cost_usd: number; quantities: Record<string, number>; unpriced_quantities: string[]; service_tier: string | null }
}
const nanoOf = (usd: number) => Math.round(usd * 1e9)

describe('PRICES_FILE and usage objects', () => {
  it("prices every quantity of a file's model with the file's prices", async () => {
    const key = await h.key(unique('u'))
    const usage = {
      prompt_tokens: 1000,
      completion_tokens: 100,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 300 },
      completion_tokens_details: { audio_tokens: 40 },
    }
    const res = await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'our-audio-model', provider: 'openai', api_flavor: 'chat', usage }, key)
    expect(res.statusCode).toBe(200)
    // 700 text × $2/M + 300 audio × $40/M + 60 text out × $8/M + 40 audio out × $80/M
    // = 0.0014 + 0.012 + 0.00048 + 0.0032 = $0.01708
    expect(nanoOf(res.json().cost_usd)).toBe(17_080_000)
    expect(await stored(key)).toMatchObject({ unpriced_quantities: [], quantities: { input_tokens: 1000, input_audio_tokens: 300, output_audio_tokens: 40 } })
  })

  it('refuses, as a 400 storing nothing, counts the price data cannot split (a part larger than its whole)', async () => {
    const key = await h.key(unique('u'))
    const usage = { prompt_tokens: 100, completion_tokens: 10, prompt_tokens_details: { cached_tokens: 0, audio_tokens: 300 } }
    const res = await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'our-audio-model', provider: 'openai', api_flavor: 'chat', usage }, key)
    expect(res.statusCode).toBe(400)
    expect(res.json().errors[0].field).toBe('usage')
    expect((await h.get('/agents', key)).json().agents).toEqual([])
  })

  it("applies a service tier's multiplier, reported beside the usage or inside it", async () => {
    const usage = { prompt_tokens: 2000, completion_tokens: 800, prompt_tokens_details: { cached_tokens: 1200 } }
    const standard = nanoOf(calcPrice({ input_tokens: 2000, output_tokens: 800, cache_read_tokens: 1200 }, 'gpt-4o', { providerId: 'openai' })!.total_price)
    const key = await h.key(unique('u'))
    const batch = await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'gpt-4o', provider: 'openai', api_flavor: 'chat', usage, service_tier: 'batch' }, key)
    expect(nanoOf(batch.json().cost_usd)).toBe(Math.round(standard * 0.5))
    expect(await stored(key)).toMatchObject({ service_tier: 'batch', unpriced_quantities: [] })

    const other = await h.key(unique('u'))
    const anthropic = { input_tokens: 1000, output_tokens: 100, service_tier: 'priority' }
    const res = await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'claude-sonnet-4-5', provider: 'anthropic', usage: anthropic }, other)
    // 1,000 × $3/M + 100 × $15/M = $0.0045, × 1.8
    expect(nanoOf(res.json().cost_usd)).toBe(8_100_000)
  })

  it('prices a tier the file does not name as standard, and says so on the event', async () => {
    const key = await h.key(unique('u'))
    const res = await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'claude-sonnet-4-5', provider: 'anthropic', usage: { input_tokens: 1000, output_tokens: 100, service_tier: 'flex' } }, key)
    expect(nanoOf(res.json().cost_usd)).toBe(4_500_000)
    expect(await stored(key)).toMatchObject({ service_tier: 'flex', unpriced_quantities: ['service_tier'] })
  })

  it('refuses a quantity price that is not a price key of the library, naming it', () => {
    expect(() => parsePricesFile(JSON.stringify({ models: { m: { input: 1, output: 1, quantities: { audio: 3 } } } }), 'p.json')).toThrow(/models\.m\.quantities\.audio/)
    expect(() => parsePricesFile(JSON.stringify({ models: {}, service_tiers: { batch: 0 } }), 'p.json')).toThrow(/service_tiers\.batch/)
    // A set of prices the library cannot use stops the start, naming the model.
    const inconsistent = parsePricesFile(JSON.stringify({ models: { m: { input: 1, output: 1, cache_read: 0.5, quantities: { input_audio_mtok: 3 } } } }), 'p.json')
    expect(() => createPriceTable({ overrides: inconsistent })).toThrow(/PRICES_FILE models\["m"\]: .*cache_audio_read_mtok/)
  })
})
