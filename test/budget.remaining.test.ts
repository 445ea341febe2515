import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * What is left of a budget, and when it runs out at the last hour's rate,
 * through the API (the projection's rule is tested in test/hot-state/projection.test.ts and
 * against both hot states in the contract suite).
 */
const HOUR_MS = 3_600_000
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
let h: Harness

beforeAll(async () => {
  h = await startHarness({ clock })
})
afterAll(() => h.close())

describe('remaining_usd and projected_exhaustion_at', () => {
  it('answer every POST /events and GET /agents/{id}, and GET /agents lists what is left', async () => {
    const key = await h.key(unique('u'))
    await h.post('/config', { agent_id: 'a', cost_threshold_usd: 0.03 }, key)
    // 0.0075 USD now: the last hour's rate is 0.0075 USD/h, 0.0225 to go takes 3 h.
    const first = (await h.post('/events', llmCall('a'), key)).json()
    expect(first.remaining_usd).toBeCloseTo(0.03 - LLM_CALL_USD, 12)
    expect(first.projected_exhaustion_at).toBe(new Date(clock.now() + 3 * HOUR_MS).toISOString())
    clock.advance(30 * 60_000)
    // Two calls in the last hour: 0.015 USD/h, 0.015 to go takes 1 h.
    const second = (await h.post('/events', llmCall('a'), key)).json()
    expect(second).toMatchObject({ total_cost_24h: 2 * LLM_CALL_USD, projected_exhaustion_at: new Date(clock.now() + HOUR_MS).toISOString() })
    expect(second.remaining_usd).toBeCloseTo(0.03 - 2 * LLM_CALL_USD, 12)
    const detail = (await h.get('/agents/a', key)).json()
    expect(detail).toMatchObject({ projected_exhaustion_at: second.projected_exhaustion_at, paused_reason: null })
    expect(detail.remaining_usd).toBeCloseTo(0.03 - 2 * LLM_CALL_USD, 12)
    // An hour and a half later nothing was spent in the last hour: no projection.
    clock.advance(90 * 60_000)
    expect((await h.get('/agents/a', key)).json().projected_exhaustion_at).toBeNull()
    // Over budget: a negative remainder, exhausted now, and the listing says why it is paused.
    clock.advance(60_000)
    await h.post('/events', llmCall('a', { output_tokens: 5000 }), key)
    const over = (await h.post('/events', llmCall('a'), key)).json()
    expect(over.paused).toBe(true)
    expect(over.remaining_usd).toBeLessThan(0)
    expect(over.projected_exhaustion_at).toBe(new Date(clock.now()).toISOString())
    const [row] = (await h.get('/agents', key)).json().agents
    expect(row).toMatchObject({ agent_id: 'a', is_paused: true, paused_reason: 'budget', remaining_usd: over.remaining_usd })
  })
})
