import { createRequire } from 'node:module'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { RedisHotState } from '../../src/hot-state/redis.ts'
import { DEFAULT_POLICY, type AgentLoad, type AgentRef, type RecordInput } from '../../src/hot-state/types.ts'
import { MINUTE_MS, minuteOf } from '../../src/window.ts'
import { startRedis } from '../helpers/redis.ts'
import { agentKeyId, DEFAULT_PARTITIONS, partitionOf, partitionTag } from '../../src/storage/redis-keys.ts'

// ioredis's own slot function (a dependency of ioredis, untyped): the slot Redis Cluster uses.
const keySlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number

const T0 = Date.UTC(2026, 0, 1, 0, 0, 30)
const M0 = minuteOf(T0)
const USD = 1_000_000_000
const ref: AgentRef = { userId: 'u', agentId: 'a' }
let n = 0
const ev = (costNano: number, extra: Partial<RecordInput> = {}): RecordInput => ({ ...ref, eventId: `e${++n}`, costNano, llmCall: true, at: T0, ...extra })
const emptyLoad = (): AgentLoad => ({ minutes: [], seen: [], policy: null, pause: null })

/** A loader standing in for ClickHouse that counts its calls. */
function countingLoader(load: () => AgentLoad = emptyLoad) {
  const loader = async (_ref: AgentRef, _now: number): Promise<AgentLoad> => {
    loader.calls++
    return load()
  }
  loader.calls = 0
  return loader
}

let server: Awaited<ReturnType<typeof startRedis>>
const clients: Redis[] = []
let prefixes = 0
const prefix = () => `r${++prefixes}:`

beforeAll(async () => {
  server = await startRedis()
})
afterAll(async () => {
  await Promise.all(clients.map((c) => c.quit()))
  await server.stop()
})

/** A second client on the same server, connected: another burnrate instance. */
async function client(): Promise<Redis> {
  const c = new Redis(server.url)
  clients.push(c)
  await c.ping()
  return c
}

/** The per-agent keys under a prefix (the claims index beside them is not an agent's). */
async function keysOf(p: string): Promise<string[]> {
  return server.redis.keys(`${p}{p*}:hs:*`)
}

describe('redis hot state: load on demand', () => {
  it('loads a lost agent once for 20 concurrent records, adds new events to it, and skips ids it already holds', async () => {
    const loaded = { minutes: [{ minute: M0 - 10, costNano: USD, llmCalls: 2 }], seen: [{ eventId: 'stored', costNano: USD, minute: M0 - 10 }], policy: null, pause: null }
    const loader = countingLoader(() => loaded)
    const p = prefix()
    const hs = new RedisHotState({ redis: server.redis, prefix: p, loader })
    await hs.record([ev(1)], T0)
    await server.redis.unlink(...(await keysOf(p)))
    loader.calls = 0

    // 'stored' is in ClickHouse and its record call is still on the way: it counts once.
    const events = [...Array.from({ length: 19 }, () => ev(7)), ev(USD, { eventId: 'stored' })]
    const results = await Promise.all(events.map((e) => hs.record([e], T0)))

    expect(loader.calls).toBe(1)
    expect(results.map(([r]) => r!.counted)).toEqual([...Array<boolean>(19).fill(true), false])
    expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: USD + 19 * 7, llmCalls: 2 + 19 })
  })

  it('loads on a read too, and a read never pauses what it loaded', async () => {
    const loader = countingLoader(() => ({ ...emptyLoad(), minutes: [{ minute: M0, costNano: 2 * USD, llmCalls: 1 }], policy: { ...DEFAULT_POLICY, thresholdNano: USD } }))
    const hs = new RedisHotState({ redis: server.redis, prefix: prefix(), loader })
    const { snapshot, transition } = await hs.get(ref, T0)
    expect(snapshot).toMatchObject({ totalNano: 2 * USD, configured: true, pause: { paused: false } })
    expect(transition).toBeNull()
    expect((await hs.record([ev(1)], T0))[0]!.transitions.map((t) => t.reason)).toEqual(['budget'])
    expect(loader.calls).toBe(1)
  })

  it('keeps nano-USD exact above 2^52', async () => {
    const hs = new RedisHotState({ redis: server.redis, prefix: prefix(), loader: countingLoader() })
    await hs.setPolicy(ref, { ...DEFAULT_POLICY, thresholdNano: 2 ** 53 - 1 }, T0)
    const r = await hs.record([ev(2 ** 52 + 1), ev(2)], T0)
    expect(r.map((x) => x.totalNano)).toEqual([2 ** 52 + 1, 2 ** 52 + 3])
    expect((await hs.get(ref, T0)).snapshot.policy.thresholdNano).toBe(2 ** 53 - 1)
  })

  it('survives a SCRIPT FLUSH (EVALSHA falls back to EVAL)', async () => {
    const hs = new RedisHotState({ redis: server.redis, prefix: prefix(), loader: countingLoader() })
    await hs.record([ev(1)], T0)
    await server.redis.script('FLUSH')
    expect((await hs.record([ev(2)], T0))[0]!.totalNano).toBe(3)
  })
})

describe('redis hot state: two instances on one Redis', () => {
  it('50 concurrent events split across two instances: exact totals, no lost update, one budget pause', async () => {
    const p = prefix()
    const a = new RedisHotState({ redis: server.redis, prefix: p, loader: countingLoader() })
    const b = new RedisHotState({ redis: await client(), prefix: p, loader: countingLoader() })
    await a.setPolicy(ref, { ...DEFAULT_POLICY, thresholdNano: USD }, T0)
    const cost = 30_000_000 // 0.03 USD: the 34th event crosses 1 USD
    const results = (await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).record([ev(cost)], T0)))).flat()

    expect(results.every((r) => r.counted)).toBe(true)
    // Each event saw a distinct running total: none was lost or applied twice.
    expect(results.map((r) => r.totalNano).sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => (i + 1) * cost))
    const budget = results.flatMap((r) => r.transitions).filter((t) => t.reason === 'budget')
    expect(budget).toEqual([expect.objectContaining({ paused: true, totalNano: 34 * cost })])
    for (const hs of [a, b]) expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: 50 * cost, pause: { paused: true, reason: 'budget' } })
  })

  it('a pause set through one instance is seen by the other, and so is the resume', async () => {
    const p = prefix()
    const a = new RedisHotState({ redis: server.redis, prefix: p, loader: countingLoader() })
    const b = new RedisHotState({ redis: await client(), prefix: p, loader: countingLoader() })
    expect(await a.setPaused(ref, true, T0)).toMatchObject({ reason: 'manual', paused: true })
    expect((await b.get(ref, T0)).snapshot.pause).toEqual({ paused: true, reason: 'manual', override: false })
    expect(await b.setPaused(ref, true, T0)).toBeNull()
    await b.setPaused(ref, false, T0)
    expect((await a.get(ref, T0)).snapshot.pause.paused).toBe(false)
  })

  it('the same event id through both instances counts once', async () => {
    const p = prefix()
    const a = new RedisHotState({ redis: server.redis, prefix: p, loader: countingLoader() })
    const b = new RedisHotState({ redis: await client(), prefix: p, loader: countingLoader() })
    const e = ev(5)
    const [[ra], [rb]] = await Promise.all([a.record([e], T0), b.record([e], T0)])
    expect([ra!.counted, rb!.counted].sort()).toEqual([false, true])
    expect(await b.reserve([e], 'probe', T0)).toEqual([{ state: 'done', costNano: 5 }])
    expect((await a.get(ref, T0)).snapshot.totalNano).toBe(5)
  })

  it('an event id claimed by one instance is busy for the other, taken over once stale, done once recorded', async () => {
    const p = prefix()
    const a = new RedisHotState({ redis: server.redis, prefix: p, loader: countingLoader(), reserveStaleMs: 5000 })
    const b = new RedisHotState({ redis: await client(), prefix: p, loader: countingLoader(), reserveStaleMs: 5000 })
    const e = ev(9)
    expect(await a.reserve([e], 'A', T0)).toEqual([{ state: 'reserved' }])
    // Its own claim again: an earlier attempt of this instance failed, the row may be stored.
    expect(await a.reserve([e], 'A', T0 + 1000)).toEqual([{ state: 'takeover' }])
    expect(await b.reserve([e], 'B', T0 + 4999)).toEqual([{ state: 'busy' }])
    expect(await b.reserve([e], 'B', T0 + 6001)).toEqual([{ state: 'takeover' }])
    expect(await a.reserve([e], 'A', T0 + 6002)).toEqual([{ state: 'busy' }])
    expect((await b.get(ref, T0)).snapshot.totalNano).toBe(0) // a claim counts nothing
    await b.record([e], T0)
    expect(await a.reserve([e], 'A', T0 + 6003)).toEqual([{ state: 'done', costNano: 9 }])
  })

  it('a re-seed racing live counters installs once and never adds on top of them', async () => {
    const p = prefix()
    const stored = (): AgentLoad => ({ ...emptyLoad(), minutes: [{ minute: M0, costNano: USD, llmCalls: 1 }] })
    // Instance b's ClickHouse read is slow: a loads, installs and counts while b still reads.
    let release!: () => void
    let entered!: () => void
    const gate = new Promise<void>((r) => (release = r))
    const reading = new Promise<void>((r) => (entered = r))
    const a = new RedisHotState({ redis: server.redis, prefix: p, loader: async () => stored() })
    const b = new RedisHotState({
      redis: await client(),
      prefix: p,
      loader: async () => {
        entered()
        await gate
        return stored()
      },
    })
    const slow = b.record([ev(3)], T0)
    await reading
    await a.record([ev(2)], T0)
    release()
    await slow
    expect((await a.get(ref, T0)).snapshot).toMatchObject({ totalNano: USD + 5, llmCalls: 3 })
  })
})

describe('redis hot state: keys', () => {
  it("every key of one agent is in the cluster slot of its user's partition tag {p<n>}", async () => {
    const p = prefix()
    const hs = new RedisHotState({ redis: server.redis, prefix: p, loader: countingLoader() })
    // Braces and ':' in ids must not move or split the tag.
    const odd = { userId: 'u{1}:x', agentId: '}a{b' }
    for (const r of [ref, odd]) {
      await hs.setPolicy(r, { ...DEFAULT_POLICY, thresholdNano: USD, webhookUrl: 'https://chat.example/hook' }, T0)
      await hs.reserve([{ ...r, eventId: 'claimed' }], 'A', T0)
      await hs.record([ev(1, r), ev(2, { ...r, at: T0 + MINUTE_MS })], T0 + MINUTE_MS)
      await hs.setPaused(r, true, T0 + MINUTE_MS)
    }
    const keys = await keysOf(p)
    for (const r of [ref, odd]) {
      const own = keys.filter((k) => k.includes(`:hs:${agentKeyId(r.userId, r.agentId)}:`))
      expect(own).toHaveLength(6) // :a, :w, :m and three event keys
      const tag = partitionTag(partitionOf(r.userId, DEFAULT_PARTITIONS))
      for (const key of own) {
        expect(key.startsWith(`${p}${tag}:hs:`)).toBe(true)
        expect(keySlot(key)).toBe(keySlot(`${tag}:journal`)) // the slot of every key of the user
      }
    }
    expect(keys.length).toBe(2 * 6)
  })

  it('every key of an agent has a TTL, so idle agents expire on their own', async () => {
    const p = prefix()
    const hs = new RedisHotState({ redis: server.redis, prefix: p, loader: countingLoader() })
    await hs.setPolicy(ref, DEFAULT_POLICY, T0)
    await hs.reserve([{ ...ref, eventId: 'claimed' }], 'A', T0)
    await hs.record([ev(1), ev(2)], T0)
    const keys = await keysOf(p)
    expect(keys.length).toBe(6)
    // The one claim never recorded waits in the claims index for the sweeper.
    expect(await hs.staleClaims(T0 + 1, 10)).toEqual([{ ...ref, eventId: 'claimed', at: T0 }])
    for (const key of keys) {
      const ttl = await server.redis.pttl(key)
      expect(ttl, key).toBeGreaterThan(0)
      expect(ttl, key).toBeLessThanOrEqual(25 * 60 * MINUTE_MS)
    }
  })

  it('restore removes the hot-state keys under its prefix and nothing else', async () => {
    const p = prefix()
    const hs = new RedisHotState({ redis: server.redis, prefix: p, loader: countingLoader() })
    await hs.record([ev(1), ev(1, { agentId: 'gone' })], T0)
    await server.redis.set(`${p}other-component`, 'kept')
    await hs.restore({ minutes: [{ ...ref, minute: M0, costNano: 4, llmCalls: 1 }], seen: [], policies: [], pauses: [] }, T0)
    const base = `${p}${partitionTag(partitionOf('u', DEFAULT_PARTITIONS))}:hs:${agentKeyId('u', 'a')}`
    expect((await server.redis.keys(`${p}*`)).sort()).toEqual([`${base}:a`, `${base}:m`, `${base}:w`, `${p}other-component`].sort())
    expect((await hs.get(ref, T0)).snapshot.totalNano).toBe(4)
  })
})
