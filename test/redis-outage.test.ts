import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { eventually, LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'
import { agentKeyId, DEFAULT_PARTITIONS, partitionOf, partitionTag } from '../src/storage/redis-keys.ts'
import { startRedis } from './helpers/redis.ts'

let redis: Awaited<ReturnType<typeof startRedis>>
let h: Harness

beforeAll(async () => {
  redis = await startRedis()
  h = await startHarness({ env: { REDIS_URL: redis.url } })
})
afterAll(async () => {
  await h?.close()
  await redis?.stop()
})

describe('a Redis outage', () => {
  it('answers 503 with Retry-After instead of a guess, and recovers by itself when Redis returns', async () => {
    const user = unique('u')
    const key = await h.key(user)
    await h.post('/config', { agent_id: 'a', cost_threshold_usd: 2 * LLM_CALL_USD }, key)
    expect((await h.post('/events', llmCall('a'), key)).json()).toMatchObject({ paused: false, total_cost_24h: LLM_CALL_USD })

    await redis.stop() // it comes back on a new directory: empty, as a Redis whose data was lost
    const during = await h.post('/events', llmCall('a'), key)
    expect(during.statusCode).toBe(503)
    expect(during.headers['retry-after']).toBe('1')
    expect(during.json()).toMatchObject({ code: 'store_unavailable', detail: 'Redis is unavailable; retry with the same event_id' })
    // Straight to the app: the harness's get() would first wait for the shipper, which cannot reach Redis either.
    const read = await h.app.inject({ method: 'GET', url: '/agents', headers: { 'x-api-key': key } })
    expect(read.statusCode).toBe(503) // no pause flag to show: no answer rather than a wrong one
    expect(read.json()).toMatchObject({ code: 'store_unavailable', detail: 'Redis is unavailable; retry' })
    const readyz = () => h.app.inject({ method: 'GET', url: '/readyz' })
    expect((await readyz()).statusCode).toBe(503)

    redis = await startRedis({ port: redis.port })
    await eventually(async () => ((await readyz()).statusCode === 200 ? true : undefined), 10_000)
    // The agent is loaded again from ClickHouse: its first event, and the one stored during
    // the outage if its INSERT landed before the count failed, are counted once each.
    const stored = Number(
      (
        await (
          await h.services.clickhouse.query({
            query: "SELECT count() AS n FROM events WHERE user_id = {u:String} AND agent_id = 'a'",
            query_params: { u: user },
            format: 'JSONEachRow',
          })
        ).json<{ n: string }>()
      )[0]!.n,
    )
    const after = (await h.post('/events', llmCall('a'), key)).json()
    expect(after.total_cost_24h).toBeCloseTo((stored + 1) * LLM_CALL_USD, 12)
    expect(after.paused).toBe(stored + 1 > 2)
  })
})

describe('a defect is not an outage', () => {
  it('answers 500, never a retry, when a script meets a key it cannot use', async () => {
    const key = await h.key(unique('u'))
    expect((await h.post('/events', llmCall('wrongtype'), key)).statusCode).toBe(200)
    // Another program wrote a string where burnrate keeps the agent's hash: every script on it fails.
    const userId = (await h.services.keys.verify(key))!.userId
    const keys = [`br:${partitionTag(partitionOf(userId, DEFAULT_PARTITIONS))}:hs:${agentKeyId(userId, 'wrongtype')}:s`]
    expect(await redis.redis.exists(keys[0]!)).toBe(1)
    await redis.redis.set(keys[0]!, 'not a hash')
    const res = await h.post('/events', llmCall('wrongtype'), key)
    expect(res.statusCode).toBe(500)
    expect(res.headers['retry-after']).toBeUndefined()
    expect(res.json()).toMatchObject({ code: 'internal' })
    await redis.redis.del(keys[0]!)
  })
})
