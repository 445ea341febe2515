import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LLM_CALL_USD, llmCall, startTwoInstances, unique, type Harness } from './helpers/harness.ts'
import type { Receiver } from './helpers/receiver.ts'
import { startRedis } from './helpers/redis.ts'

/**
 * Period budgets with the shared Redis hot state: two instances racing one crossing pause
 * once, with one message and one audit record, and agree on every period; a Redis that lost
 * everything loads the periods again from ClickHouse, exactly.
 */
let redis: Awaited<ReturnType<typeof startRedis>>
let a: Harness
let b: Harness
let receiver: Receiver
let instances: Awaited<ReturnType<typeof startTwoInstances>> | undefined

beforeAll(async () => {
  redis = await startRedis()
  instances = await startTwoInstances({ REDIS_URL: redis.url, CONFIG_RATE_LIMIT: '100000' })
  ;({ a, b, receiver } = instances)
})
afterAll(async () => {
  await instances?.close()
  await redis?.stop()
})

const usd = (n: number) => Math.round(n * LLM_CALL_USD * 1e9) / 1e9

describe('period budgets with REDIS_URL', () => {
  it('two instances racing one crossing pause once, with one message, and agree on the periods', async () => {
    const user = unique('u')
    const key = await a.key(user)
    // A rolling 30 days (no calendar boundary can fall within the test): over 0.05 with the seventh call.
    const config = await a.post('/config', { agent_id: 'race', period_budgets: [{ window_days: 30, limit_usd: 0.05 }, { period: 'week', limit_usd: 100 }], slack_webhook_url: receiver.url, alert_at: [] }, key)
    expect(config.statusCode, config.body).toBe(200)
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).post('/events', llmCall('race'), key)))
    const bodies = answers.map((r) => r.json())
    expect(bodies.every((r) => r.ok)).toBe(true)
    // Each answer counts the events before it: the seventh takes 0.0525 over 0.05, and it and the 13 after it are told of the pause.
    expect(bodies.filter((r) => r.paused && r.paused_reason === 'period_budget' && r.paused_period === 'window_30d')).toHaveLength(14)
    for (const h of [a, b]) {
      const detail = (await h.get('/agents/race', key)).json()
      expect(detail).toMatchObject({ is_paused: true, paused_reason: 'period_budget', paused_period: 'window_30d' })
      expect(detail.periods.map((p: { period: string; spent_usd: number }) => [p.period, p.spent_usd])).toEqual([
        ['window_30d', usd(20)],
        ['week', usd(20)],
      ])
    }
    await Promise.all([a.services.webhooks.drain(), b.services.webhooks.drain()])
    const messages = receiver.messages.filter((m) => m.text.includes('`race`') && m.text.includes('paused'))
    expect(messages.map((m) => m.text)).toEqual([expect.stringContaining('its spend of the last 30 days, $0.0525, went over its budget of $0.05')])
    const pauses = (await a.get('/audit?agent_id=race&limit=50', key)).json().records.filter((r: { action: string }) => r.action === 'pause')
    expect(pauses).toHaveLength(1)
    expect(pauses[0]).toMatchObject({ reason: 'period_budget:window_30d', actor: 'system' })
  })

  it('loads every period again from ClickHouse when Redis has lost everything', async () => {
    const user = unique('u')
    const key = await a.key(user)
    await a.post('/config', { agent_id: 'lost', period_budgets: [{ period: 'month', limit_usd: 10 }, { window_days: 7, limit_usd: 10 }] }, key)
    await a.post('/config/fleet', { cost_threshold_usd: 100, period_budgets: [{ window_days: 30, limit_usd: 10 }] }, key)
    for (let i = 0; i < 5; i++) await (i % 2 === 0 ? a : b).post('/events', llmCall(i < 3 ? 'lost' : 'other'), key)
    // The projections move with the real clock: the rest of each period must be as it was.
    const still = (periods: Array<{ spent_usd: number; projected_exhaustion_at: string | null }>) => periods.map(({ projected_exhaustion_at: _, ...p }) => p)
    const before = { agent: still((await a.get('/agents/lost', key)).json().periods), fleet: still((await b.get('/fleet', key)).json().periods) }
    expect(before.agent.map((p: { spent_usd: number }) => p.spent_usd)).toEqual([usd(3), usd(3)])
    expect(before.fleet.map((p: { spent_usd: number }) => p.spent_usd)).toEqual([usd(5)])
    await Promise.all([a.flush(), b.flush()])
    await redis.redis.flushall()
    expect(still((await b.get('/agents/lost', key)).json().periods)).toEqual(before.agent)
    expect(still((await a.get('/fleet', key)).json().periods)).toEqual(before.fleet)
    // Counting goes on from there.
    expect((await a.post('/events', llmCall('lost'), key)).json().periods.map((p: { spent_usd: number }) => p.spent_usd)).toEqual([usd(4), usd(4)])
  })
})
