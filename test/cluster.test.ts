import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../src/config.ts'
import { agentKeyId, partitionOf, partitionTag } from '../src/storage/redis-keys.ts'
import { LLM_CALL_USD, eventually, llmCall, startHarness, startTwoInstances, unique, type Harness } from './helpers/harness.ts'
import { startRedisCluster, type RedisCluster } from './helpers/redis-cluster.ts'
import { packedState } from './helpers/redis.ts'
import type { Receiver } from './helpers/receiver.ts'

/**
 * Two burnrate instances on a real Redis Cluster (three masters with a replica
 * each, AOF on) and one ClickHouse, as behind a load balancer: exact totals, one pause per
 * crossing, holds and the fleet across the masters. The contract suites of the hot state and
 * the journal run on the same kind of cluster (test/hot-state, test/journal).
 */
let cluster: RedisCluster
let a: Harness
let b: Harness
let receiver: Receiver
let instances: Awaited<ReturnType<typeof startTwoInstances>> | undefined

beforeAll(async () => {
  cluster = await startRedisCluster()
  instances = await startTwoInstances({ REDIS_CLUSTER_NODES: cluster.seeds.join(','), JOURNAL_LEASE_MS: '900' })
  ;({ a, b, receiver } = instances)
})
afterAll(async () => {
  await instances?.close()
  await cluster?.stop()
})

describe('REDIS_CLUSTER_NODES', () => {
  it('takes seeds as host:port or redis[s]:// URLs, with one set of credentials, and never with REDIS_URL', () => {
    expect(loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, rediss://u:p%40ss@10.0.0.2:7001' }).redis).toEqual({
      kind: 'cluster',
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 7001 },
      ],
      username: 'u',
      password: 'p@ss',
      tls: true,
    })
    // An empty variable is an unset one, as for every variable.
    for (const bad of [' , ', 'nohost', '10.0.0.1:0', '10.0.0.1:70000', 'http://10.0.0.1:7000', 'redis://a:b@h:1,redis://a:c@h:2']) {
      expect(() => loadConfig({ REDIS_CLUSTER_NODES: bad }), bad).toThrow(/REDIS_CLUSTER_NODES/)
    }
    expect(() => loadConfig({ REDIS_CLUSTER_NODES: 'h:1', REDIS_URL: 'redis://h:2' })).toThrow(/not both/)
  })
})

describe('two instances, one Redis Cluster', () => {
  it('count concurrent events of many users exactly, spread over the masters, and pause each agent once', async () => {
    // Users hash to partitions, and the partitions to the three masters.
    const users = await Promise.all(Array.from({ length: 6 }, async () => ({ user: unique('u'), key: '' })))
    for (const u of users) u.key = await a.key(u.user)
    await Promise.all(users.map((u) => a.post('/config', { agent_id: 'x', cost_threshold_usd: 0.05, alert_at: [], slack_webhook_url: receiver.url }, u.key)))
    const replies = await Promise.all(users.flatMap((u) => Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).post('/events', llmCall('x'), u.key))))
    expect(replies.every((r) => r.statusCode === 200)).toBe(true)
    for (const u of users) {
      const detail = (await b.get('/agents/x', u.key)).json()
      expect(detail).toMatchObject({ llm_calls: 20, is_paused: true, paused_reason: 'budget' })
      expect(detail.total_cost_usd).toBeCloseTo(20 * LLM_CALL_USD, 9)
    }
    await Promise.all([a.services.webhooks.drain(), b.services.webhooks.drain()])
    // 0.05 / 0.0075: the 7th event of each agent crosses it, whichever instance takes it: one
    // message per agent (each user's agent x), never two.
    expect(receiver.messages.filter((m) => m.text.startsWith('burnrate paused agent `x`'))).toHaveLength(users.length)
  })

  it('grant concurrent holds no more than the budget allows, and settle each once, through both', async () => {
    const key = await a.key(unique('u'))
    await a.post('/config', { agent_id: 'g', cost_threshold_usd: 0.1, alert_at: [] }, key)
    const asks = Array.from({ length: 30 }, (_, i) => (i % 2 ? a : b).post('/holds', { agent_id: 'g', model: 'gpt-4o', input_tokens: 1000, max_output_tokens: 1000 }, key))
    const granted = (await Promise.all(asks)).map((r) => r.json()).filter((r) => r.allowed)
    expect(granted).toHaveLength(8) // 8 × 0.0125 = 0.1: the 9th would be over
    const calls = granted.map((g) => llmCall('g', { event_id: randomUUID(), hold_id: g.hold_id }))
    await Promise.all(calls.flatMap((c) => [a.post('/events', c, key), b.post('/events', c, key)]))
    const after = (await a.get('/agents/g', key)).json()
    expect(after).toMatchObject({ held_usd: 0, llm_calls: 8 })
  })

  it('stop a key revoked through one instance on the other at once (PUBLISH across the cluster bus)', async () => {
    const created = await a.services.keys.create(unique('u'))
    expect((await b.post('/events', llmCall('k'), created.key)).statusCode).toBe(200) // b caches it
    await a.services.keys.revoke(created.record.keyId)
    await eventually(async () => ((await b.post('/events', llmCall('k'), created.key)).statusCode === 401 ? true : undefined), 1000)
  })

  it('show a pause set through one instance on the other, and share the rate limit', async () => {
    const key = await a.key(unique('u'), { rateLimit: 10 })
    await a.post('/config/pause', { agent_id: 'p', is_paused: true }, key)
    expect((await b.post('/events', llmCall('p'), key)).json()).toMatchObject({ paused: true, paused_reason: 'manual' })
    const statuses = []
    for (let i = 0; i < 12; i++) statuses.push((await (i % 2 ? a : b).post('/events', llmCall('q'), key)).statusCode)
    // One was already spent above: 9 more pass, across both instances.
    expect(statuses.filter((s) => s === 200)).toHaveLength(9)
    expect(statuses.filter((s) => s === 429)).toHaveLength(3)
  })
})

describe('REDIS_WAIT_REPLICAS', () => {
  /** The llm calls in the agent's window as the replica of its slot's master holds them (READONLY). */
  async function callsOnReplica(userId: string, agentId: string): Promise<number | undefined> {
    const key = `br:${partitionTag(partitionOf(userId, 16))}:hs:${agentKeyId(userId, agentId)}:s`
    const [replica] = (await cluster.servedBy(await cluster.slotOf(key))).replicas
    const node = cluster.nodes.find((n) => n.port === replica)!
    await node.redis.call('READONLY')
    return (await packedState(node.redis, key))?.calls
  }

  it('answers a write only once a replica holds it: every acknowledged event is on the replica at once', async () => {
    const c = await startHarness({ env: { REDIS_CLUSTER_NODES: cluster.seeds.join(','), REDIS_WAIT_REPLICAS: '1' }, dataDir: a.dataDir })
    try {
      const user = unique('u')
      const key = await c.key(user)
      for (let i = 1; i <= 10; i++) {
        expect((await c.post('/events', llmCall('w'), key)).statusCode).toBe(200)
        expect(await callsOnReplica(user, 'w')).toBe(i)
      }
    } finally {
      await c.close()
    }
  })

  it('answers 503 when fewer replicas confirm in time, and the retry counts the event once', async () => {
    // Each master has one replica: two never confirm.
    const d = await startHarness({ env: { REDIS_CLUSTER_NODES: cluster.seeds.join(','), REDIS_WAIT_REPLICAS: '2', REDIS_WAIT_TIMEOUT_MS: '50' }, dataDir: a.dataDir })
    try {
      const key = await d.key(unique('u'))
      const call = llmCall('r', { event_id: randomUUID() })
      for (let i = 0; i < 3; i++) {
        const res = await d.post('/events', call, key)
        expect(res.statusCode).toBe(503)
        expect(res.json()).toMatchObject({ code: 'store_unavailable' })
        expect(res.headers['retry-after']).toBeDefined()
      }
      // The write itself was made (the master has it, one replica too), and each retry was a
      // repeat: counted once, not three times.
      expect((await a.get('/agents/r', key)).json()).toMatchObject({ llm_calls: 1 })
      expect((await a.post('/events', call, key)).json()).toMatchObject({ duplicate: true })
    } finally {
      await d.close()
    }
  })

  it('refuses to start with another partition count than Redis was written with', async () => {
    await expect(startHarness({ env: { REDIS_CLUSTER_NODES: cluster.seeds.join(','), REDIS_PARTITIONS: '32' }, dataDir: a.dataDir })).rejects.toThrow(/REDIS_PARTITIONS is 32.*written with 16/)
  })
})
