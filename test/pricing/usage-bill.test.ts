import { randomUUID } from 'node:crypto'
import { calcPrice, extractUsage, findProvider } from '@pydantic/genai-prices'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startHarness, unique, type Harness } from '../helpers/harness.ts'

/**
 * An llm_call may carry the provider's usage object as its SDK returned it. The
 * cost burnrate stores must be the price library's own calculation for that usage, to the
 * nano-dollar, and every billed quantity is kept on the event.
 */
let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h?.close())

interface Bill {
  name: string
  provider: string
  api_flavor?: string
  model: string
  usage: Record<string, unknown>
  /** Worked out by hand from the provider's price page, where given. */
  handNano?: number
}

// Usage objects shaped as the SDKs' own types define them (openai 6.x CompletionUsage and
// ResponseUsage, anthropic 1.x Usage, @google/genai GenerateContentResponseUsageMetadata).
const BILLS: Bill[] = [
  {
    name: 'OpenAI chat, a cached prompt and reasoning',
    provider: 'openai',
    api_flavor: 'chat',
    model: 'gpt-4o',
    usage: {
      prompt_tokens: 2000,
      completion_tokens: 800,
      total_tokens: 2800,
      prompt_tokens_details: { cached_tokens: 1200, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 300, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
    },
    // 800 uncached × $2.50/M + 1,200 cached × $1.25/M + 800 out × $10/M = $0.0115
    handNano: 11_500_000,
  },
  {
    name: 'OpenAI gpt-audio, audio in and out',
    provider: 'openai',
    api_flavor: 'chat',
    model: 'gpt-audio',
    usage: {
      prompt_tokens: 1000,
      completion_tokens: 10,
      total_tokens: 1010,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 600 },
      completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 5 },
    },
    // 400 text × $2.50/M + 600 audio × $32/M + 5 text × $10/M + 5 audio × $64/M = $0.02057
    handNano: 20_570_000,
  },
  {
    name: 'Anthropic, 5-minute and 1-hour cache writes, a cache read and web searches',
    provider: 'anthropic',
    model: 'claude-sonnet-4-5',
    usage: {
      input_tokens: 100,
      output_tokens: 50,
      cache_creation_input_tokens: 300,
      cache_read_input_tokens: 1000,
      cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 },
      server_tool_use: { web_search_requests: 3, web_fetch_requests: 0 },
      service_tier: 'standard',
    },
    // 100 × $3/M + 1,000 × $0.30/M + 100 × $3.75/M + 200 × $6/M + 50 × $15/M + 3 × $10/1000 = $0.032925
    handNano: 32_925_000,
  },
  {
    name: 'OpenAI responses, cache reads and writes',
    provider: 'openai',
    api_flavor: 'responses',
    model: 'o4-mini',
    usage: {
      input_tokens: 3000,
      input_tokens_details: { cached_tokens: 1000, cache_write_tokens: 500 },
      output_tokens: 700,
      output_tokens_details: { reasoning_tokens: 400 },
      total_tokens: 3700,
    },
  },
  {
    name: 'Google Gemini, text and audio prompt',
    provider: 'google',
    model: 'gemini-2.5-flash',
    usage: {
      promptTokenCount: 1500,
      candidatesTokenCount: 300,
      totalTokenCount: 1800,
      promptTokensDetails: [
        { modality: 'TEXT', tokenCount: 1000 },
        { modality: 'AUDIO', tokenCount: 500 },
      ],
    },
  },
]

/** The library's own figure: its extractor on the response the usage came in, its calculation. */
function libraryBill(b: Bill): { nano: number; usage: Record<string, number | undefined> } {
  const provider = findProvider({ providerId: b.provider })!
  const extractor = b.api_flavor ? provider.extractors!.find((e) => e.api_flavor === b.api_flavor)! : provider.extractors![0]!
  const root = extractor.root as string
  const { usage } = extractUsage(provider, { [extractor.model_path as string]: b.model, [root]: b.usage }, extractor.api_flavor)
  return { nano: Math.round(calcPrice(usage, b.model, { providerId: b.provider })!.total_price * 1e9), usage }
}

const post = (key: string, body: Record<string, unknown>) => h.post('/events', body, key)

describe('llm_call with the provider usage object', () => {
  it.each(BILLS)('$name: stored at the price library\'s own cost, to the nano-dollar, with every quantity', async (b) => {
    const key = await h.key(unique('u'))
    const event_id = randomUUID()
    const res = await post(key, { agent_id: 'bill', event_type: 'llm_call', event_id, model: b.model, provider: b.provider, api_flavor: b.api_flavor, usage: b.usage })
    expect(res.statusCode).toBe(200)
    const expected = libraryBill(b)
    if (b.handNano !== undefined) expect(expected.nano).toBe(b.handNano)
    expect(Math.round(res.json().cost_usd * 1e9)).toBe(expected.nano)

    const [stored] = (await h.get('/agents/events', key)).json().events
    expect(Math.round(stored.cost_usd * 1e9)).toBe(expected.nano)
    const quantities = Object.fromEntries(Object.entries(expected.usage).filter(([, v]) => (v ?? 0) > 0))
    expect(stored).toMatchObject({ event_id, quantities, unpriced_quantities: [], price_fallback: false })
    expect(stored.input_tokens).toBe(expected.usage.input_tokens)
    expect(stored.output_tokens).toBe(expected.usage.output_tokens)
    // The agent's total and the hourly view are exact sums of the stored costs.
    const agent = (await h.get('/agents/bill', key)).json()
    expect(Math.round(agent.total_cost_usd * 1e9)).toBe(expected.nano)
    expect(Math.round(agent.cost_by_model[0].cost_usd * 1e9)).toBe(expected.nano)
  })

  it("adds Anthropic's compaction iterations, which the top-level counts leave out", async () => {
    const key = await h.key(unique('u'))
    // BetaUsage: a compaction entry's tokens are not in the top-level fields; message entries are.
    const usage = {
      input_tokens: 1000,
      output_tokens: 100,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      iterations: [
        { type: 'message', input_tokens: 1000, output_tokens: 100, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
        { type: 'compaction', input_tokens: 4000, output_tokens: 500, cache_creation_input_tokens: 0, cache_read_input_tokens: 2000, cache_creation: null },
      ],
    }
    const res = await post(key, { agent_id: 'compacting', event_type: 'llm_call', model: 'claude-sonnet-4-5', provider: 'anthropic', usage })
    expect(res.statusCode).toBe(200)
    // (1,000 + 4,000) uncached × $3/M + 2,000 cache read × $0.30/M + 600 out × $15/M = $0.0246
    expect(Math.round(res.json().cost_usd * 1e9)).toBe(24_600_000)
    const [stored] = (await h.get('/agents/events', key)).json().events
    expect(stored.quantities).toEqual({ input_tokens: 7000, output_tokens: 600, cache_read_tokens: 2000 })
  })

  it('stores, shows and counts a quantity the price data has no price for, never silently free', async () => {
    const key = await h.key(unique('u'))
    const usage = { input_tokens: 1000, output_tokens: 100, server_tool_use: { web_search_requests: 2 } }
    const res = await post(key, { agent_id: 'searcher', event_type: 'llm_call', model: 'claude-3-haiku-20240307', provider: 'anthropic', usage })
    expect(res.statusCode).toBe(200)
    const [stored] = (await h.get('/agents/events', key)).json().events
    expect(stored).toMatchObject({ quantities: { input_tokens: 1000, output_tokens: 100, web_searches: 2 }, unpriced_quantities: ['web_searches'] })
    // The tokens are priced: 1,000 × $0.25/M + 100 × $1.25/M.
    expect(Math.round(stored.cost_usd * 1e9)).toBe(375_000)
    expect(await h.services.metrics.registry.getSingleMetricAsString('burnrate_unpriced_quantities_total')).toContain('burnrate_unpriced_quantities_total{quantity="web_searches"} 1')
  })

  it('prices an unknown model of a known provider with the default model, flagged', async () => {
    const key = await h.key(unique('u'))
    const res = await post(key, { agent_id: 'a', event_type: 'llm_call', model: 'gpt-99-preview', provider: 'openai', usage: { prompt_tokens: 1000, completion_tokens: 500 } })
    expect(res.statusCode).toBe(200)
    expect(res.json().cost_usd).toBe(0.0075) // gpt-4o's prices, the default model
    const [stored] = (await h.get('/agents/events', key)).json().events
    expect(stored).toMatchObject({ price_fallback: true, quantities: { input_tokens: 1000, output_tokens: 500 } })
  })

  it('refuses what cannot be billed with a 400 naming the field, and stores nothing', async () => {
    const key = await h.key(unique('u'))
    const llm = (extra: Record<string, unknown>) => ({ agent_id: 'bad', event_type: 'llm_call', model: 'gpt-4o', provider: 'openai', ...extra })
    const cases: Array<[Record<string, unknown>, string]> = [
      [llm({ usage: 'lots' }), 'usage'],
      [llm({ usage: [1, 2] }), 'usage'],
      [llm({ usage: null }), 'usage'],
      [llm({ usage: 5 }), 'usage'],
      [llm({ usage: { prompt_tokens: -3, completion_tokens: 1 } }), 'usage'],
      [llm({ usage: { prompt_tokens: 3.5, completion_tokens: 1 } }), 'usage'],
      [llm({ usage: { completion_tokens: 1 } }), 'usage'], // the extractor requires prompt_tokens
      [llm({ provider: 'no-such-provider', usage: { prompt_tokens: 1, completion_tokens: 1 } }), 'provider'],
      [llm({ api_flavor: 'telepathy', usage: { prompt_tokens: 1, completion_tokens: 1 } }), 'api_flavor'],
      [llm({ usage: { prompt_tokens: 1, completion_tokens: 1 }, input_tokens: 1 }), 'input_tokens'],
      [{ agent_id: 'bad', event_type: 'llm_call', model: 'gpt-4o', usage: { prompt_tokens: 1, completion_tokens: 1 } }, 'provider'],
      [{ agent_id: 'bad', event_type: 'llm_call', model: 'gpt-4o', provider: 'openai', input_tokens: 5 }, 'provider'],
      [{ agent_id: 'bad', event_type: 'tool_call', tool_name: 'x', provider: 'openai', usage: { prompt_tokens: 1, completion_tokens: 1 } }, 'usage'],
    ]
    for (const [body, field] of cases) {
      const res = await post(key, body)
      expect(res.statusCode, JSON.stringify(body)).toBe(400)
      expect(res.json().errors.map((e: { field: string }) => e.field), JSON.stringify(body)).toContain(field)
    }
    expect((await h.get('/agents', key)).json().agents).toEqual([])
    expect((await h.get('/agents/events', key)).json().events).toEqual([])
  })
})
