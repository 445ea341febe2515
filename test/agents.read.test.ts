import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

const HOUR_MS = 3_600_000
// 12:30 UTC on a fixed day, so hour arithmetic is easy to read.
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 30, 0))
let h: Harness

beforeAll(async () => {
  h = await startHarness({ clock })
})
afterAll(() => h.close())

describe('GET /agents', () => {
  it('lists agents active in the last 24 h, highest cost first, with threshold only when set', async () => {
    const key = await h.key(unique('u'))
    await h.post('/config', { agent_id: 'cheap', cost_threshold_usd: 3 }, key)
    await h.post('/events', llmCall('cheap'), key)
    await h.post('/events', llmCall('dear', { output_tokens: 5000 }), key)
    await h.post('/events', llmCall('dear', { output_tokens: 5000 }), key)
    await h.post('/events', { agent_id: 'idle', event_type: 'agent_start' }, key)
    await h.post('/config', { agent_id: 'configured-only' }, key)
    const res = await h.get('/agents', key)
    expect(res.statusCode).toBe(200)
    const dear = 2 * (1000 * 2.5 + 5000 * 10) / 1e6
    expect(res.json()).toEqual({
      agents: [
        { agent_id: 'dear', total_cost_usd: dear, llm_calls: 2, is_paused: false, paused_reason: null, remaining_usd: 10 - dear, alerts_reached: [], ignoring_pause: false, paused_period: null, periods: [] },
        { agent_id: 'cheap', total_cost_usd: LLM_CALL_USD, llm_calls: 1, cost_threshold_usd: 3, is_paused: false, paused_reason: null, remaining_usd: 3 - LLM_CALL_USD, alerts_reached: [], ignoring_pause: false, paused_period: null, periods: [] },
        { agent_id: 'idle', total_cost_usd: 0, llm_calls: 0, is_paused: false, paused_reason: null, remaining_usd: 10, alerts_reached: [], ignoring_pause: false, paused_period: null, periods: [] },
      ],
    })
  })

  it('drops an agent whose last event is older than 24 h', async () => {
    const key = await h.key(unique('u'))
    await h.post('/events', llmCall('old'), key)
    clock.advance(24 * HOUR_MS)
    await h.post('/events', llmCall('new'), key)
    expect((await h.get('/agents', key)).json().agents.map((a: { agent_id: string }) => a.agent_id)).toEqual(['new'])
  })
})

describe('GET /agents/events', () => {
  it('returns the most recent events across agents, newest first, 50 by default', async () => {
    const key = await h.key(unique('u'))
    for (let i = 0; i < 55; i++) {
      clock.advance(1000)
      await h.post('/events', { agent_id: `a${i % 3}`, event_type: 'tool_call', tool_name: `t${i}` }, key)
    }
    const events = (await h.get('/agents/events', key)).json().events
    expect(events).toHaveLength(50)
    expect(events[0].tool_name).toBe('t54')
    expect(events[49].tool_name).toBe('t5')
    expect(Object.keys(events[0]).sort()).toEqual(
      ['agent_id', 'cache_read_tokens', 'cache_write_tokens', 'cost_usd', 'event_id', 'event_type', 'input_tokens', 'metadata', 'model', 'output_tokens', 'price_fallback', 'quantities', 'run_id', 'service_tier', 'timestamp', 'tool_name', 'unpriced_quantities'].sort(),
    )
    const three = (await h.get('/agents/events?limit=3', key)).json().events
    expect(three.map((e: { tool_name: string }) => e.tool_name)).toEqual(['t54', 't53', 't52'])
  })
})

describe('GET /agents/{agent_id}', () => {
  it('gives totals, cost by model, events of the last 24 h and the config', async () => {
    const key = await h.key(unique('u'))
    await h.post('/config', { agent_id: 'a', cost_threshold_usd: 50, auto_resume: true }, key)
    await h.post('/events', llmCall('a'), key)
    await h.post('/events', llmCall('a', { model: 'gpt-4o-mini' }), key)
    await h.post('/events', llmCall('a'), key)
    await h.post('/events', { agent_id: 'a', event_type: 'tool_call', tool_name: 'web' }, key)
    const body = (await h.get('/agents/a', key)).json()
    const mini = (1000 * 0.15 + 500 * 0.6) / 1e6
    expect(body).toMatchObject({
      agent_id: 'a',
      total_cost_usd: 2 * LLM_CALL_USD + mini,
      llm_calls: 3,
      is_paused: false,
      config: { cost_threshold_usd: 50, slack_webhook_url: null, auto_resume: true, alert_at: [0.8] },
      cost_by_model: [
        { model: 'gpt-4o', cost_usd: 2 * LLM_CALL_USD, llm_calls: 2, input_tokens: 2000, output_tokens: 1000 },
        { model: 'gpt-4o-mini', cost_usd: mini, llm_calls: 1, input_tokens: 1000, output_tokens: 500 },
      ],
      next_before: null,
    })
    expect(body.events).toHaveLength(4)
    expect(body.events[0]).toMatchObject({ event_type: 'tool_call', tool_name: 'web' })
  })

  it('pages through events with limit and before', async () => {
    const key = await h.key(unique('u'))
    for (let i = 0; i < 5; i++) {
      clock.advance(1000)
      await h.post('/events', { agent_id: 'a', event_type: 'tool_call', tool_name: `t${i}` }, key)
    }
    const first = (await h.get('/agents/a?limit=2', key)).json()
    expect(first.events.map((e: { tool_name: string }) => e.tool_name)).toEqual(['t4', 't3'])
    const second = (await h.get(`/agents/a?limit=2&before=${encodeURIComponent(first.next_before)}`, key)).json()
    expect(second.events.map((e: { tool_name: string }) => e.tool_name)).toEqual(['t2', 't1'])
    const third = (await h.get(`/agents/a?limit=2&before=${encodeURIComponent(second.next_before)}`, key)).json()
    expect(third.events.map((e: { tool_name: string }) => e.tool_name)).toEqual(['t0'])
    expect(third.next_before).toBeNull()
  })

  it('answers 404 problem+json for an agent with no events and no config', async () => {
    const key = await h.key(unique('u'))
    const res = await h.get('/agents/nobody', key)
    expect(res.statusCode).toBe(404)
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(res.json()).toMatchObject({ status: 404, code: 'agent_not_found' })
  })

  it('answers 200 for an agent with a config but no events, and for one whose events are older than 24 h', async () => {
    const key = await h.key(unique('u'))
    await h.post('/config', { agent_id: 'planned' }, key)
    expect((await h.get('/agents/planned', key)).json()).toMatchObject({ total_cost_usd: 0, llm_calls: 0, events: [], cost_by_model: [] })
    await h.post('/events', llmCall('old'), key)
    clock.advance(25 * HOUR_MS)
    expect((await h.get('/agents/old', key)).json()).toMatchObject({ agent_id: 'old', total_cost_usd: 0, events: [], config: null })
  })

  it('decodes agent ids with reserved characters in the path', async () => {
    const key = await h.key(unique('u'))
    await h.post('/events', llmCall('team/agent #1'), key)
    const res = await h.get(`/agents/${encodeURIComponent('team/agent #1')}`, key)
    expect(res.json()).toMatchObject({ agent_id: 'team/agent #1', llm_calls: 1 })
  })
})

describe('GET /agents/{agent_id}/hourly', () => {
  it('returns exactly N UTC buckets, oldest first, the last the current hour, zero hours included', async () => {
    const key = await h.key(unique('u'))
    clock.set(Date.UTC(2026, 10, 25, 9, 15, 0))
    await h.post('/events', llmCall('a'), key) // 09:00
    clock.set(Date.UTC(2026, 10, 25, 11, 59, 0))
    await h.post('/events', llmCall('a'), key) // 11:00
    await h.post('/events', llmCall('a', { model: 'gpt-4o-mini' }), key)
    const body = (await h.get('/agents/a/hourly?hours=4', key)).json()
    const mini = (1000 * 0.15 + 500 * 0.6) / 1e6
    expect(body).toEqual({
      agent_id: 'a',
      hours: 4,
      buckets: [
        { hour: '2026-11-25T08:00:00.000Z', cost_usd: 0, llm_calls: 0, input_tokens: 0, output_tokens: 0 },
        { hour: '2026-11-25T09:00:00.000Z', cost_usd: LLM_CALL_USD, llm_calls: 1, input_tokens: 1000, output_tokens: 500 },
        { hour: '2026-11-25T10:00:00.000Z', cost_usd: 0, llm_calls: 0, input_tokens: 0, output_tokens: 0 },
        { hour: '2026-11-25T11:00:00.000Z', cost_usd: LLM_CALL_USD + mini, llm_calls: 2, input_tokens: 2000, output_tokens: 1000 },
      ],
    })
  })

  it('defaults to 24 hours', async () => {
    const key = await h.key(unique('u'))
    await h.post('/events', llmCall('a'), key)
    const body = (await h.get('/agents/a/hourly', key)).json()
    expect(body.hours).toBe(24)
    expect(body.buckets).toHaveLength(24)
    expect(body.buckets[23].cost_usd).toBe(LLM_CALL_USD)
    expect(Date.parse(body.buckets[23].hour)).toBe(Math.floor(clock.now() / HOUR_MS) * HOUR_MS)
  })

  it('answers 404 for an unknown agent', async () => {
    const key = await h.key(unique('u'))
    expect((await h.get('/agents/ghost/hourly', key)).statusCode).toBe(404)
  })
})

describe('GET /healthz and /readyz', () => {
  it('answer without a key', async () => {
    expect((await h.get('/healthz', null)).json()).toEqual({ ok: true })
    const ready = (await h.get('/readyz', null)).json()
    expect(ready).toEqual({
      ok: true,
      clickhouse: 'up',
      hot_state: 'up',
      journal: { rows: 0, bytes: 0, oldest_age_seconds: 0, disk_full: false, dead_letters: 0 },
      // Kept forever by default; the oldest event is one of this file's tests'.
      retention: { events_days: null, hourly_days: null, audit_days: null, oldest_event_at: expect.any(String) },
    })
    expect(Date.parse(ready.retention.oldest_event_at)).toBeLessThanOrEqual(Date.now())
  })
})
