import { afterAll, describe, expect, it } from 'vitest'
import { MemoryHotState } from '../../src/hot-state/memory.ts'
import { RedisHotState } from '../../src/hot-state/redis.ts'
import { DEFAULT_POLICY, type AgentLoad, type AgentPolicy, type HotState, type RecordInput } from '../../src/hot-state/types.ts'
import { MINUTE_MS } from '../../src/window.ts'
import { startRedis } from '../helpers/redis.ts'

// One redis-server for this file, started by the first Redis case; each case gets a fresh prefix.
let server: ReturnType<typeof startRedis> | undefined
let prefixes = 0
afterAll(async () => {
  await (await server)?.stop()
})
const emptyLoad = async (): Promise<AgentLoad> => ({ minutes: [], seen: [], policy: null, pause: null })

/**
 * The behaviour every hot-state implementation must have: the in-process one and the Redis
 * one run the same cases, so the two cannot drift.
 */
const implementations: Array<[string, () => Promise<HotState>]> = [
  ['memory', async () => new MemoryHotState()],
  [
    'redis',
    async () => {
      server ??= startRedis()
      return new RedisHotState({ redis: (await server).redis, prefix: `t${++prefixes}:`, loader: emptyLoad })
    },
  ],
]

const T0 = Date.UTC(2026, 0, 1, 0, 0, 30)
const USD = 1_000_000_000
let n = 0
const ref = { userId: 'u', agentId: 'a' }
const ev = (costNano: number, at = T0, extra: Partial<RecordInput> = {}): RecordInput => ({ ...ref, eventId: `e${++n}`, costNano, llmCall: true, at, ...extra })
const policy = (usd: number, o: Partial<AgentPolicy> = {}): AgentPolicy => ({ ...DEFAULT_POLICY, thresholdNano: usd * USD, ...o })

describe.each(implementations)('hot state: %s', (_name, make) => {
  it('sums costs and llm calls exactly in nano-USD', async () => {
    const hs = await make()
    const results = await hs.record([ev(1), ev(2), ev(3, T0, { llmCall: false })], T0)
    expect(results.map((r) => r.totalNano)).toEqual([1, 3, 6])
    const { snapshot } = await hs.get(ref, T0)
    expect(snapshot).toMatchObject({ totalNano: 6, llmCalls: 2, configured: false, pause: { paused: false } })
  })

  it('counts an event id once per user and remembers its cost', async () => {
    const hs = await make()
    const e = ev(5)
    await hs.record([e], T0)
    const again = await hs.record([{ ...e, costNano: 999 }], T0)
    expect(again[0]).toMatchObject({ counted: false, totalNano: 5 })
    expect(await hs.reserve([e, { ...e, userId: 'other-user' }, { ...e, agentId: 'other-agent' }], 'probe', T0)).toEqual([
      { state: 'done', costNano: 5 },
      { state: 'reserved' },
      { state: 'reserved' },
    ])
  })

  it('reserves an unseen event id, and answers a counted one as done with its cost', async () => {
    const hs = await make()
    const e = ev(5)
    expect(await hs.reserve([e], 'instance-1', T0)).toEqual([{ state: 'reserved' }])
    await hs.record([e], T0)
    expect(await hs.reserve([e, { ...e, agentId: 'other-agent' }], 'instance-1', T0)).toEqual([{ state: 'done', costNano: 5 }, { state: 'reserved' }])
  })

  it('keeps isolated totals per user and agent', async () => {
    const hs = await make()
    await hs.record([ev(1), ev(10, T0, { userId: 'v' }), ev(100, T0, { agentId: 'b' })], T0)
    expect((await hs.get(ref, T0)).snapshot.totalNano).toBe(1)
    expect((await hs.get({ userId: 'v', agentId: 'a' }, T0)).snapshot.totalNano).toBe(10)
    expect((await hs.get({ userId: 'u', agentId: 'b' }, T0)).snapshot.totalNano).toBe(100)
  })

  it('expires a minute bucket 24 h later, to the minute, and forgets its event ids', async () => {
    const hs = await make()
    const e = ev(7)
    await hs.record([e, ev(1, T0 + 10 * MINUTE_MS)], T0 + 10 * MINUTE_MS)
    const lastMinute = T0 + 1439 * MINUTE_MS
    expect((await hs.get(ref, lastMinute)).snapshot.totalNano).toBe(8)
    expect((await hs.get(ref, lastMinute + MINUTE_MS)).snapshot.totalNano).toBe(1)
    expect(await hs.reserve([e], 'probe', lastMinute + MINUTE_MS)).toEqual([{ state: 'reserved' }])
    expect((await hs.get(ref, lastMinute + 11 * MINUTE_MS)).snapshot).toMatchObject({ totalNano: 0, llmCalls: 0 })
  })

  it('pauses on the event that goes strictly above the threshold, once', async () => {
    const hs = await make()
    await hs.setPolicy(ref, policy(1), T0)
    const r = await hs.record([ev(USD / 2), ev(USD / 2), ev(1), ev(1)], T0)
    expect(r.map((x) => x.paused)).toEqual([false, false, true, true])
    expect(r.map((x) => x.transitions.map((t) => t.reason))).toEqual([[], [], ['budget'], []])
    expect(r[2]!.transitions[0]).toMatchObject({ paused: true, totalNano: USD + 1, thresholdNano: USD })
  })

  it('a manual resume over budget overrides until the total falls back, then a crossing pauses again', async () => {
    const hs = await make()
    await hs.setPolicy(ref, policy(1), T0)
    await hs.record([ev(2 * USD)], T0)
    expect(await hs.setPaused(ref, false, T0)).toMatchObject({ paused: false, override: true, reason: 'manual' })
    expect((await hs.record([ev(USD)], T0))[0]!.paused).toBe(false)
    const later = T0 + 24 * 60 * MINUTE_MS
    const r = await hs.record([ev(2 * USD, later)], later)
    expect(r[0]!.transitions.map((t) => t.reason)).toEqual(['override_cleared', 'budget'])
    expect(r[0]!.paused).toBe(true)
  })

  it('a changed threshold ends an override; the same threshold does not', async () => {
    const hs = await make()
    await hs.setPolicy(ref, policy(1), T0)
    await hs.record([ev(2 * USD)], T0)
    await hs.setPaused(ref, false, T0)
    expect(await hs.setPolicy(ref, policy(1, { autoResume: true }), T0)).toBeNull()
    expect(await hs.setPolicy(ref, policy(1.5), T0)).toMatchObject({ reason: 'threshold_changed', override: false })
    expect((await hs.record([ev(1)], T0))[0]!.paused).toBe(true)
  })

  it('auto-resumes only with auto_resume, and never a manual pause', async () => {
    const hs = await make()
    const other = { userId: 'u', agentId: 'm' }
    await hs.setPolicy(ref, policy(1, { autoResume: true }), T0)
    await hs.setPolicy(other, policy(1, { autoResume: true }), T0)
    await hs.record([ev(2 * USD)], T0)
    await hs.setPaused(other, true, T0)
    const later = T0 + 24 * 60 * MINUTE_MS
    const { snapshot, transition } = await hs.get(ref, later)
    expect(snapshot.pause.paused).toBe(false)
    expect(transition).toMatchObject({ reason: 'auto_resume', paused: false })
    expect((await hs.get(other, later)).snapshot.pause).toMatchObject({ paused: true, reason: 'manual' })
  })

  it('reads never start a pause', async () => {
    const hs = await make()
    await hs.record([ev(2 * USD)], T0) // under the default 10 USD
    await hs.setPolicy(ref, policy(1), T0)
    const { snapshot, transition } = await hs.get(ref, T0)
    expect(snapshot.pause.paused).toBe(false)
    expect(transition).toBeNull()
  })

  it('manual pause of a budget-paused agent makes the pause manual', async () => {
    const hs = await make()
    await hs.setPolicy(ref, policy(1, { autoResume: true }), T0)
    await hs.record([ev(2 * USD)], T0)
    expect(await hs.setPaused(ref, true, T0)).toMatchObject({ paused: true, reason: 'manual' })
    expect(await hs.setPaused(ref, true, T0)).toBeNull()
  })

  it('restore replaces the state (never adds to it) and acts on a stored crossing', async () => {
    const hs = await make()
    await hs.record([ev(3)], T0)
    const transitions = await hs.restore(
      {
        minutes: [{ ...ref, minute: Math.floor(T0 / MINUTE_MS), costNano: 2 * USD, llmCalls: 2 }],
        seen: [{ ...ref, eventId: 'restored', costNano: USD, minute: Math.floor(T0 / MINUTE_MS) }],
        policies: [{ ...ref, policy: policy(1) }],
        pauses: [],
      },
      T0,
    )
    expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: 2 * USD, llmCalls: 2, configured: true, pause: { paused: true, reason: 'budget' } })
    expect(transitions).toEqual([expect.objectContaining({ reason: 'budget', paused: true })])
    expect(await hs.reserve([{ ...ref, eventId: 'restored' }, { ...ref, eventId: 'e1' }], 'probe', T0)).toEqual([
      { state: 'done', costNano: USD },
      { state: 'reserved' },
    ])
  })

  it('restore keeps an override from the last transition', async () => {
    const hs = await make()
    const transitions = await hs.restore(
      {
        minutes: [{ ...ref, minute: Math.floor(T0 / MINUTE_MS), costNano: 2 * USD, llmCalls: 1 }],
        seen: [],
        policies: [{ ...ref, policy: policy(1) }],
        pauses: [{ ...ref, pause: { paused: false, reason: null, override: true } }],
      },
      T0,
    )
    expect(transitions).toEqual([])
    expect((await hs.get(ref, T0)).snapshot.pause).toEqual({ paused: false, reason: null, override: true })
  })
})

describe('memory hot state', () => {
  it('forgets agents with nothing left to keep, a few per event, and keeps configured ones', async () => {
    const hs = new MemoryHotState()
    await hs.setPolicy({ userId: 'u', agentId: 'kept' }, policy(1), T0)
    await hs.record(
      Array.from({ length: 100 }, (_, i) => ev(1, T0, { agentId: `idle${i}` })),
      T0,
    )
    const later = T0 + 24 * 60 * MINUTE_MS
    // Each batch visits a bounded number of agents; enough batches visit them all.
    for (let i = 0; i < 60; i++) await hs.record([ev(1, later, { agentId: 'live' })], later)
    expect(hs.size).toBe(2) // 'kept' (configured) and 'live'
  })
})
