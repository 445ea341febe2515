import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h.close())

/** Takes the events table away for real, so ClickHouse refuses the insert. */
async function withEventsTableGone<T>(fn: () => Promise<T>): Promise<T> {
  await h.services.clickhouse.command({ query: 'RENAME TABLE events TO events_offline' })
  try {
    return await fn()
  } finally {
    await h.services.clickhouse.command({ query: 'RENAME TABLE events_offline TO events' })
  }
}

describe('POST /events when ClickHouse cannot store', () => {
  it('answers 503 problem+json with Retry-After to every event of the batch and counts none', async () => {
    const key = await h.key(unique('u'))
    await h.post('/events', llmCall('a'), key)
    const ids = Array.from({ length: 5 }, () => randomUUID())
    const failed = await withEventsTableGone(() => Promise.all(ids.map((event_id) => h.post('/events', llmCall('a', { event_id }), key))))
    for (const res of failed) {
      expect(res.statusCode).toBe(503)
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
      expect(res.headers['retry-after']).toBe('1')
      expect(res.json()).toMatchObject({ code: 'store_unavailable', status: 503 })
    }
    const { snapshot } = await h.services.hotState.get({ userId: (await h.services.keys.verify(key))!.userId, agentId: 'a' }, Date.now())
    expect(snapshot.totalNano).toBe(LLM_CALL_USD * 1e9)

    // The client retries the same ids once the store is back: each stored and counted once.
    const retried = await Promise.all(ids.map((event_id) => h.post('/events', llmCall('a', { event_id }), key)))
    expect(retried.map((r) => r.statusCode)).toEqual([200, 200, 200, 200, 200])
    expect(retried.some((r) => r.json().duplicate)).toBe(false)
    const agents = (await h.get('/agents', key)).json().agents
    expect(agents).toEqual([expect.objectContaining({ agent_id: 'a', llm_calls: 6 })])
    expect(agents[0].total_cost_usd).toBeCloseTo(6 * LLM_CALL_USD, 12)
  })
})
