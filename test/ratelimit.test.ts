import { randomUUID } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h.close())

/** Sends `n` valid events at once (bounded: n is at most the limit under test) and returns the statuses. */
async function burst(key: string, n: number, agent = 'a'): Promise<number[]> {
  const replies = await Promise.all(Array.from({ length: n }, () => h.post('/events', llmCall(agent), key)))
  return replies.map((r) => r.statusCode)
}

function expectRateLimited(res: LightMyRequestResponse, max: number) {
  expect(res.statusCode, res.body).toBe(429)
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
  const body = res.json()
  expect(body).toMatchObject({ status: 429, code: 'rate_limited', type: 'urn:burnrate:problem:rate_limited' })
  expect(body.detail).toContain(String(max))
  const retryAfter = String(res.headers['retry-after'])
  expect(retryAfter).toMatch(/^\d+$/)
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1)
  expect(Number(retryAfter)).toBeLessThanOrEqual(60)
}

/** Events and llm_calls stored for the user of `key`, read through a key that is never limited. */
async function stored(readKey: string) {
  const events = (await h.get('/agents/events?limit=1000', readKey)).json().events as { event_id: string }[]
  const agents = (await h.get('/agents', readKey)).json().agents as { agent_id: string; llm_calls: number; total_cost_usd: number }[]
  return { events, llmCalls: agents.reduce((n, a) => n + a.llm_calls, 0) }
}

describe('POST /events is limited per API key', () => {
  it('a key with rateLimit 120: the first 120 requests of the minute are 200, the 121st is 429 with Retry-After', async () => {
    const user = unique('u')
    const key = await h.key(user, { rateLimit: 120 })
    const statuses = await burst(key, 120)
    expect(statuses.filter((s) => s === 200)).toHaveLength(120)

    const event_id = randomUUID()
    expectRateLimited(await h.post('/events', llmCall('a', { event_id }), key), 120)

    // The rejected event was not stored nor counted.
    const reader = await h.key(user)
    const { events, llmCalls } = await stored(reader)
    expect(events).toHaveLength(120)
    expect(llmCalls).toBe(120)
    expect(events.some((e) => e.event_id === event_id)).toBe(false)
  })

  it('stays limited for the rest of the window: every further request is 429 and stores nothing', async () => {
    const user = unique('u')
    const key = await h.key(user, { rateLimit: 3 })
    expect(await burst(key, 3)).toEqual([200, 200, 200])
    for (let i = 0; i < 5; i++) expectRateLimited(await h.post('/events', llmCall('a'), key), 3)
    expect((await stored(await h.key(user))).llmCalls).toBe(3)
  })

  it('a key created with its own limit of 5 answers 429 at the 6th request', async () => {
    const user = unique('u')
    const key = await h.key(user, { rateLimit: 5 })
    const statuses: number[] = []
    for (let i = 0; i < 5; i++) statuses.push((await h.post('/events', llmCall('a'), key)).statusCode)
    expect(statuses).toEqual([200, 200, 200, 200, 200])
    expectRateLimited(await h.post('/events', llmCall('a'), key), 5)
    const { llmCalls } = await stored(await h.key(user))
    expect(llmCalls).toBe(5)
  })

  it('a key created without a limit gets the server default of 120 (EVENTS_RATE_LIMIT)', async () => {
    const user = unique('u')
    expect(h.services.config.rateLimits.events).toBe(120) // the harness leaves EVENTS_RATE_LIMIT unset
    const { record, key } = await h.services.keys.create(user)
    expect(record.rateLimit).toBeNull()
    expect(await burst(key, 120)).toEqual(Array(120).fill(200))
    expectRateLimited(await h.post('/events', llmCall('a'), key), 120)
    expect((await stored(await h.key(user))).llmCalls).toBe(120)
  })

  it('one key\'s exhaustion does not limit another user\'s key', async () => {
    const limited = await h.key(unique('u'), { rateLimit: 2 })
    const otherUser = unique('u')
    const other = await h.key(otherUser, { rateLimit: 2 })
    expect(await burst(limited, 2)).toEqual([200, 200])
    expectRateLimited(await h.post('/events', llmCall('a'), limited), 2)

    const res = await h.post('/events', llmCall('a'), other)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ ok: true, cost_usd: LLM_CALL_USD, total_cost_24h: LLM_CALL_USD })
    expect(await burst(other, 1)).toEqual([200])
    expectRateLimited(await h.post('/events', llmCall('a'), other), 2)
  })

  it('counts per key, not per user: another key of the same user still has its full budget', async () => {
    const user = unique('u')
    const first = await h.key(user, { rateLimit: 2 })
    const second = await h.key(user, { rateLimit: 2 })
    expect(await burst(first, 2)).toEqual([200, 200])
    expectRateLimited(await h.post('/events', llmCall('a'), first), 2)
    expect(await burst(second, 2)).toEqual([200, 200])
    expectRateLimited(await h.post('/events', llmCall('a'), second), 2)
    // The shared agent total holds the four accepted events.
    expect((await h.get('/agents', second)).json().agents[0]).toMatchObject({ llm_calls: 4, total_cost_usd: 4 * LLM_CALL_USD })
  })

  it('counts requests, whatever agent they are for', async () => {
    const key = await h.key(unique('u'), { rateLimit: 2 })
    expect((await h.post('/events', llmCall('a1'), key)).statusCode).toBe(200)
    expect((await h.post('/events', llmCall('a2'), key)).statusCode).toBe(200)
    expectRateLimited(await h.post('/events', llmCall('a3'), key), 2)
  })
})

describe('other endpoints have their own budgets', () => {
  it('reads and config writes still answer 200 with a key whose events budget is exhausted', async () => {
    const key = await h.key(unique('u'), { rateLimit: 2 })
    expect(await burst(key, 2)).toEqual([200, 200])
    expectRateLimited(await h.post('/events', llmCall('a'), key), 2)

    for (let i = 0; i < 5; i++) {
      const agents = await h.get('/agents', key)
      expect(agents.statusCode).toBe(200)
      expect(agents.json().agents).toEqual([expect.objectContaining({ agent_id: 'a', llm_calls: 2 })])
    }
    expect((await h.get('/agents/events', key)).json().events).toHaveLength(2)
    expect((await h.get('/agents/a', key)).statusCode).toBe(200)
    expect((await h.get('/agents/a/hourly', key)).statusCode).toBe(200)
    expect((await h.post('/config', { agent_id: 'a', cost_threshold_usd: 1 }, key)).json()).toEqual({ ok: true })
    expect((await h.post('/config/pause', { agent_id: 'a', is_paused: true }, key)).json()).toEqual({ ok: true, agent_id: 'a', is_paused: true })

    // …and none of those requests gave the events budget anything back.
    expectRateLimited(await h.post('/events', llmCall('a'), key), 2)
  })

  it('reads do not consume the events budget', async () => {
    const key = await h.key(unique('u'), { rateLimit: 3 })
    for (let i = 0; i < 10; i++) expect((await h.get('/agents', key)).statusCode).toBe(200)
    expect(await burst(key, 3)).toEqual([200, 200, 200])
    expectRateLimited(await h.post('/events', llmCall('a'), key), 3)
  })

  it('the config routes share one per-key budget (CONFIG_RATE_LIMIT), separate from events', async () => {
    const max = h.services.config.rateLimits.config
    expect(max).toBe(60)
    const key = await h.key(unique('u'), { rateLimit: 2 })
    // No-op resumes of a running agent: cheap, and they count like any config write.
    for (let i = 0; i < max; i++) {
      const res = await h.post('/config/pause', { agent_id: 'a', is_paused: false }, key)
      expect(res.statusCode, `request ${i + 1}`).toBe(200)
    }
    expectRateLimited(await h.post('/config/pause', { agent_id: 'a', is_paused: true }, key), max)
    expectRateLimited(await h.post('/config', { agent_id: 'a', cost_threshold_usd: 1 }, key), max)
    // The refused pause did not take effect, and the events budget is untouched.
    expect(await burst(key, 2)).toEqual([200, 200])
    expect((await h.get('/agents', key)).json().agents).toMatchObject([{ agent_id: 'a', total_cost_usd: 2 * LLM_CALL_USD, llm_calls: 2, is_paused: false }])
  })

  it('the read routes share one per-key budget (READS_RATE_LIMIT): the request after it is 429 on any read, events still pass', async () => {
    const max = h.services.config.rateLimits.reads
    expect(max).toBe(600)
    const key = await h.key(unique('u'), { rateLimit: 2 })
    const replies = await Promise.all(Array.from({ length: max }, () => h.get('/agents', key)))
    expect(replies.filter((r) => r.statusCode === 200)).toHaveLength(max)
    expectRateLimited(await h.get('/agents', key), max)
    expectRateLimited(await h.get('/agents/events', key), max)
    expectRateLimited(await h.get('/agents/a/hourly', key), max)
    expect(await burst(key, 2)).toEqual([200, 200])
  })
})
