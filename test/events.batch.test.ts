import { randomUUID } from 'node:crypto'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'
import { startRedis } from './helpers/redis.ts'

/**
 * POST /events/batch, embedded and with REDIS_URL (where a batch's events go to Redis in
 * the group commit's calls): each event answered in its place, the bad ones refused alone,
 * retries counting nothing twice, the key's budget counted per event, one user's batch
 * never touching another's.
 */
let redis: Awaited<ReturnType<typeof startRedis>>
const modes: Array<[string, () => Promise<Harness>]> = [
  ['embedded', () => startHarness()],
  [
    'REDIS_URL',
    async () => {
      redis = await startRedis()
      return startHarness({ env: { REDIS_URL: redis.url } })
    },
  ],
]

describe.each(modes)('POST /events/batch (%s)', (_mode, start) => {
  let h: Harness
  beforeAll(async () => {
    h = await start()
  })
  afterAll(async () => {
    await h.close()
    await redis?.stop()
  })

  const batch = (events: unknown[], key: string) => h.post('/events/batch', { events }, key)
  const llmCalls = async (key: string) => ((await h.get('/agents', key)).json().agents as Array<{ llm_calls: number }>).reduce((n, a) => n + a.llm_calls, 0)

  it('answers each event in its place: the good ones as POST /events does, a bad one with its index and field, and stores only the good', async () => {
    const key = await h.key(unique('u'))
    const ids = [randomUUID(), randomUUID(), randomUUID()]
    const res = await batch(
      [llmCall('a', { event_id: ids[0] }), { agent_id: 'a', event_type: 'llm_call', event_id: ids[1] }, llmCall('b', { event_id: ids[2] }), 'not an event', { agent_id: 'a', event_type: 'tool_call', tool_name: 'search' }],
      key,
    )
    expect(res.statusCode).toBe(200)
    const { ok, results } = res.json()
    expect(ok).toBe(true)
    expect(results).toHaveLength(5)
    expect(results[0]).toMatchObject({ ok: true, event_id: ids[0], cost_usd: LLM_CALL_USD, paused: false, total_cost_24h: LLM_CALL_USD })
    expect(results[1]).toMatchObject({ ok: false, index: 1, status: 400, code: 'invalid_body', errors: [{ field: 'events.1.model', message: 'is required when event_type is llm_call' }] })
    expect(results[2]).toMatchObject({ ok: true, event_id: ids[2], cost_usd: LLM_CALL_USD })
    expect(results[3]).toMatchObject({ ok: false, index: 3, status: 400, errors: [{ field: 'events.3' }] })
    expect(results[4]).toMatchObject({ ok: true, cost_usd: 0 })
    expect(await llmCalls(key)).toBe(2)
    const stored = (await h.get('/agents/events?limit=100', key)).json().events as Array<{ event_id: string }>
    expect(stored.map((e) => e.event_id).sort()).toEqual([ids[0]!, ids[2]!, results[4].event_id].sort())
  })

  it('counts nothing twice when a whole batch is sent again: each event is a repeat of itself', async () => {
    const key = await h.key(unique('u'))
    const events = Array.from({ length: 40 }, (_, i) => llmCall(`agent-${i % 4}`, { event_id: randomUUID() }))
    const first = (await batch(events, key)).json().results as Array<{ ok: boolean; duplicate?: boolean }>
    expect(first.every((r) => r.ok && !r.duplicate)).toBe(true)
    const again = (await batch(events, key)).json().results as Array<{ ok: boolean; duplicate?: boolean; cost_usd: number }>
    expect(again.every((r) => r.ok && r.duplicate === true && r.cost_usd === LLM_CALL_USD)).toBe(true)
    expect(await llmCalls(key)).toBe(40)
    // Events repeated within one batch count once too.
    const twice = llmCall('agent-0', { event_id: randomUUID() })
    const inOne = (await batch([twice, twice], key)).json().results
    expect(inOne.map((r: { duplicate?: boolean }) => r.duplicate ?? false)).toEqual([false, true])
    expect(await llmCalls(key)).toBe(41)
  })

  it("counts each valid event against the key's budget: the ones past it are refused in their place, with Retry-After", async () => {
    const key = await h.key(unique('u'), { rateLimit: 5 })
    const res = await batch([...Array.from({ length: 4 }, () => llmCall('a')), { agent_id: 'a' }, ...Array.from({ length: 3 }, () => llmCall('a'))], key)
    const results = res.json().results as Array<{ ok: boolean; status?: number; code?: string }>
    expect(results.map((r) => (r.ok ? 200 : r.status))).toEqual([200, 200, 200, 200, 400, 200, 429, 429])
    expect(results[6]).toMatchObject({ code: 'rate_limited', index: 6 })
    expect(res.headers['x-ratelimit-limit']).toBe('5')
    expect(res.headers['x-ratelimit-remaining']).toBe('0')
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1)
    // The same budget as POST /events: it is spent.
    expect((await h.post('/events', llmCall('a'), key)).statusCode).toBe(429)
    expect(await llmCalls(await h.key(unique('u')))).toBe(0)
  })

  it('refuses what is not a batch, or too large a one, and stores nothing', async () => {
    const key = await h.key(unique('u'))
    for (const body of [{ events: [] }, { events: 'x' }, {}, { events: [llmCall('a')], extra: 1 }]) {
      const res = await h.post('/events/batch', body, key)
      expect(res.statusCode, JSON.stringify(body)).toBe(400)
      expect(res.json()).toMatchObject({ code: 'invalid_body' })
    }
    const many = await batch(Array.from({ length: 1001 }, () => llmCall('a')), key)
    expect(many.statusCode).toBe(400)
    expect(many.json().errors).toEqual([{ field: 'events', message: 'must hold at most 1000 events' }])
    const heavy = await batch(Array.from({ length: 100 }, () => llmCall('a', { metadata: { blob: 'x'.repeat(15_000) } })).concat(Array.from({ length: 200 }, () => llmCall('a', { metadata: { blob: 'y'.repeat(15_000) } }))), key)
    expect(heavy.statusCode).toBe(413)
    expect(await llmCalls(key)).toBe(0)
  })

  it('refuses in its place an event larger than POST /events takes, and stores the others', async () => {
    const key = await h.key(unique('u'))
    const big = llmCall('a', { metadata: { blob: 'x'.repeat(70_000) } })
    expect((await h.post('/events', big, key)).statusCode).toBe(413)
    const res = await batch([llmCall('a'), big, llmCall('a')], key)
    expect(res.statusCode).toBe(200)
    const { results } = res.json()
    expect(results.map((r: { ok: boolean }) => r.ok)).toEqual([true, false, true])
    expect(results[1]).toMatchObject({ index: 1, status: 413, code: 'payload_too_large' })
    expect(await llmCalls(key)).toBe(2)
  })

  it("keeps users apart: another user's hold is refused in place, and each user sees only their own events", async () => {
    const alice = await h.key(unique('u'))
    const bob = await h.key(unique('u'))
    const hold = (await h.post('/holds', { agent_id: 'x', model: 'gpt-4o', input_tokens: 10, max_output_tokens: 10 }, alice)).json().hold_id as string
    const results = (await batch([llmCall('y', { hold_id: hold }), llmCall('x', { hold_id: hold })], alice)).json().results
    expect(results[0]).toMatchObject({ ok: false, index: 0, status: 404, code: 'hold_not_found' })
    expect(results[1]).toMatchObject({ ok: true })
    // Bob names Alice's hold: to him it is unknown, and his event counts as his.
    expect((await batch([llmCall('x', { hold_id: hold })], bob)).json().results[0]).toMatchObject({ ok: true, total_cost_24h: LLM_CALL_USD })
    expect(await llmCalls(alice)).toBe(1)
    expect(await llmCalls(bob)).toBe(1)
  })

  it('answers any batch of valid and invalid events alike: an answer per event, the valid ones counted (property)', async () => {
    const key = await h.key(unique('u'))
    let counted = 0
    const event = fc.oneof(
      fc.record({ agent: fc.constantFrom('a', 'b', 'c'), tokens: fc.integer({ min: 0, max: 2000 }) }).map((e) => ({ valid: true, body: llmCall(e.agent, { input_tokens: e.tokens, event_id: randomUUID() }) })),
      fc.oneof(fc.constant({ agent_id: '' }), fc.constant({ event_type: 'llm_call' }), fc.constant(null), fc.integer(), fc.constant({ agent_id: 'a', event_type: 'nope' })).map((body) => ({ valid: false, body })),
    )
    await fc.assert(
      fc.asyncProperty(fc.array(event, { minLength: 1, maxLength: 30 }), async (events) => {
        const res = await batch(
          events.map((e) => e.body),
          key,
        )
        expect(res.statusCode).toBe(200)
        const results = res.json().results as Array<{ ok: boolean; index?: number; status?: number }>
        expect(results.map((r) => r.ok)).toEqual(events.map((e) => e.valid))
        results.forEach((r, i) => {
          if (!r.ok) expect(r).toMatchObject({ index: i, status: 400 })
        })
        counted += events.filter((e) => e.valid).length
      }),
      { numRuns: 30 },
    )
    expect(await llmCalls(key)).toBe(counted)
  })
})
