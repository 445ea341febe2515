import { createRequire } from 'node:module'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { RedisHotState } from '../../src/hot-state/redis.ts'
import { isFleet, type AgentRef } from '../../src/hot-state/agent-ref.ts'
import { DEFAULT_POLICY } from '../../src/hot-state/meters.ts'
import { type AgentLoad, type AgentLoader, type RecordEvent, type RecordInput } from '../../src/hot-state/types.ts'
import { RedisJournal } from '../../src/journal/redis-streams.ts'
import { toChDateTime64us } from '../../src/storage/clickhouse.ts'
import { MINUTE_MS, minuteOf } from '../../src/rolling-day.ts'
import { startRedis } from '../helpers/redis.ts'
import { agentKeyId, DEFAULT_PARTITIONS, partitionOf, partitionTag, userKeyId } from '../../src/storage/redis-keys.ts'

// ioredis's own slot function (a dependency of ioredis, untyped): the slot Redis Cluster uses.
const keySlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number

const T0 = Date.UTC(2026, 0, 1, 0, 0, 30)
const M0 = minuteOf(T0)
const USD = 1_000_000_000
const ref: AgentRef = { userId: 'u', agentId: 'a' }
let n = 0
const ev = (costNano: number, extra: Partial<RecordInput> = {}): RecordEvent => {
  const e = { ...ref, eventId: `e${++n}`, costNano, llmCall: true, at: T0, ...extra }
  return { ...e, row: { user_id: e.userId, agent_id: e.agentId, timestamp: toChDateTime64us(e.at * 1000), event_id: e.eventId, event_type: 'llm_call', model: '', input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, tool_name: null, metadata: '', cost_nano: e.costNano, price_fallback: false } }
}
const emptyLoad = (): AgentLoad => ({ minutes: [], seen: [], policy: null, policyVersion: 0, pause: null, ignored: null })

/** A loader standing in for ClickHouse: loads agents with `load` and counts them; a fleet (types.ts FLEET) loads empty, uncounted. */
function countingLoader(load: () => AgentLoad = emptyLoad) {
  const loader = async (ref: AgentRef, _now: number): Promise<AgentLoad> => {
    if (isFleet(ref)) return emptyLoad()
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

/** The per-agent keys under a prefix. */
async function keysOf(p: string): Promise<string[]> {
  return server.redis.keys(`${p}{p*}:hs:*`)
}

/** An instance's hot state with its journal, on `redis` under prefix `p`. */
function hot(o: { redis?: Redis; prefix: string; loader: AgentLoader; instance?: string; leaseMs?: number; userAgents?: (userId: string) => Promise<string[]> }) {
  const redis = o.redis ?? server.redis
  const journal = new RedisJournal({ redis, instance: o.instance ?? 'i', partitions: DEFAULT_PARTITIONS, maxRows: 1_000_000, prefix: o.prefix, leaseMs: o.leaseMs })
  return Object.assign(new RedisHotState({ redis, prefix: o.prefix, journal, loader: o.loader, userAgents: o.userAgents ?? (async () => []) }), { journal })
}

describe('redis hot state: load on demand', () => {
  it('loads a lost agent once for 20 concurrent records, adds new events to it, and skips ids it already holds', async () => {
    const loaded = { ...emptyLoad(), minutes: [{ minute: M0 - 10, costNano: USD, llmCalls: 2 }], seen: [{ eventId: 'stored', costNano: USD, minute: M0 - 10 }] }
    const loader = countingLoader(() => loaded)
    const p = prefix()
    const hs = hot({ prefix: p, loader })
    await hs.record(ev(1), T0)
    await server.redis.unlink(...(await keysOf(p)))
    loader.calls = 0

    // 'stored' is in ClickHouse and its record call is still on the way: it counts once.
    const events = [...Array.from({ length: 19 }, () => ev(7)), ev(USD, { eventId: 'stored' })]
    const results = await Promise.all(events.map((e) => hs.record(e, T0)))

    expect(loader.calls).toBe(1)
    expect(results.map((r) => r.counted)).toEqual([...Array<boolean>(19).fill(true), false])
    expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: USD + 19 * 7, llmCalls: 2 + 19 })
  })

  it('loads on a read too, and a read never pauses what it loaded', async () => {
    const loader = countingLoader(() => ({ ...emptyLoad(), minutes: [{ minute: M0, costNano: 2 * USD, llmCalls: 1 }], policy: { ...DEFAULT_POLICY, thresholdNano: USD }, policyVersion: 1 }))
    const hs = hot({ prefix: prefix(), loader })
    const { snapshot, transition } = await hs.get(ref, T0)
    expect(snapshot).toMatchObject({ totalNano: 2 * USD, configured: true, pause: { paused: false } })
    expect(transition).toBeNull()
    expect((await hs.record(ev(1), T0)).transitions.map((t) => t.reason)).toEqual(['budget'])
    expect(loader.calls).toBe(1)
  })

  it("loads a user's lost agent index once from ClickHouse, and keeps what was recorded meanwhile", async () => {
    const p = prefix()
    let calls = 0
    const hs = hot({ prefix: p, loader: countingLoader(), userAgents: async () => (calls++, ['from-clickhouse']) })
    await hs.record(ev(1, { agentId: 'recorded' }), T0)
    await server.redis.unlink(`${p}${partitionTag(partitionOf('u', DEFAULT_PARTITIONS))}:u:${userKeyId('u')}`)
    await hs.record(ev(1, { agentId: 'after-the-loss' }), T0)
    const lists = await Promise.all([hs.activeAgents('u', T0), hs.activeAgents('u', T0)])
    for (const l of lists) expect(l.sort()).toEqual(['after-the-loss', 'from-clickhouse'])
    expect(calls).toBe(1)
    expect(await hs.activeAgents('u', T0)).toHaveLength(2)
    expect(calls).toBe(1)
  })

  it('keeps nano-USD exact above 2^52', async () => {
    const hs = hot({ prefix: prefix(), loader: countingLoader() })
    await hs.setPolicy(ref, { ...DEFAULT_POLICY, thresholdNano: 2 ** 53 - 1 }, T0, 'key-1')
    expect((await hs.record(ev(2 ** 52 + 1), T0)).totalNano).toBe(2 ** 52 + 1)
    expect((await hs.record(ev(2), T0)).totalNano).toBe(2 ** 52 + 3)
    expect((await hs.get(ref, T0)).snapshot.policy.thresholdNano).toBe(2 ** 53 - 1)
  })

  it('loads its function library again when Redis lost it (FUNCTION FLUSH): the events of the call that found it missing count once', async () => {
    const hs = hot({ prefix: prefix(), loader: countingLoader() })
    await hs.record(ev(1), T0)
    await server.redis.function('FLUSH')
    // The next call (these three events together) finds it missing, loads it and is made again.
    const answers = await Promise.all([ev(2), ev(4), ev(8)].map((e) => hs.record(e, T0)))
    expect(answers.map((a) => a.counted)).toEqual([true, true, true])
    expect((await hs.get(ref, T0)).snapshot.totalNano).toBe(15)
    expect(((await server.redis.function('LIST')) as unknown[]).length).toBe(1)
  })
})

describe('redis hot state: two instances on one Redis', () => {
  it('50 concurrent events split across two instances: exact totals, no lost update, one budget pause', async () => {
    const p = prefix()
    const a = hot({ prefix: p, loader: countingLoader(), instance: 'a' })
    const b = hot({ redis: await client(), prefix: p, loader: countingLoader(), instance: 'b' })
    await a.setPolicy(ref, { ...DEFAULT_POLICY, thresholdNano: USD }, T0, 'key-1')
    const cost = 30_000_000 // 0.03 USD: the 34th event crosses 1 USD
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).record(ev(cost), T0)))

    expect(results.every((r) => r.counted)).toBe(true)
    // Each event saw a distinct running total: none was lost or applied twice.
    expect(results.map((r) => r.totalNano).sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => (i + 1) * cost))
    const budget = results.flatMap((r) => r.transitions).filter((t) => t.reason === 'budget')
    expect(budget).toEqual([expect.objectContaining({ paused: true, totalNano: 34 * cost })])
    for (const hs of [a, b]) expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: 50 * cost, pause: { paused: true, reason: 'budget' } })
  })

  it('a pause set through one instance is seen by the other, and so is the resume', async () => {
    const p = prefix()
    const a = hot({ prefix: p, loader: countingLoader(), instance: 'a' })
    const b = hot({ redis: await client(), prefix: p, loader: countingLoader(), instance: 'b' })
    expect(await a.setPaused(ref, true, T0, 'key-1')).toMatchObject({ reason: 'manual', paused: true })
    expect((await b.get(ref, T0)).snapshot.pause).toEqual({ paused: true, reason: 'manual', override: false, since: T0 })
    expect(await b.setPaused(ref, true, T0, 'key-1')).toBeNull()
    await b.setPaused(ref, false, T0, 'key-1')
    expect((await a.get(ref, T0)).snapshot.pause.paused).toBe(false)
  })

  it('the same event id through both instances counts once, and is journaled by one of them', async () => {
    const p = prefix()
    const a = hot({ prefix: p, loader: countingLoader(), instance: 'a' })
    const b = hot({ redis: await client(), prefix: p, loader: countingLoader(), instance: 'b' })
    const e = ev(5)
    const [ra, rb] = await Promise.all([a.record(e, T0), b.record(e, T0)])
    expect([ra.counted, rb.counted].sort()).toEqual([false, true])
    expect(rb.costNano).toBe(5)
    expect((await a.get(ref, T0)).snapshot.totalNano).toBe(5)
    const lengths = await Promise.all([a, b].map((hs) => server.redis.xlen(hs.journal.streamKey(hs.journal.partitionOf('u')))))
    expect(lengths.sort()).toEqual([0, 1])
  })

  it('an instance whose journal was taken over goes on under a new id: nothing of the fenced id is appended', async () => {
    const p = prefix()
    const a = hot({ prefix: p, loader: countingLoader(), instance: 'a', leaseMs: 1 })
    await a.journal.register()
    await a.record(ev(1), T0)
    const fencedStream = a.journal.streamKey(a.journal.partitionOf('u'))
    // Another instance took a for dead (a long pause): a's id is fenced out of every partition.
    const b = new RedisJournal({ redis: await client(), instance: 'b', partitions: DEFAULT_PARTITIONS, maxRows: 1000, prefix: p, leaseMs: 1 })
    // a's lease (1 ms, judged by Redis's clock) runs out: b takes its journal over.
    const taken = await vi.waitFor(
      async () => {
        const journals = await b.takeOverDead()
        if (journals.length === 0) throw new Error("a's lease still runs")
        return journals
      },
      { timeout: 2000, interval: 1 },
    )
    expect(taken.map((j) => j.instance)).toEqual(['a'])

    expect((await a.record(ev(2), T0)).totalNano).toBe(3)
    expect(a.journal.instance).not.toBe('a')
    expect(await server.redis.xlen(fencedStream)).toBe(1)
    expect(await server.redis.xlen(a.journal.streamKey(a.journal.partitionOf('u')))).toBe(1)
  })

  it('a re-seed racing live counters installs once and never adds on top of them', async () => {
    const p = prefix()
    const stored = (): AgentLoad => ({ ...emptyLoad(), minutes: [{ minute: M0, costNano: USD, llmCalls: 1 }] })
    // Instance b's ClickHouse read is slow: a loads, installs and counts while b still reads.
    let release!: () => void
    let entered!: () => void
    const gate = new Promise<void>((r) => (release = r))
    const reading = new Promise<void>((r) => (entered = r))
    const a = hot({ prefix: p, loader: async () => stored(), instance: 'a' })
    const b = hot({
      redis: await client(),
      prefix: p,
      instance: 'b',
      loader: async () => {
        entered()
        await gate
        return stored()
      },
    })
    const slow = b.record(ev(3), T0)
    await reading
    await a.record(ev(2), T0)
    release()
    await slow
    expect((await a.get(ref, T0)).snapshot).toMatchObject({ totalNano: USD + 5, llmCalls: 3 })
  })
})

describe('redis hot state: keys', () => {
  it("every key a script touches is in the cluster slot of its user's partition tag {p<n>}", async () => {
    const p = prefix()
    const hs = hot({ prefix: p, loader: countingLoader() })
    // Braces and ':' in ids must not move or split the tag.
    const odd = { userId: 'u{1}:x', agentId: '}a{b' }
    for (const r of [ref, odd]) {
      await hs.setPolicy(r, { ...DEFAULT_POLICY, thresholdNano: USD, webhookUrl: 'https://chat.example/hook' }, T0, 'key-1')
      await hs.record(ev(1, r), T0 + MINUTE_MS)
      await hs.record(ev(2, { ...r, at: T0 + MINUTE_MS }), T0 + MINUTE_MS)
      await hs.setPaused(r, true, T0 + MINUTE_MS, 'key-1')
    }
    const keys = await server.redis.keys(`${p}*`)
    for (const r of [ref, odd]) {
      const tag = partitionTag(partitionOf(r.userId, DEFAULT_PARTITIONS))
      const own = keys.filter((k) => k.startsWith(`${p}${tag}:`))
      // :s and :w of the agent; beside them the user's index, the journal stream, the event-id tables
      expect(own.filter((k) => k.includes(`:hs:${agentKeyId(r.userId, r.agentId)}:`))).toHaveLength(2)
      expect(own.filter((k) => k.startsWith(`${p}${tag}:ids`)).length).toBeGreaterThanOrEqual(2)
      for (const key of own) expect(keySlot(key)).toBe(keySlot(`${tag}:journal`)) // the slot of every key of the user
    }
  })

  it('every hot-state key has a TTL, so idle agents and users expire on their own', async () => {
    const p = prefix()
    const hs = hot({ prefix: p, loader: countingLoader() })
    await hs.setPolicy(ref, DEFAULT_POLICY, T0, 'key-1')
    await hs.record(ev(1), T0)
    // A second minute: the first one's bucket goes to :w.
    await hs.record(ev(2, { at: T0 + MINUTE_MS }), T0 + MINUTE_MS)
    const keys = [...(await keysOf(p)), ...(await server.redis.keys(`${p}{p*}:u:*`)), ...(await server.redis.keys(`${p}{p*}:ids*`))]
    expect(keys.length).toBe(7) // :s and :w of the agent and of its fleet, the user's index, the id tables' meta and one bucket
    for (const key of keys) {
      const ttl = await server.redis.pttl(key)
      expect(ttl, key).toBeGreaterThan(0)
      // A state's keys 25 h after its last write; a table of ids until its twelve hours have left the window.
      expect(ttl, key).toBeLessThanOrEqual((key.includes(':ids') ? 36 : 25) * 60 * MINUTE_MS)
    }
  })
})

describe('redis hot state: alerts after a load', () => {
  it('takes the alert levels a loaded total is at as fired: a reload sends no alert again', async () => {
    const loaded = { ...emptyLoad(), minutes: [{ minute: M0 - 10, costNano: 0.85 * USD, llmCalls: 1 }], policy: { ...DEFAULT_POLICY, thresholdNano: USD, alertAt: [0.5, 0.9] }, policyVersion: 1 }
    const hs = hot({ prefix: prefix(), loader: countingLoader(() => loaded) })
    expect((await hs.record(ev(1), T0)).alerts).toEqual([])
    expect((await hs.record(ev(0.05 * USD), T0)).alerts.map((a) => a.level)).toEqual([0.9])
  })
})

describe('redis hot state: an ignoring-pause flag after a load', () => {
  it('keeps a flag raised for the pause that holds: a reload raises it no second time', async () => {
    const since = T0 - 120_000
    const loaded = { ...emptyLoad(), pause: { paused: true, reason: 'manual' as const, override: false, since }, ignored: { since, calls: 3, nano: 7, flagged: true } }
    const hs = hot({ prefix: prefix(), loader: countingLoader(() => loaded) })
    expect((await hs.record(ev(5), T0)).ignored).toBeNull()
    expect((await hs.get(ref, T0)).snapshot).toMatchObject({ pause: { paused: true, since }, ignored: { since, calls: 4, nano: 12, flagged: true } })
  })
})

describe('redis hot state: a state kept by an earlier layout', () => {
  it("is not read: the agent is loaded again from ClickHouse, and the earlier keys are left to expire", async () => {
    const p = prefix()
    const loader = countingLoader(() => ({ ...emptyLoad(), minutes: [{ minute: M0, costNano: 3 * USD, llmCalls: 1 }] }))
    const hs = hot({ prefix: p, loader })
    // What an earlier release kept for the agent: its state in an :a hash beside :w and :m.
    const base = `${p}${partitionTag(partitionOf(ref.userId, DEFAULT_PARTITIONS))}:hs:${agentKeyId(ref.userId, ref.agentId)}`
    await server.redis.hset(`${base}:a`, 'loaded', '1', 'total', String(9 * USD), 'calls', '4', 'threshold', String(USD), 'paused', '1', 'reason', 'budget')
    await server.redis.hset(`${base}:w`, `c${M0}`, String(9 * USD), `n${M0}`, '4')
    await server.redis.rpush(`${base}:m`, String(M0))
    expect((await hs.record(ev(1), T0)).totalNano).toBe(3 * USD + 1)
    expect(loader.calls).toBe(1)
    expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: 3 * USD + 1, llmCalls: 2, pause: { paused: false } })
  })
})

describe('redis hot state: event ids', () => {
  it('remembers 20,000 ids of 200 agents in at most 64 bytes each, in compact buckets, and finds every one', async () => {
    const p = prefix()
    const hs = hot({ prefix: p, loader: countingLoader() })
    const events = Array.from({ length: 20_000 }, (_, i) => ev(1, { agentId: `a${i % 200}`, at: T0 + (i % 90) * MINUTE_MS }))
    const now = T0 + 90 * MINUTE_MS
    for (let i = 0; i < events.length; i += 500) await Promise.all(events.slice(i, i + 500).map((e) => hs.record(e, now)))
    const keys = await server.redis.keys(`${p}{p*}:ids*`)
    let bytes = 0
    for (const key of keys) {
      bytes += (await server.redis.memory('USAGE', key, 'SAMPLES', 0)) ?? 0
      if (key.split(':').length > 3) expect(await server.redis.object('ENCODING', key), key).toBe('listpack')
    }
    expect(bytes / events.length).toBeLessThanOrEqual(64)
    // Every one of them is a repeat now, at its first cost, across the buckets' splits and the hours.
    const again = await Promise.all(events.map((e) => hs.record({ ...e, costNano: 2 }, now)))
    expect(again.filter((r) => r.counted)).toEqual([])
    expect(new Set(again.map((r) => r.costNano))).toEqual(new Set([1]))
  }, 60_000)

  it("starts a table of ids with the buckets the one before it ended with, and finds ids across both", async () => {
    const p = prefix()
    const hs = hot({ prefix: p, loader: countingLoader() })
    // T0 is 00:00 UTC: the first table is the twelve hours from then, the next starts at noon.
    const noon = T0 + 12 * 60 * MINUTE_MS
    const first = Array.from({ length: 2_000 }, (_, i) => ev(1, { agentId: `a${i % 20}`, at: T0 }))
    for (let i = 0; i < first.length; i += 500) await Promise.all(first.slice(i, i + 500).map((e) => hs.record(e, T0)))
    await hs.record(ev(1, { at: noon }), noon)
    const [meta] = await server.redis.keys(`${p}{p*}:ids`)
    const counts = await server.redis.hgetall(meta!)
    const periods = Object.keys(counts).filter((f) => f.startsWith('b')).sort()
    expect(periods).toHaveLength(2)
    expect(counts[periods[0]!.replace('b', 'n')]).toBe('2000')
    expect(counts[periods[1]!]).toBe(String(2_000 / 40))
    const again = await Promise.all(first.slice(0, 100).map((e) => hs.record({ ...e, at: noon }, noon)))
    expect(again.filter((r) => r.counted)).toEqual([])
  })
})
