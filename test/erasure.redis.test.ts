import { createHash, randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startClickHouseServer } from './helpers/clickhouse-server.ts'
import { filesHoldingAny, removedCounts, userView, victimActivity, victimIds, victimNeedles, type Victim } from './helpers/erasure.ts'
import { api, cleanup, createKey, freshDataDir, runCli, startServe, waitFor, type ServerProcess } from './helpers/process.ts'
import { startRedis } from './helpers/redis.ts'
import { DEFAULT_PARTITIONS, partitionOf } from '../src/storage/redis-keys.ts'

// `burnrate users erase` with REDIS_URL and CLICKHOUSE_URL: the CLI erases itself, beside two
// running instances that go on serving other users. Redis keeps its AOF in a directory of its
// own, uncompressed (rdbcompression no) so that a grep of its files, or of DUMP, sees every byte.

let redis: Awaited<ReturnType<typeof startRedis>>
let clickhouse: Awaited<ReturnType<typeof startClickHouseServer>>
let env: Record<string, string>

beforeAll(async () => {
  redis = await startRedis({ args: ['--rdbcompression', 'no'] })
  clickhouse = await startClickHouseServer()
  env = { REDIS_URL: redis.url, CLICKHOUSE_URL: clickhouse.url }
})
afterEach(() => cleanup())
afterAll(async () => {
  await redis?.stop()
  await clickhouse?.stop()
})

const erasureSubject = (user: string) => `sha256:${createHash('sha256').update(user).digest('hex')}`

/** The first of `make()`'s values that `ok` accepts. */
function firstOf(make: () => string, ok: (value: string) => boolean): string {
  for (;;) {
    const value = make()
    if (ok(value)) return value
  }
}

/** Every key of Redis whose name, or whose DUMP, holds one of `needles`: by needle. */
async function redisHolding(client: Redis, needles: readonly string[]): Promise<Record<string, string[]>> {
  const found: Record<string, string[]> = {}
  let cursor = '0'
  do {
    const [next, keys] = await client.scan(cursor, 'COUNT', 1000)
    cursor = next
    for (const key of keys) {
      const dump = (await client.dumpBuffer(key)) ?? Buffer.alloc(0)
      for (const needle of needles) if (key.includes(needle) || dump.includes(needle)) (found[needle] ??= []).push(key)
    }
  } while (cursor !== '0')
  return found
}

/** Waits until the user's events are listed (with REDIS_URL, /readyz does not tell how far the journal shipped). */
async function listed(server: ServerProcess, key: string, count: number): Promise<void> {
  await waitFor(async () => ((await api(server.url, 'GET', '/agents/events?limit=1000', key)).body.events.length === count ? true : undefined), 15_000, `${count} events listed`)
}

describe('burnrate users erase, Redis and a ClickHouse server', () => {
  it('leaves nothing of the user in Redis (keys, values, AOF) or ClickHouse, with instances running', { timeout: 240_000 }, async () => {
    const keysDir = freshDataDir()
    const ids = victimIds()
    const victimKey = await createKey(keysDir, ids.user, ['--name', `${ids.marker}key`], env)
    const bystander = await createKey(keysDir, `bystander-${randomUUID()}`, [], env)
    const busy = await createKey(keysDir, `busy-${randomUUID()}`, [], env)
    // A user of the victim's partition, sending now and then, the erasure under way too: the
    // partition's streams are written again (journal/lua/rewrite.lua) while they append.
    const neighbour = firstOf(() => `neighbour-${randomUUID()}`, (u) => partitionOf(u, DEFAULT_PARTITIONS) === partitionOf(ids.user, DEFAULT_PARTITIONS))
    const slow = await createKey(keysDir, neighbour, [], env)
    const a = await startServe(freshDataDir(), env)
    const b = await startServe(freshDataDir(), env)
    const from = new Date(Date.now() - 3_600_000).toISOString()
    const slowAcked: string[] = []
    let slowSending = true
    const slowSender = (async () => {
      while (slowSending) {
        const eventId = randomUUID()
        if ((await api(a.url, 'POST', '/events', slow.key, { event_id: eventId, agent_id: 'slow-agent', event_type: 'agent_start' })).status === 200) slowAcked.push(eventId)
        await new Promise((r) => setTimeout(r, 300)) // its pace, not a wait for anything
      }
    })()

    const partial = { ...ids, key: victimKey.key, keyId: victimKey.keyId }
    const eventIds = await victimActivity(a.url, partial)
    // One more through the other instance: its journal holds the user's rows too.
    const viaB = randomUUID()
    expect((await api(b.url, 'POST', '/events', victimKey.key, { event_id: viaB, agent_id: ids.agents[0], event_type: 'agent_end', run_id: ids.runs[0] })).status).toBe(200)
    const victim: Victim = { ...partial, eventIds: [...eventIds, viaB] }
    for (let i = 0; i < 3; i++) {
      const res = await api(b.url, 'POST', '/events', bystander.key, { event_id: randomUUID(), agent_id: 'bystander-agent', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 100 + i, output_tokens: 10 })
      expect(res.status).toBe(200)
    }
    await listed(a, bystander.key, 3)
    await listed(a, victim.key, victim.eventIds.length)
    const range = { from, to: new Date(Date.now() + 60_000).toISOString() }
    const before = await userView(a.url, bystander.key, 'bystander-agent', range)

    // The checks can fail: before the erasure Redis and its AOF hold the victim's ids.
    const needles = victimNeedles(victim)
    expect(Object.keys(await redisHolding(redis.redis, needles))).toContain(victim.agents[0])
    expect(Object.keys(filesHoldingAny(redis.dir, needles))).toContain(victim.user)

    const acked: string[] = []
    let sending = true
    const sender = (async () => {
      for (let i = 0; sending; i++) {
        const eventId = randomUUID()
        const res = await api((i % 2 === 0 ? a : b).url, 'POST', '/events', busy.key, { event_id: eventId, agent_id: 'busy-agent', event_type: 'tool_call', tool_name: 't' })
        if (res.status === 200) acked.push(eventId)
      }
    })()
    const erased = await runCli(['users', 'erase', '--user', victim.user], { DATA_DIR: freshDataDir(), ...env }, 180_000)
    sending = false
    slowSending = false
    await sender
    await slowSender
    expect(erased.stderr).toBe('')
    expect(erased.code).toBe(0)
    expect(erased.stdout.split('\n')[0]).toBe(`erased user ${victim.user}; the audit log records it as ${erasureSubject(victim.user)}`)
    expect(removedCounts(erased.stdout)).toMatchObject({ api_keys_revoked: 1, events: victim.eventIds.length, agent_configs: 1, budget_alerts: 1 })

    // Both instances refuse the key at once (the revocation is published).
    for (const server of [a, b]) expect((await api(server.url, 'POST', '/events', victim.key, { agent_id: victim.agents[0], event_type: 'agent_end' })).status).toBe(401)

    await listed(a, busy.key, acked.length)
    const busyEvents = (await api(a.url, 'GET', '/agents/events?limit=1000', busy.key)).body.events as Array<{ event_id: string }>
    expect(busyEvents.map((e) => e.event_id).sort()).toEqual([...acked].sort())
    expect(await userView(b.url, bystander.key, 'bystander-agent', range)).toEqual(before)
    await listed(b, slow.key, slowAcked.length)
    const slowEvents = (await api(b.url, 'GET', '/agents/events?limit=1000', slow.key)).body.events as Array<{ event_id: string }>
    expect(slowEvents.map((e) => e.event_id).sort()).toEqual([...slowAcked].sort())

    expect(await redisHolding(redis.redis, needles)).toEqual({})
    // The AOF files written before the rewrite are removed by Redis in the background.
    await waitFor(() => (Object.keys(filesHoldingAny(redis.dir, needles)).length === 0 ? true : undefined), 10_000, 'no AOF file holding the user')
    expect(filesHoldingAny(clickhouse.path, needles)).toEqual({})

    // Instances started afresh (hot state loaded from ClickHouse) know nothing of the user either.
    a.kill('SIGTERM')
    b.kill('SIGTERM')
    expect((await a.exited).code).toBe(0)
    expect((await b.exited).code).toBe(0)
    const c = await startServe(freshDataDir(), env)
    expect((await api(c.url, 'GET', '/agents', victim.key)).status).toBe(401)
    expect(await userView(c.url, bystander.key, 'bystander-agent', range)).toEqual(before)
    expect(await redisHolding(redis.redis, needles)).toEqual({})
  })
})
