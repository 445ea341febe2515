import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startClickHouseServer } from './helpers/clickhouse-server.ts'
import { api, cleanup, createKey, freshDataDir, nano, startServe, waitFor, withDeadline, type ServerProcess } from './helpers/process.ts'
import { startReceiver, type Receiver } from './helpers/receiver.ts'
import { startRedis } from './helpers/redis.ts'

/**
 * Two real `burnrate serve` processes behind an imaginary load balancer, on one real Redis
 * and one ClickHouse reached over HTTP (the real engine in a process of its own), as in
 * production.
 */
let clickhouse: Awaited<ReturnType<typeof startClickHouseServer>>
let redis: Awaited<ReturnType<typeof startRedis>>
let receiver: Receiver
let env: Record<string, string>
let a: ServerProcess
let b: ServerProcess

beforeAll(async () => {
  ;[clickhouse, redis, receiver] = await Promise.all([startClickHouseServer(), startRedis(), startReceiver()])
  // A short lease: a killed instance's journal is taken over within about a second.
  env = { CLICKHOUSE_URL: clickhouse.url, REDIS_URL: redis.url, WEBHOOK_ALLOW_PRIVATE: 'true', JOURNAL_LEASE_MS: '1200' }
  a = await startServe(freshDataDir(), env)
  b = await startServe(freshDataDir(), env) // after a: the schema is in place
}, 60_000)
afterAll(async () => {
  await cleanup()
  await Promise.all([clickhouse?.stop(), redis?.stop(), receiver?.close()])
})

/** A key created with the CLI straight against ClickHouse, as an operator would. */
async function newKey(extra: string[] = []): Promise<string> {
  return (await createKey(freshDataDir(), `u-${randomUUID().slice(0, 8)}`, extra, { CLICKHOUSE_URL: clickhouse.url })).key
}

const llmCall = (agent_id: string, extra: Record<string, unknown> = {}) => ({
  agent_id,
  event_type: 'llm_call',
  model: 'gpt-4o',
  input_tokens: 1000,
  output_tokens: 500,
  ...extra,
})
const COST = 0.0075

/**
 * The agent's stored events once ClickHouse holds `count` of them (each instance ships its
 * own journal, a dead one's is taken over: event lists lag POST /events by that).
 */
async function stored(server: ServerProcess, key: string, agent: string, count: number): Promise<Array<{ event_id: string; cost_usd: number }>> {
  return waitFor(
    async () => {
      const res = await api(server.url, 'GET', `/agents/${agent}?limit=1000`, key)
      return res.status === 200 && res.body.events.length >= count ? (res.body.events as Array<{ event_id: string; cost_usd: number }>) : undefined
    },
    20_000,
    `${count} events of ${agent} in ClickHouse`,
  )
}

describe('two burnrate processes, one Redis, one ClickHouse', () => {
  it('count concurrent events of one agent exactly, pause it once and send one webhook', async () => {
    const key = await newKey()
    await api(a.url, 'POST', '/config', key, { agent_id: 'race', cost_threshold_usd: 0.1, slack_webhook_url: `${receiver.url}race` })
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => api(i % 2 ? a.url : b.url, 'POST', '/events', key, llmCall('race'))))
    expect(replies.map((r) => r.status)).toEqual(Array(40).fill(200))
    const totals = replies.map((r) => nano(r.body.total_cost_24h)).sort((x, y) => x - y)
    expect(new Set(totals).size).toBe(40) // no lost update: each event saw its own running total
    expect(totals.at(-1)).toBe(nano(40 * COST))
    expect(replies.filter((r) => r.body.paused)).toHaveLength(40 - 13) // 13 * 0.0075 <= 0.1 < 14 * 0.0075
    // One running → paused transition was decided, by one of the two, and it sent one message;
    // it is journaled with the event that crossed, so it is stored once all 40 are.
    expect(await stored(b, key, 'race', 40)).toHaveLength(40)
    const transitions = await fetch(`${clickhouse.url}/?query=${encodeURIComponent("SELECT reason FROM pause_transitions WHERE agent_id = 'race' FORMAT JSONEachRow")}`)
    expect((await transitions.text()).trim().split('\n')).toEqual(['{"reason":"budget"}'])
    // The pause's message (the 0.8 alert level sends its own: test/alerts.test.ts).
    const pauses = () => receiver.messages.filter((m) => m.text.includes('paused agent `race`'))
    await waitFor(() => (pauses().length > 0 ? true : undefined), 10_000, 'the webhook')
    expect(pauses()).toHaveLength(1)
  })

  it('show a pause set through one process on the other', async () => {
    const key = await newKey()
    expect((await api(a.url, 'POST', '/config/pause', key, { agent_id: 'p', is_paused: true })).body.is_paused).toBe(true)
    expect((await api(b.url, 'POST', '/events', key, llmCall('p'))).body.paused).toBe(true)
    expect((await api(b.url, 'POST', '/config/pause', key, { agent_id: 'p', is_paused: false })).body.is_paused).toBe(false)
    expect((await api(a.url, 'POST', '/events', key, llmCall('p'))).body.paused).toBe(false)
  })

  it('share the rate limit: 10 a minute is 10 across both', async () => {
    const key = await newKey(['--rate-limit', '10'])
    const statuses: number[] = []
    for (let i = 0; i < 14; i++) statuses.push((await api(i % 2 ? a.url : b.url, 'POST', '/events', key, llmCall('r'))).status)
    expect(statuses.slice(0, 10)).toEqual(Array(10).fill(200))
    expect(statuses.slice(10)).toEqual([429, 429, 429, 429])
  })

  it('store and count an event sent through both at once a single time', async () => {
    const key = await newKey()
    for (let round = 0; round < 5; round++) {
      const event_id = randomUUID()
      const replies = await Promise.all([a, b, a, b].map((s) => api(s.url, 'POST', '/events', key, llmCall('dup', { event_id }))))
      expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200])
    }
    expect(await stored(a, key, 'dup', 5)).toHaveLength(5)
    const end = await api(b.url, 'POST', '/events', key, { agent_id: 'dup', event_type: 'agent_end' })
    expect(nano(end.body.total_cost_24h)).toBe(nano(5 * COST))
  })

  it('lose nothing acknowledged when one is killed under load, and count it all once after its restart', async () => {
    const key = await newKey(['--rate-limit', '100000'])
    const events = Array.from({ length: 200 }, () => randomUUID())
    const acked = new Set<string>()
    const cut = new Set<string>()
    let next = 0
    let killed = false
    const worker = async (i: number) => {
      while (next < events.length) {
        const id = events[next++]!
        const target = i % 2 ? a : b
        try {
          const res = await api(target.url, 'POST', '/events', key, llmCall('k', { event_id: id }))
          if (res.status === 200) acked.add(id)
          else cut.add(id)
        } catch {
          cut.add(id)
        }
        if (!killed && acked.size >= 80) {
          killed = true
          a.kill('SIGKILL')
        }
      }
    }
    await withDeadline(Promise.all(Array.from({ length: 10 }, (_, i) => worker(i))), 60_000, 'load did not finish')
    expect(killed).toBe(true)
    a = await startServe(freshDataDir(), env)
    // The cut-off requests are retried with their event ids, as client libraries do.
    for (const id of cut) {
      await waitFor(async () => ((await api(a.url, 'POST', '/events', key, llmCall('k', { event_id: id }))).status === 200 ? true : undefined), 15_000, `retry of ${id}`)
    }
    // a's journal is shipped by whichever instance takes it over once its lease has run out.
    const rows = await stored(b, key, 'k', events.length)
    const ids = rows.map((r) => r.event_id)
    expect(new Set(ids).size).toBe(ids.length) // nothing stored twice
    expect(new Set(ids)).toEqual(new Set(events)) // every event, acknowledged first time or on retry
    const end = await api(a.url, 'POST', '/events', key, { agent_id: 'k', event_type: 'agent_end' })
    expect(nano(end.body.total_cost_24h)).toBe(nano(200 * COST))
  })

  it('lose nothing acknowledged and count nothing twice when Redis is killed -9 under load and restarted on its AOF', async () => {
    const key = await newKey(['--rate-limit', '100000'])
    const events = Array.from({ length: 200 }, () => randomUUID())
    const acked = new Set<string>()
    let refused = 0
    let next = 0
    const worker = async (i: number) => {
      while (next < events.length) {
        const id = events[next++]!
        // The client library's retry: the same event id until it is acknowledged.
        await waitFor(
          async () => {
            const res = await api(i % 2 ? a.url : b.url, 'POST', '/events', key, llmCall('rk', { event_id: id }), 2000)
            if (res.status === 200) return acked.add(id)
            refused++
            return undefined
          },
          30_000,
          `an acknowledgement of ${id}`,
        )
      }
    }
    const load = Promise.all(Array.from({ length: 10 }, (_, i) => worker(i)))
    await waitFor(() => (acked.size >= 60 ? true : undefined), 20_000, '60 acknowledged events')
    await redis.kill()
    await waitFor(() => (refused > 0 ? true : undefined), 10_000, 'a refusal while Redis is down')
    redis = await startRedis({ port: redis.port, dir: redis.dir })
    await withDeadline(load, 60_000, 'load did not finish')

    const rows = await stored(a, key, 'rk', events.length)
    const ids = rows.map((r) => r.event_id)
    expect(new Set(ids).size).toBe(ids.length) // nothing stored twice
    expect(new Set(ids)).toEqual(new Set(events))
    const end = await api(b.url, 'POST', '/events', key, { agent_id: 'rk', event_type: 'agent_end' })
    expect(nano(end.body.total_cost_24h)).toBe(nano(200 * COST)) // nothing counted twice
  })

  it('keep answering while ClickHouse is down, and ship the backlog once it is back, each event once', async () => {
    const key = await newKey(['--rate-limit', '100000'])
    // Known to both before the outage: the key (verified and cached) and the agent (in Redis).
    for (const s of [a, b]) expect((await api(s.url, 'POST', '/events', key, { agent_id: 'ch', event_type: 'agent_start' })).status).toBe(200)
    await clickhouse.stop()
    const events = Array.from({ length: 100 }, () => randomUUID())
    const replies = await Promise.all(events.map((id, i) => api(i % 2 ? a.url : b.url, 'POST', '/events', key, llmCall('ch', { event_id: id }))))
    expect(replies.map((r) => r.status)).toEqual(Array(100).fill(200))
    expect(nano(Math.max(...replies.map((r) => r.body.total_cost_24h)))).toBe(nano(100 * COST))
    const ready = await api(a.url, 'GET', '/readyz', null)
    expect(ready.body).toMatchObject({ ok: true, clickhouse: 'down' })

    clickhouse = await startClickHouseServer({ path: clickhouse.path, port: clickhouse.port })
    const rows = await stored(a, key, 'ch', 102)
    const ids = rows.map((r) => r.event_id)
    expect(new Set(ids).size).toBe(ids.length)
    expect(ids.filter((id) => (events as string[]).includes(id)).sort()).toEqual([...events].sort())
  })
})
