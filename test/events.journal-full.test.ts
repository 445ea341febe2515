import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { llmCall, startHarness, unique, withEventsTableGone, type Harness } from './helpers/harness.ts'

// The journal holds ClickHouse's backlog up to a configured bound (JOURNAL_MAX_ROWS).
let small: Harness
beforeAll(async () => {
  small = await startHarness({ env: { JOURNAL_MAX_ROWS: '3', SHIP_INTERVAL_MS: '20' } })
})
afterAll(() => small?.close())

describe('POST /events past the journal bound', () => {
  it('answers 503 journal_full with Retry-After past the journal bound, and counts nothing it refused', async () => {
    const key = await small.key(unique('u'))
    await withEventsTableGone(small, async () => {
      const replies = []
      for (let i = 0; i < 5; i++) replies.push(await small.post('/events', llmCall('a'), key))
      expect(replies.slice(0, 3).map((r) => r.statusCode)).toEqual([200, 200, 200])
      for (const res of replies.slice(3)) {
        expect(res.statusCode).toBe(503)
        expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
        expect(Number(res.headers['retry-after'])).toBeGreaterThan(0)
        expect(res.json()).toMatchObject({ code: 'journal_full', status: 503 })
      }
    })
    const agents = (await small.get('/agents', key)).json().agents
    expect(agents).toEqual([expect.objectContaining({ agent_id: 'a', llm_calls: 3 })])
    expect((await small.post('/events', llmCall('a'), key)).statusCode).toBe(200)
  })
})
