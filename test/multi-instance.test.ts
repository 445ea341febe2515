import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKey } from '../src/auth/api-keys.ts'
import { eventually, LLM_CALL_USD, llmCall, startTwoInstances, unique, type Harness } from './helpers/harness.ts'
import type { Receiver } from './helpers/receiver.ts'
import { startRedis } from './helpers/redis.ts'
import { toChDateTime64us } from '../src/storage/clickhouse.ts'
import type { EventRow } from '../src/storage/rows.ts'
import { RedisHotState } from '../src/hot-state/redis.ts'
import { FLEET } from '../src/hot-state/agent-ref.ts'
import { agentLoader } from '../src/ingest/rebuild.ts'
import { RedisJournal } from '../src/journal/redis-streams.ts'
import { agentKeyId, DEFAULT_PARTITIONS } from '../src/storage/redis-keys.ts'

/**
 * Two burnrate instances on one Redis and one ClickHouse, as behind a load balancer. chDB
 * lets one process open a data path, so both instances run in this process on one engine
 * (separate apps, Redis clients, batchers, caches and reservation tokens); the process-level
 * crash tests are in redis-restart.test.ts.
 */
let redis: Awaited<ReturnType<typeof startRedis>>
let a: Harness
let b: Harness
let receiver: Receiver
let instances: Awaited<ReturnType<typeof startTwoInstances>> | undefined

beforeAll(async () => {
  redis = await startRedis()
  instances = await startTwoInstances({ REDIS_URL: redis.url, JOURNAL_LEASE_MS: '900' })
  ;({ a, b, receiver } = instances)
})
afterAll(async () => {
  await instances?.close()
  await redis?.stop()
})

/** The row an instance stores for an llm_call of LLM_CALL_USD received at `atMs`. */
function row(userId: string, agentId: string, eventId: string, atMs: number): EventRow {
  return {
    user_id: userId,
    agent_id: agentId,
    timestamp: toChDateTime64us(atMs * 1000),
    event_id: eventId,
    event_type: 'llm_call',
    model: 'gpt-4o',
    input_tokens: 1000,
    output_tokens: 500,
    cache_read_tokens: 0,
    cache_write_tokens: 0,
    tool_name: null,
    metadata: '',
    cost_nano: LLM_CALL_USD * 1e9,
    price_fallback: false,
  }
}

/** Rows stored in ClickHouse once both instances shipped what they hold. */
async function storedRows(agentId: string, userId: string): Promise<number> {
  await Promise.all([a.flush(), b.flush()])
  const rs = await a.services.clickhouse.query({
    query: 'SELECT count() AS n FROM events WHERE user_id = {u:String} AND agent_id = {a:String}',
    query_params: { u: userId, a: agentId },
    format: 'JSONEachRow',
  })
  return Number((await rs.json<{ n: string }>())[0]!.n)
}

/** Pauses of a reason stored for the agent (the fleet: FLEET, ''), once both instances shipped. */
async function pausesStored(userId: string, agentId: string, reason: 'budget' | 'velocity' = 'budget'): Promise<number> {
  await Promise.all([a.flush(), b.flush()])
  const rs = await a.services.clickhouse.query({
    query: 'SELECT count() AS n FROM pause_transitions WHERE user_id = {u:String} AND agent_id = {a:String} AND reason = {r:String}',
    query_params: { u: userId, a: agentId, r: reason },
    format: 'JSONEachRow',
  })
  return Number((await rs.json<{ n: string }>())[0]!.n)
}

describe('two instances, one Redis', () => {
  it('count concurrent events of one agent exactly, pause it once, alert once per level, and send one webhook each', async () => {
    const user = unique('u')
    const key = await a.key(user)
    const agent = unique('agent')
    // 40 events of 0.0075 = 0.30 USD; the threshold 0.1 is crossed once, somewhere, and so
    // are its alert levels 0.5 and 0.8 (0.05 and 0.08 USD: the 7th and the 11th event).
    await a.post('/config', { agent_id: agent, cost_threshold_usd: 0.1, slack_webhook_url: receiver.url, alert_at: [0.5, 0.8] }, key)
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).post('/events', llmCall(agent), key)))
    expect(replies.map((r) => r.statusCode)).toEqual(Array(40).fill(200))
    const totals = replies.map((r) => r.json().total_cost_24h as number).sort((x, y) => x - y)
    // No lost update: every event saw a distinct running total, the last one all 40.
    expect(new Set(totals).size).toBe(40)
    expect(totals.at(-1)).toBeCloseTo(40 * LLM_CALL_USD, 12)
    expect(replies.filter((r) => r.json().paused)).toHaveLength(40 - 13) // 13 * 0.0075 = 0.0975 <= 0.1

    // Each level fired by exactly one answer, whichever instance took it, at its own total.
    const fired = replies.map((r) => r.json()).filter((r) => r.alerts.length > 0)
    expect(fired.map((r) => r.alerts)).toEqual(expect.arrayContaining([[0.5], [0.8]]))
    expect(fired).toHaveLength(2)
    expect(fired.find((r) => r.alerts[0] === 0.5).total_cost_24h).toBeCloseTo(7 * LLM_CALL_USD, 12)
    expect(fired.find((r) => r.alerts[0] === 0.8).total_cost_24h).toBeCloseTo(11 * LLM_CALL_USD, 12)

    await Promise.all([a.services.webhooks.drain(), b.services.webhooks.drain()])
    const mine = receiver.messages.filter((m) => m.text.includes(agent))
    expect(mine.filter((m) => m.text.includes('paused agent'))).toHaveLength(1)
    expect(mine.filter((m) => m.text.includes('reached 50 %'))).toHaveLength(1)
    expect(mine.filter((m) => m.text.includes('reached 80 %'))).toHaveLength(1)
    expect(mine).toHaveLength(3)
    expect(await pausesStored(user, agent)).toBe(1)
    expect(await storedRows(agent, user)).toBe(40)
  })

  it('stop a run over its run budget once across both, with one message and one record, its other runs going on', async () => {
    const user = unique('u')
    const key = await a.key(user)
    const agent = unique('runner')
    // 40 calls of 0.0075 USD in one run, half through each instance: 13 fit in 0.1 USD.
    await a.post('/config', { agent_id: agent, cost_threshold_usd: 100, run_budget_usd: 0.1, alert_at: [], slack_webhook_url: receiver.url }, key)
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).post('/events', llmCall(agent, { run_id: 'run-1' }), key)))
    expect(replies.map((r) => r.statusCode)).toEqual(Array(40).fill(200))
    const stopped = replies.map((r) => r.json()).filter((r) => r.paused)
    expect(stopped).toHaveLength(40 - 13)
    expect(new Set(stopped.map((r) => r.paused_reason))).toEqual(new Set(['run_budget']))
    expect((await b.post('/events', llmCall(agent, { run_id: 'run-2' }), key)).json()).toMatchObject({ paused: false, paused_reason: null })
    await Promise.all([a.services.webhooks.drain(), b.services.webhooks.drain()])
    expect(receiver.messages.filter((m) => m.text.includes(agent)).map((m) => m.text)).toEqual([expect.stringContaining('run `run-1` of agent')])
    await Promise.all([a.flush(), b.flush()])
    const records = (await a.get(`/audit?agent_id=${agent}`, key)).json().records as Array<{ action: string; details: unknown }>
    expect(records.filter((r) => r.action === 'run_paused')).toEqual([
      expect.objectContaining({ reason: 'run_budget', actor: 'system', details: { run_id: 'run-1', spent_usd: 14 * LLM_CALL_USD, held_usd: 0, run_budget_usd: 0.1 } }),
    ])
    // The agent's state lost from Redis (shipped already): loaded again from ClickHouse with its runs, exactly.
    const lost = await redis.redis.keys(`br:*:hs:${agentKeyId(user, agent)}:*`)
    expect(lost.length).toBeGreaterThan(0)
    await redis.redis.del(...lost)
    expect((await a.post('/events', llmCall(agent, { run_id: 'run-1' }), key)).json()).toMatchObject({ paused: true, paused_reason: 'run_budget' })
    // run-2 spent one call (0.0075 USD): room for 0.0925 USD, 37,000 input tokens and not one more.
    const hold = (tokens: number) => b.post('/holds', { agent_id: agent, run_id: 'run-2', model: 'gpt-4o', input_tokens: tokens, max_output_tokens: 0 }, key)
    expect((await hold(37_001)).json()).toMatchObject({ reason: 'run_budget', paused: false })
    expect((await hold(37_000)).json()).toMatchObject({ reason: null })
  })

  it('count 40 concurrent events of 20 agents into their fleet exactly, pause it once, alert once, with one webhook each', async () => {
    const user = unique('u')
    const key = await a.key(user)
    await a.post('/config/fleet', { cost_threshold_usd: 0.1, chat_webhook_url: receiver.url, alert_at: [0.5] }, key)
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).post('/events', llmCall(`agent-${i % 20}`), key)))
    expect(replies.map((r) => r.statusCode)).toEqual(Array(40).fill(200))
    const answers = replies.map((r) => r.json())
    // 13 * 0.0075 = 0.0975 <= 0.1: the 14th event, whichever it is, pauses the fleet and every agent of it.
    expect(answers.filter((r) => r.paused)).toHaveLength(40 - 13)
    expect(new Set(answers.filter((r) => r.paused).map((r) => r.paused_reason))).toEqual(new Set(['fleet_budget']))
    expect(answers.filter((r) => r.fleet_alerts.length > 0).map((r) => r.fleet_alerts)).toEqual([[0.5]])
    expect((await b.get('/fleet', key)).json()).toMatchObject({ is_paused: true, paused_reason: 'fleet_budget', llm_calls: 40 })
    expect((await a.get('/fleet', key)).json().total_cost_usd).toBeCloseTo(40 * LLM_CALL_USD, 12)

    await Promise.all([a.services.webhooks.drain(), b.services.webhooks.drain()])
    const mine = receiver.messages.filter((m) => m.text.includes(user)).map((m) => m.text)
    expect(mine.filter((m) => m.includes('paused every agent'))).toHaveLength(1)
    expect(mine.filter((m) => m.includes('reached 50 %'))).toHaveLength(1)
    expect(mine).toHaveLength(2)
    expect(await pausesStored(user, FLEET)).toBe(1)
  })

  it('pause a burst of 40 concurrent events over its velocity limit once, whichever instance takes it', async () => {
    const user = unique('u')
    const key = await a.key(user)
    const agent = unique('burst')
    await a.post('/config', { agent_id: agent, cost_threshold_usd: 100, velocity_limit_usd: 0.1, velocity_window_minutes: 5, alert_at: [], slack_webhook_url: receiver.url }, key)
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).post('/events', llmCall(agent), key)))
    const answers = replies.map((r) => r.json())
    // 13 * 0.0075 = 0.0975 <= 0.1: the 14th, whichever it is, goes over the limit.
    expect(answers.filter((r) => r.paused)).toHaveLength(40 - 13)
    expect(new Set(answers.filter((r) => r.paused).map((r) => r.paused_reason))).toEqual(new Set(['velocity']))
    await Promise.all([a.services.webhooks.drain(), b.services.webhooks.drain()])
    expect(receiver.messages.filter((m) => m.text.includes(agent) && m.text.includes('per 5 minutes'))).toHaveLength(1)
    expect(await pausesStored(user, agent, 'velocity')).toBe(1)
  })

  it('grant 50 concurrent holds of one agent no more than its budget allows, and settle each once under retries through both', async () => {
    const user = unique('u')
    const key = await a.key(user)
    const agent = unique('guarded')
    await a.post('/config', { agent_id: agent, cost_threshold_usd: 0.1, alert_at: [] }, key)
    await a.post('/events', llmCall(agent), key) // 0.0075 spent: 0.0925 left
    // Worst cases of 0.0125 and 0.0225 (1000 and 2000 output tokens at most), alternating.
    const asks = Array.from({ length: 50 }, (_, i) => ({ agent_id: agent, model: 'gpt-4o', input_tokens: 1000, max_output_tokens: 1000 * (1 + (i % 2)) }))
    const answers = (await Promise.all(asks.map((body, i) => (i % 2 ? a : b).post('/holds', body, key)))).map((r) => r.json())
    const granted = answers.filter((r) => r.allowed)
    const heldUsd = granted.reduce((sum, r) => sum + r.held_usd, 0)
    expect(heldUsd).toBeLessThanOrEqual(0.0925 + 1e-9)
    // Refused only when neither worst case had room: what is left is under the smaller one.
    expect(0.0925 - heldUsd).toBeLessThan(0.0125)
    expect(answers.filter((r) => !r.allowed).every((r) => r.reason === 'budget')).toBe(true)
    expect((await b.get(`/agents/${agent}`, key)).json().held_usd).toBeCloseTo(heldUsd, 9)
    // Each granted call reports through both instances at once, twice: one settlement each.
    const calls = granted.map((r) => llmCall(agent, { event_id: randomUUID(), hold_id: r.hold_id }))
    await Promise.all(calls.flatMap((call) => [a.post('/events', call, key), b.post('/events', call, key), a.post('/events', call, key)]))
    const after = (await a.get(`/agents/${agent}`, key)).json()
    expect(after.held_usd).toBe(0)
    expect(after.total_cost_usd).toBeCloseTo((1 + granted.length) * LLM_CALL_USD, 9)
    expect(await storedRows(agent, user)).toBe(1 + granted.length)
  })

  it('show a pause set through one instance on the other', async () => {
    const key = await a.key(unique('u'))
    await b.post('/events', llmCall('x'), key)
    expect((await a.post('/config/pause', { agent_id: 'x', is_paused: true }, key)).json().is_paused).toBe(true)
    expect((await b.post('/events', llmCall('x'), key)).json().paused).toBe(true)
    expect((await b.get('/agents', key)).json().agents[0].is_paused).toBe(true)
    await b.post('/config/pause', { agent_id: 'x', is_paused: false }, key)
    expect((await a.post('/events', llmCall('x'), key)).json().paused).toBe(false)
  })

  it('share the rate limit: 10 per minute means 10 across both', async () => {
    const user = unique('u')
    const key = (await a.services.keys.create(user, { rateLimit: 10 })).key
    const statuses: number[] = []
    for (let i = 0; i < 14; i++) statuses.push((await (i % 2 ? a : b).post('/events', llmCall('r'), key)).statusCode)
    expect(statuses.filter((s) => s === 200)).toHaveLength(10)
    expect(statuses.slice(10)).toEqual([429, 429, 429, 429])
  })

  it('store and count an event sent through both at once a single time', async () => {
    const user = unique('u')
    const key = await a.key(user)
    for (let round = 0; round < 5; round++) {
      const event_id = randomUUID()
      const replies = await Promise.all([a, b, a, b].map((h) => h.post('/events', llmCall('dup', { event_id }), key)))
      expect(replies.map((r) => r.statusCode)).toEqual([200, 200, 200, 200])
      expect(new Set(replies.map((r) => r.json().cost_usd))).toEqual(new Set([LLM_CALL_USD]))
    }
    expect(await storedRows('dup', user)).toBe(5)
    expect((await a.get('/agents', key)).json().agents[0]).toMatchObject({ llm_calls: 5, total_cost_usd: 5 * LLM_CALL_USD })
    expect((await b.post('/events', { agent_id: 'dup', event_type: 'agent_end' }, key)).json().total_cost_24h).toBeCloseTo(5 * LLM_CALL_USD, 12)
  })

  it("ship the journal of an instance that stopped: another instance takes it over, each row once", async () => {
    const user = unique('u')
    const key = await a.key(user)
    // An instance that counted and journaled 25 events, then stopped before shipping them:
    // its hot state and journal stream are in Redis, its lease runs out and nobody renews it.
    const dead = new RedisJournal({ redis: redis.redis, instance: `dead-${randomUUID()}`, partitions: DEFAULT_PARTITIONS, maxRows: 1_000_000, leaseMs: 300 })
    await dead.register()
    const hs = new RedisHotState({ redis: redis.redis, journal: dead, loader: agentLoader(a.services.clickhouse), userAgents: async () => [] })
    const now = Date.now()
    for (let i = 0; i < 25; i++) {
      const eventId = randomUUID()
      await hs.record({ userId: user, agentId: 'd', eventId, costNano: LLM_CALL_USD * 1e9, llmCall: true, at: now, row: row(user, 'd', eventId, now) }, now)
    }
    await eventually(async () => ((await storedRows('d', user)) === 25 ? true : undefined), 10_000)
    expect((await b.get('/agents', key)).json().agents).toEqual([expect.objectContaining({ agent_id: 'd', llm_calls: 25 })])
    // Drained and forgotten: nobody ships it again.
    await eventually(async () => ((await redis.redis.sismember('br:ship:instances', dead.instance)) === 0 ? true : undefined), 5000)
    expect(await storedRows('d', user)).toBe(25)
  })

  it('stop a key revoked through one instance on the other at once', async () => {
    const created = await a.services.keys.create(unique('u'))
    expect((await b.post('/events', llmCall('k'), created.key)).statusCode).toBe(200) // b caches it
    await a.services.keys.revoke(created.record.keyId)
    await eventually(async () => ((await b.post('/events', llmCall('k'), created.key)).statusCode === 401 ? true : undefined), 1000)
  })

  it('let a key created through one instance in on the other at once, though it read the key ids just before', async () => {
    expect((await b.post('/events', llmCall('k'), generateKey().key)).statusCode).toBe(401) // b reads the ids
    const created = await a.services.keys.create(unique('u'))
    expect((await b.post('/events', llmCall('k'), created.key)).statusCode).toBe(200)
  })

  it('reload totals from ClickHouse when Redis lost the hot state under load, counting each stored event once', async () => {
    const user = unique('u')
    const key = await a.key(user)
    const send = (h: Harness) => h.post('/events', llmCall('f'), key)
    const first = await Promise.all(Array.from({ length: 30 }, (_, i) => send(i % 2 ? a : b)))
    expect(first.every((r) => r.statusCode === 200)).toBe(true)
    await eventually(async () => ((await storedRows('f', user)) === 30 ? true : undefined), 10_000)
    // Redis loses everything (a restart without its AOF): what was shipped is in ClickHouse,
    // and each instance goes on (its journal registered again) while events keep coming.
    const flushed = redis.redis.flushall()
    await Promise.all(Array.from({ length: 30 }, (_, i) => send(i % 2 ? a : b)))
    await flushed
    const after = await Promise.all(Array.from({ length: 10 }, (_, i) => send(i % 2 ? a : b)))
    expect(after.every((r) => r.statusCode === 200)).toBe(true)
    await Promise.all([a.flush(), b.flush()])
    const stored = await storedRows('f', user)
    expect(stored).toBeGreaterThanOrEqual(40)
    const total = (await a.post('/events', { agent_id: 'f', event_type: 'agent_end' }, key)).json().total_cost_24h
    expect(total).toBeCloseTo(stored * LLM_CALL_USD, 12)
    expect((await b.get('/agents', key)).json().agents[0]).toMatchObject({ llm_calls: stored })
    // The fleet, reloaded as the agent was (from the sums of its agents' minutes), agrees.
    expect((await a.get('/fleet', key)).json()).toMatchObject({ llm_calls: stored })
  })
})
