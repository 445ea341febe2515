import { randomUUID } from 'node:crypto'
import type { SegmentLog } from '../src/journal/segment-log.ts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h.close())

describe('POST /events', () => {
  it('prices an llm_call from the token counts and the model price', async () => {
    const key = await h.key(unique('u'))
    const res = await h.post('/events', llmCall('a'), key)
    expect(res.statusCode).toBe(200)
    const body = res.json()
    expect(body).toMatchObject({ ok: true, cost_usd: LLM_CALL_USD, paused: false, total_cost_24h: LLM_CALL_USD })
    expect(body.event_id).toMatch(/^[0-9a-f-]{36}$/)
  })

  it('gives non-LLM events a cost of 0.0 and keeps the running total (rule 1)', async () => {
    const key = await h.key(unique('u'))
    await h.post('/events', llmCall('a'), key)
    for (const e of [
      { agent_id: 'a', event_type: 'tool_call', tool_name: 'search', input_tokens: 999 },
      { agent_id: 'a', event_type: 'agent_start' },
      { agent_id: 'a', event_type: 'agent_end', metadata: { reason: 'done' } },
    ]) {
      const res = await h.post('/events', e, key)
      expect(res.statusCode).toBe(200)
      expect(res.json()).toMatchObject({ ok: true, cost_usd: 0, paused: false, total_cost_24h: LLM_CALL_USD })
    }
  })

  it('stores the run an event names, and an agent_start without one opens the run its event_id names', async () => {
    const key = await h.key(unique('u'))
    const start = (await h.post('/events', { agent_id: 'a', event_type: 'agent_start' }, key)).json()
    await h.post('/events', llmCall('a', { run_id: start.event_id }), key)
    await h.post('/events', { agent_id: 'a', event_type: 'agent_start', run_id: 'nightly-42' }, key)
    await h.post('/events', llmCall('a'), key)
    const events = (await h.get('/agents/events', key)).json().events
    expect(events.map((e: { event_type: string; run_id: string | null }) => [e.event_type, e.run_id])).toEqual([
      ['llm_call', null],
      ['agent_start', 'nightly-42'],
      ['llm_call', start.event_id],
      ['agent_start', start.event_id],
    ])
  })

  it('prices a model absent from the table at the default model and marks it (rule 3)', async () => {
    const key = await h.key(unique('u'))
    const res = await h.post('/events', llmCall('a', { model: 'acme-unreleased-9000' }), key)
    expect(res.json().cost_usd).toBe(LLM_CALL_USD) // gpt-4o prices
    const events = (await h.get('/agents/events', key)).json().events
    expect(events[0]).toMatchObject({ model: 'acme-unreleased-9000', price_fallback: true, cost_usd: LLM_CALL_USD })
  })

  it('matches dated model variants as the catalogue does', async () => {
    const key = await h.key(unique('u'))
    const res = await h.post('/events', llmCall('a', { model: 'gpt-4o-2024-08-06' }), key)
    expect(res.json().cost_usd).toBe(LLM_CALL_USD)
    expect((await h.get('/agents/events', key)).json().events[0].price_fallback).toBe(false)
  })

  it('prices cached input tokens at their own rate', async () => {
    const key = await h.key(unique('u'))
    // gpt-4o: 400 uncached * 2.5 + 600 cache reads * 1.25 + 500 out * 10, per 1M
    const res = await h.post('/events', llmCall('a', { cache_read_tokens: 600 }), key)
    expect(res.json().cost_usd).toBeCloseTo((400 * 2.5 + 600 * 1.25 + 500 * 10) / 1e6, 12)
  })

  it('keeps a 24 h total that is the exact sum of its events', async () => {
    const key = await h.key(unique('u'))
    // 0.15 USD per 1M input tokens: 1 token costs 0.15 nano-USD... rounded per event to 0 nano
    // would drift; gpt-4o-mini at 7 input tokens = 1.05 nano → 1 nano. Sum is of the rounded costs.
    const costs: number[] = []
    let last = 0
    for (let i = 0; i < 7; i++) {
      const r = (await h.post('/events', llmCall('a', { model: 'gpt-4o-mini', input_tokens: 333, output_tokens: 77 }), key)).json()
      costs.push(Math.round(r.cost_usd * 1e9))
      last = r.total_cost_24h
    }
    expect(Math.round(last * 1e9)).toBe(costs.reduce((a, b) => a + b, 0))
    const listed = (await h.get('/agents', key)).json().agents[0]
    expect(Math.round(listed.total_cost_usd * 1e9)).toBe(costs.reduce((a, b) => a + b, 0))
  })

  it('stores metadata, tool_name and the receive timestamp with the event', async () => {
    const key = await h.key(unique('u'))
    const before = Date.now()
    await h.post('/events', { agent_id: 'a', event_type: 'tool_call', tool_name: 'grep', metadata: { n: 1, tags: ['x'] } }, key)
    const [e] = (await h.get('/agents/events', key)).json().events
    expect(e).toMatchObject({ agent_id: 'a', event_type: 'tool_call', tool_name: 'grep', model: null, metadata: { n: 1, tags: ['x'] }, cost_usd: 0 })
    expect(Date.parse(e.timestamp)).toBeGreaterThanOrEqual(before - 1)
    expect(e.timestamp).toMatch(/Z$/)
  })
})

describe('POST /events with a client event_id (safe retries)', () => {
  it('acknowledges a repeat with the same cost and counts it once', async () => {
    const key = await h.key(unique('u'))
    const event_id = randomUUID()
    const first = (await h.post('/events', llmCall('a', { event_id }), key)).json()
    const again = (await h.post('/events', llmCall('a', { event_id }), key)).json()
    expect(again).toMatchObject({ ok: true, event_id, cost_usd: first.cost_usd, total_cost_24h: first.total_cost_24h, duplicate: true })
    const agents = (await h.get('/agents', key)).json().agents
    expect(agents).toEqual([expect.objectContaining({ agent_id: 'a', llm_calls: 1, total_cost_usd: LLM_CALL_USD })])
    expect((await h.get('/agents/events', key)).json().events).toHaveLength(1)
  })

  it('stores concurrent repeats of one id once', async () => {
    const key = await h.key(unique('u'))
    const event_id = randomUUID()
    const replies = await Promise.all(Array.from({ length: 20 }, () => h.post('/events', llmCall('a', { event_id }), key)))
    expect(replies.every((r) => r.statusCode === 200 && r.json().cost_usd === LLM_CALL_USD)).toBe(true)
    expect((await h.get('/agents/events', key)).json().events).toHaveLength(1)
    expect((await h.get('/agents', key)).json().agents[0].total_cost_usd).toBe(LLM_CALL_USD)
  })

  it('scopes event ids to the user: another user may use the same id', async () => {
    const [k1, k2] = [await h.key(unique('u')), await h.key(unique('u'))]
    const event_id = randomUUID()
    expect((await h.post('/events', llmCall('a', { event_id }), k1)).json().duplicate).toBeUndefined()
    expect((await h.post('/events', llmCall('a', { event_id }), k2)).json().duplicate).toBeUndefined()
    expect((await h.get('/agents', k2)).json().agents[0].llm_calls).toBe(1)
  })
})

describe('the journal', () => {
  it('answers concurrent events from shared journal writes, and ships them to ClickHouse afterwards', async () => {
    const key = await h.key(unique('u'))
    const journal = h.services.journal as SegmentLog
    const writesBefore = journal.stats.writes
    const replies = await Promise.all(Array.from({ length: 200 }, (_, i) => h.post('/events', llmCall(`a${i % 5}`), key)))
    expect(replies.every((r) => r.statusCode === 200)).toBe(true)
    const writes = journal.stats.writes - writesBefore
    expect(writes).toBeGreaterThan(0)
    expect(writes).toBeLessThan(200 / 4)
    const agents = (await h.get('/agents', key)).json().agents
    expect(agents.reduce((n: number, a: { llm_calls: number }) => n + a.llm_calls, 0)).toBe(200)
    await h.flush()
    expect((await h.get('/agents/events?limit=1000', key)).json().events).toHaveLength(200)
  })
})
