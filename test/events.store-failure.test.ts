import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { eventually, LLM_CALL_USD, llmCall, startHarness, unique, withEventsTableGone, type Harness } from './helpers/harness.ts'
import { deploymentModes } from './helpers/redis.ts'

// ClickHouse is not on the path of POST /events. When it refuses, events are
// answered from the journal, which holds them until ClickHouse takes them again: the
// segment log embedded, this instance's Redis streams with REDIS_URL.
const { modes, stop } = deploymentModes()
afterAll(stop)

describe.each(modes)('POST /events while ClickHouse refuses to store (%s)', (_mode, modeEnv) => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ env: { SHIP_INTERVAL_MS: '20', ...(await modeEnv()) } })
  })
  afterAll(() => h?.close())

  it('goes on answering 200 from the journal, and the backlog drains into ClickHouse once it accepts again', async () => {
    const key = await h.key(unique('u'))
    const ids = Array.from({ length: 20 }, () => randomUUID())
    const journal = h.services.journal
    // The agent is in the hot state before the outage (with Redis, one not there yet is
    // loaded from ClickHouse first: docs/operations.md, "While ClickHouse is away").
    const start = randomUUID()
    expect((await h.post('/events', { agent_id: 'a', event_type: 'agent_start', event_id: start }, key)).statusCode).toBe(200)
    await withEventsTableGone(h, async () => {
      const replies = await Promise.all(ids.map((event_id) => h.post('/events', llmCall('a', { event_id }), key)))
      expect(replies.map((r) => r.statusCode)).toEqual(Array(20).fill(200))
      expect(replies.at(-1)!.json().total_cost_24h).toBeCloseTo(20 * LLM_CALL_USD, 12)
      // A client retry during the outage is answered as a duplicate, and counted once.
      const again = await h.post('/events', llmCall('a', { event_id: ids[0] }), key)
      expect(again.json()).toMatchObject({ duplicate: true, cost_usd: LLM_CALL_USD })
      // /readyz, the log and the metrics read the same backlog.
      await eventually(() => (journal.backlog().rows >= 20 ? true : undefined))
      const ready = await h.app.inject({ method: 'GET', url: '/readyz' })
      expect(ready.json()).toMatchObject({ ok: true, journal: { rows: journal.backlog().rows } })
      // A read of the missing table is a defect of the deployment, not an outage: 500, no retry.
      const read = await h.app.inject({ method: 'GET', url: '/agents/events', headers: { 'x-api-key': key } })
      expect(read.statusCode).toBe(500)
      expect(read.headers['retry-after']).toBeUndefined()
    })
    await h.flush()
    expect(journal.backlog().rows).toBe(0)
    const events = (await h.get('/agents/events?limit=1000', key)).json().events
    expect(events.map((e: { event_id: string }) => e.event_id).sort()).toEqual([start, ...ids].sort())
    const agents = (await h.get('/agents', key)).json().agents
    expect(agents).toEqual([expect.objectContaining({ agent_id: 'a', llm_calls: 20 })])
  })
})
