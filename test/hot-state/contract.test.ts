import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { fingerprint } from '../../src/hot-state/dedup.ts'
import { MemoryHotState } from '../../src/hot-state/memory.ts'
import { RedisHotState } from '../../src/hot-state/redis.ts'
import { fleetOf, type AgentRef } from '../../src/hot-state/agent-ref.ts'
import { DEFAULT_POLICY, type AgentPolicy } from '../../src/hot-state/meters.ts'
import { type AgentLoad, type HoldRequest, type HotState, type RecordEvent, type RecordInput } from '../../src/hot-state/types.ts'
import { RedisJournal } from '../../src/journal/redis-streams.ts'
import { SegmentLog } from '../../src/journal/segment-log.ts'
import { JournalFullError, type JournalSource, type JournalTable } from '../../src/journal/types.ts'
import { toChDateTime64us } from '../../src/storage/clickhouse.ts'
import { agentKeyId } from '../../src/storage/redis-keys.ts'
import { MINUTE_MS, minuteOf } from '../../src/rolling-day.ts'
import { packedState, startRedis } from '../helpers/redis.ts'
import { startRedisCluster } from '../helpers/redis-cluster.ts'

// One redis-server and one Redis Cluster for this file, started by the first case of each;
// each case gets a fresh prefix.
let server: ReturnType<typeof startRedis> | undefined
let cluster: ReturnType<typeof startRedisCluster> | undefined
let prefixes = 0
afterAll(async () => {
  await (await server)?.stop()
  await (await cluster)?.stop()
})
const emptyLoad = async (): Promise<AgentLoad> => ({ minutes: [], seen: [], policy: null, policyVersion: 0, pause: null, ignored: null })

interface Subject {
  hs: HotState
  /** The rows journaled since the last call, as the shipper would send them. */
  journaled(): Promise<Array<{ table: JournalTable; row: Record<string, unknown> }>>
}

/**
 * The behaviour every hot-state implementation must have, its journal included: the
 * in-process one with the segment log and the Redis one with its streams run the same
 * cases, so the two cannot drift.
 */
const implementations: Array<[string, (o?: { maxRows?: number }) => Promise<Subject>]> = [
  [
    'memory + segment log',
    async (o = {}) => {
      const log = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-hs-')), fsync: false, maxRows: o.maxRows ?? 1_000_000 })
      return { hs: new MemoryHotState(log), journaled: () => drain(log) }
    },
  ],
  [
    'redis + streams',
    async (o = {}) => {
      server ??= startRedis()
      const { redis } = await server
      const prefix = `t${++prefixes}:`
      const journal = new RedisJournal({ redis, instance: 'i', partitions: 1, maxRows: o.maxRows ?? 1_000_000, prefix })
      await journal.register()
      const hs = new RedisHotState({ redis, prefix, journal, loader: emptyLoad, userAgents: async () => [] })
      return { hs, journaled: () => drain(journal) }
    },
  ],
  [
    // The same cases with every recordAll() sent at once: the Redis hot state takes them in
    // one call per partition (its group commit), and each answer must be what it was alone.
    'redis + streams, events sent together',
    async (o = {}) => {
      const subject = await implementations[1]![1](o)
      sentTogether.add(subject.hs)
      return subject
    },
  ],
  [
    // The same scripts on a real cluster of three masters with a replica each, the
    // journal's partitions spread over the masters.
    'redis cluster + streams',
    async (o = {}) => {
      cluster ??= startRedisCluster()
      const redis = (await cluster).cluster
      const prefix = `t${++prefixes}:`
      // The bound is spread over the partitions (maxRows / partitions a stream), and a case's
      // user writes to one: each stream gets the case's whole bound.
      const partitions = 8
      const journal = new RedisJournal({ redis, instance: 'i', partitions, maxRows: (o.maxRows ?? 1_000_000) * partitions, prefix })
      await journal.register()
      const hs = new RedisHotState({ redis, prefix, journal, loader: emptyLoad, userAgents: async () => [] })
      return { hs, journaled: () => drain(journal) }
    },
  ],
]

async function drain(journal: JournalSource) {
  const batch = await journal.next(1_000_000)
  if (!batch) return []
  await journal.commit(batch)
  return batch.entries.map((e) => ({ table: e.table, row: JSON.parse(e.json.toString('utf8')) as Record<string, unknown> }))
}

const T0 = Date.UTC(2026, 0, 1, 0, 0, 30)
const USD = 1_000_000_000
let n = 0
const ref = { userId: 'u', agentId: 'a' }
const ev = (costNano: number, at = T0, extra: Partial<RecordInput> = {}): RecordEvent => {
  const e = { ...ref, eventId: `e${++n}`, costNano, llmCall: true, at, ...extra }
  return { ...e, row: rowOf(e) }
}
const policy = (usd: number, o: Partial<AgentPolicy> = {}): AgentPolicy => ({ ...DEFAULT_POLICY, thresholdNano: usd * USD, ...o })

function rowOf(e: RecordInput): RecordEvent['row'] {
  return {
    user_id: e.userId,
    agent_id: e.agentId,
    timestamp: toChDateTime64us(e.at * 1000),
    event_id: e.eventId,
    event_type: e.llmCall ? 'llm_call' : 'tool_call',
    model: '',
    input_tokens: 0,
    output_tokens: 0,
    cache_read_tokens: 0,
    cache_write_tokens: 0,
    tool_name: null,
    metadata: '',
    cost_nano: e.costNano,
    price_fallback: false,
  }
}

/** The stores whose recordAll() sends its events at once rather than one after the other. */
const sentTogether = new WeakSet<HotState>()

/** Records one after the other, as requests would; or all at once, for the stores in sentTogether. */
async function recordAll(hs: HotState, events: RecordEvent[], now = T0) {
  if (sentTogether.has(hs)) return Promise.all(events.map((e) => hs.record(e, now)))
  const results = []
  for (const e of events) results.push(await hs.record(e, now))
  return results
}

describe.each(implementations)('hot state: %s', (_name, make) => {
  it('sums costs and llm calls exactly in nano-USD', async () => {
    const { hs } = await make()
    const results = await recordAll(hs, [ev(1), ev(2), ev(3, T0, { llmCall: false })])
    expect(results.map((r) => r.totalNano)).toEqual([1, 3, 6])
    const { snapshot } = await hs.get(ref, T0)
    expect(snapshot).toMatchObject({ active: true, totalNano: 6, llmCalls: 2, configured: false, pause: { paused: false } })
  })

  it('journals each counted event with its step, exactly as given, and a repeat not at all', async () => {
    const { hs, journaled } = await make()
    const e = ev(5)
    await hs.record(e, T0)
    const again = await hs.record({ ...e, costNano: 999, row: { ...e.row, cost_nano: 999 } }, T0)
    expect(again).toMatchObject({ counted: false, costNano: 5, totalNano: 5, transitions: [] })
    expect(await journaled()).toEqual([{ table: 'events', row: e.row }])
  })

  it('counts an event id once per user and agent, and remembers its first cost', async () => {
    const { hs } = await make()
    const e = ev(5)
    await hs.record(e, T0)
    expect(await hs.record(e, T0)).toMatchObject({ counted: false, costNano: 5 })
    expect(await hs.record({ ...e, userId: 'other-user' }, T0)).toMatchObject({ counted: true, totalNano: 5 })
    expect(await hs.record({ ...e, agentId: 'other-agent' }, T0)).toMatchObject({ counted: true, totalNano: 5 })
  })

  it('keeps isolated totals per user and agent', async () => {
    const { hs } = await make()
    await recordAll(hs, [ev(1), ev(10, T0, { userId: 'v' }), ev(100, T0, { agentId: 'b' })])
    expect((await hs.get(ref, T0)).snapshot.totalNano).toBe(1)
    expect((await hs.get({ userId: 'v', agentId: 'a' }, T0)).snapshot.totalNano).toBe(10)
    expect((await hs.get({ userId: 'u', agentId: 'b' }, T0)).snapshot.totalNano).toBe(100)
  })

  it('expires a minute bucket 24 h later, to the minute, and forgets its event ids', async () => {
    const { hs } = await make()
    const e = ev(7)
    await recordAll(hs, [e, ev(1, T0 + 10 * MINUTE_MS)], T0 + 10 * MINUTE_MS)
    const lastMinute = T0 + 1439 * MINUTE_MS
    expect((await hs.get(ref, lastMinute)).snapshot.totalNano).toBe(8)
    expect((await hs.get(ref, lastMinute + MINUTE_MS)).snapshot.totalNano).toBe(1)
    // Its minute has left the window: the id is new again.
    expect(await hs.record({ ...e, at: lastMinute + MINUTE_MS }, lastMinute + MINUTE_MS)).toMatchObject({ counted: true, totalNano: 8 })
    expect((await hs.get(ref, lastMinute + 1450 * MINUTE_MS)).snapshot).toMatchObject({ active: false, totalNano: 0, llmCalls: 0 })
  })

  it('lists the agents of a user with events in the window, and only those', async () => {
    const { hs } = await make()
    await recordAll(hs, [ev(1, T0, { agentId: 'x' }), ev(1, T0 + 60 * MINUTE_MS, { agentId: 'y' }), ev(1, T0, { userId: 'v', agentId: 'z' })], T0 + 60 * MINUTE_MS)
    await hs.setPolicy({ userId: 'u', agentId: 'configured-only' }, policy(1), T0, 'key-1')
    const ids = async (userId: string, now: number) => (await hs.listAgents(userId, now)).map((a) => a.agentId).sort()
    expect(await ids('u', T0 + 60 * MINUTE_MS)).toEqual(['x', 'y'])
    expect(await ids('v', T0 + 60 * MINUTE_MS)).toEqual(['z'])
    // x's only minute has left the window.
    const later = T0 + 1440 * MINUTE_MS
    const listed = await hs.listAgents('u', later)
    expect(listed.map((a) => a.agentId)).toEqual(['y'])
    expect(listed[0]!.snapshot).toMatchObject({ active: true, totalNano: 1, llmCalls: 1, configured: false, lastEventMinute: minuteOf(T0) + 60 })
  })

  it("says the minute of an agent's newest event in the window, whatever its type, and none once it left", async () => {
    const { hs } = await make()
    expect((await hs.get(ref, T0)).snapshot.lastEventMinute).toBeNull()
    await recordAll(hs, [ev(1, T0 + 5 * MINUTE_MS), ev(0, T0 + 7 * MINUTE_MS, { llmCall: false }), ev(1, T0 + 3 * MINUTE_MS)], T0 + 7 * MINUTE_MS)
    expect((await hs.get(ref, T0 + 8 * MINUTE_MS)).snapshot.lastEventMinute).toBe(minuteOf(T0) + 7)
    expect((await hs.get(ref, T0 + 1447 * MINUTE_MS)).snapshot).toMatchObject({ active: false, lastEventMinute: null })
  })

  it('projects when the total reaches the threshold at the last hour\'s rate, waiting for what leaves the window', async () => {
    const { hs } = await make()
    const HOUR_MS = 60 * MINUTE_MS
    await hs.setPolicy(ref, policy(10), T0, 'key-1')
    // 5 USD in T0's hour (it leaves 24 h after that hour's last minute, 24 h 59 min after the
    // hour began), then 1 USD 22 h 50 min later: 6 USD, 1 USD in the last hour.
    const first = await hs.record(ev(5 * USD, T0), T0)
    expect(first).toMatchObject({ totalNano: 5 * USD, thresholdNano: 10 * USD })
    // All 5 USD in the last hour: 1 h more at 5 USD/h.
    expect(first.exhaustionAt).toBe(T0 + HOUR_MS)
    const later = T0 + 22 * HOUR_MS + 50 * MINUTE_MS
    const second = await hs.record(ev(USD, later), later)
    // 4 USD to go would take 4 h, but the 5 USD leave first (2 h 8 min 30 s from now); then 9 USD to go: 9 h.
    expect(second).toMatchObject({ totalNano: 6 * USD, thresholdNano: 10 * USD, exhaustionAt: later + 9 * HOUR_MS })
    const now = T0 + 23 * HOUR_MS
    expect((await hs.get(ref, now)).exhaustionAt).toBe(now + 9 * HOUR_MS)
    // Nothing in the last hour: no projection. Over the threshold: exhausted now.
    expect((await hs.get(ref, now + 2 * HOUR_MS)).exhaustionAt).toBeNull()
    const over = await hs.record(ev(9 * USD, now + 2 * HOUR_MS), now + 2 * HOUR_MS)
    expect(over).toMatchObject({ totalNano: 10 * USD, exhaustionAt: now + 2 * HOUR_MS })
    // An agent never seen: nothing spent, nothing projected.
    expect((await hs.get({ userId: 'u', agentId: 'unseen' }, now)).exhaustionAt).toBeNull()
  })

  it('pauses on the event that goes strictly above the threshold, once, and journals the transition with the event', async () => {
    const { hs, journaled } = await make()
    await hs.setPolicy(ref, policy(1, { alertAt: [] }), T0, 'key-1')
    await journaled()
    const r = await recordAll(hs, [ev(USD / 2), ev(USD / 2), ev(1), ev(1)])
    expect(r.map((x) => x.paused)).toEqual([false, false, true, true])
    expect(r.map((x) => x.transitions.map((t) => t.reason))).toEqual([[], [], ['budget'], []])
    expect(r[2]!.transitions[0]).toMatchObject({ paused: true, totalNano: USD + 1, thresholdNano: USD })
    const rows = await journaled()
    expect(rows.map((x) => x.table)).toEqual(['events', 'events', 'events', 'pause_transitions', 'events'])
    expect(rows[3]!.row).toMatchObject({ user_id: 'u', agent_id: 'a', is_paused: true, reason: 'budget', override: false, total_nano: USD + 1, version: r[2]!.transitions[0]!.version })
  })

  it('a manual resume over budget overrides until the total falls back, then a crossing pauses again', async () => {
    const { hs } = await make()
    await hs.setPolicy(ref, policy(1), T0, 'key-1')
    await hs.record(ev(2 * USD), T0)
    expect(await hs.setPaused(ref, false, T0, 'key-1')).toMatchObject({ paused: false, override: true, reason: 'manual' })
    expect((await hs.record(ev(USD), T0)).paused).toBe(false)
    const later = T0 + 24 * 60 * MINUTE_MS
    const r = await hs.record(ev(2 * USD, later), later)
    expect(r.transitions.map((t) => t.reason)).toEqual(['override_cleared', 'budget'])
    expect(r.paused).toBe(true)
  })

  it('a changed threshold ends an override; the same threshold does not; each config is journaled', async () => {
    const { hs, journaled } = await make()
    await hs.setPolicy(ref, policy(1), T0, 'key-1')
    await hs.record(ev(2 * USD), T0)
    await hs.setPaused(ref, false, T0, 'key-1')
    await journaled()
    expect(await hs.setPolicy(ref, policy(1, { autoResume: true }), T0, 'key-1')).toBeNull()
    expect(await hs.setPolicy(ref, policy(1.5), T0, 'key-1')).toMatchObject({ reason: 'threshold_changed', override: false })
    expect((await hs.record(ev(1), T0)).paused).toBe(true)
    const rows = await journaled()
    expect(rows.map((r) => [r.table, r.row.threshold_nano ?? r.row.reason])).toEqual([
      ['agent_configs', USD],
      ['agent_configs', 1.5 * USD],
      ['pause_transitions', 'threshold_changed'],
      ['events', undefined],
      ['pause_transitions', 'budget'],
    ])
    expect(rows[0]!.row).toMatchObject({ user_id: 'u', agent_id: 'a', auto_resume: true, slack_webhook_url: null })
  })

  it('projects from the last 60 of many minute buckets', async () => {
    const { hs } = await make()
    await hs.setPolicy(ref, policy(100, { alertAt: [] }), T0, 'key-1')
    // 1 USD in each of 70 minutes: the last hour holds 60 of them.
    for (let k = 0; k < 70; k++) await hs.record(ev(USD, T0 + k * MINUTE_MS), T0 + k * MINUTE_MS)
    const now = T0 + 69 * MINUTE_MS
    // 30 USD to go at 60 USD an hour: half an hour, long before anything leaves the window.
    expect((await hs.get(ref, now)).exhaustionAt).toBe(now + 30 * MINUTE_MS)
  })

  it('fires each alert level once per crossing, re-arms it only below, and journals it with the event', async () => {
    const { hs, journaled } = await make()
    await hs.setPolicy(ref, policy(10, { alertAt: [0.5, 0.8, 0.9] }), T0, 'key-1')
    await journaled()
    const levels = async (usd: number, at = T0) => (await hs.record(ev(usd * USD, at), at)).alerts.map((a) => a.level)
    expect(await levels(4)).toEqual([]) // 4 of 10
    expect(await levels(1)).toEqual([0.5]) // 5: at the level fires it
    expect(await levels(1)).toEqual([]) // 6: still above, fired already
    expect(await levels(3.5)).toEqual([0.8, 0.9]) // 9.5: two levels in one event
    const rows = await journaled()
    expect(rows.filter((r) => r.table === 'budget_alerts').map((r) => [r.row.level, r.row.total_nano, r.row.threshold_nano])).toEqual([
      [0.5, 5 * USD, 10 * USD],
      [0.8, 9.5 * USD, 10 * USD],
      [0.9, 9.5 * USD, 10 * USD],
    ])
    // A repeat of an event fires nothing.
    const e = ev(USD)
    await hs.record(e, T0)
    expect((await hs.record(e, T0)).alerts).toEqual([])
    // A day later the window is empty: every level re-armed, and crossing again fires again.
    const later = T0 + 1440 * MINUTE_MS
    const again = await hs.record(ev(8 * USD, later), later)
    expect(again.alerts.map((a) => [a.level, a.totalNano, a.thresholdNano])).toEqual([
      [0.5, 8 * USD, 10 * USD],
      [0.8, 8 * USD, 10 * USD],
    ])
    expect(again.alerts[0]!.version).toBeLessThan(again.alerts[1]!.version)
  })

  it('keeps a level\'s state across a config change, arms a new one, and sends none with no levels', async () => {
    const { hs } = await make()
    await hs.setPolicy(ref, policy(10, { alertAt: [0.5] }), T0, 'key-1')
    expect((await hs.record(ev(6 * USD), T0)).alerts.map((a) => a.level)).toEqual([0.5])
    // 0.5 stays fired; 0.6 is new and the total (6) is at it: the next event fires it, not 0.5.
    await hs.setPolicy(ref, policy(10, { alertAt: [0.5, 0.6] }), T0, 'key-1')
    expect((await hs.record(ev(1), T0)).alerts.map((a) => a.level)).toEqual([0.6])
    // A lower threshold puts the total over 0.8 of it: that level is new, so it fires.
    await hs.setPolicy(ref, policy(7, { alertAt: [0.5, 0.6, 0.8] }), T0, 'key-1')
    expect((await hs.record(ev(1), T0)).alerts.map((a) => a.level)).toEqual([0.8])
    await hs.setPolicy({ ...ref, agentId: 'quiet' }, policy(1, { alertAt: [] }), T0, 'key-1')
    expect((await hs.record(ev(2 * USD, T0, { agentId: 'quiet' }), T0)).alerts).toEqual([])
  })

  it('journals who set a config and the config it replaced, and who paused or resumed (the audit log)', async () => {
    const { hs, journaled } = await make()
    const hook = 'https://hooks.example.com/services/T0/B0/secretsecret'
    await hs.setPolicy(ref, policy(1, { webhookUrl: hook }), T0, 'key-1')
    await hs.setPolicy(ref, policy(2), T0, 'key-2')
    await hs.setPaused(ref, true, T0, 'key-3')
    await hs.record(ev(3 * USD), T0)
    await hs.setPaused(ref, false, T0, 'key-4')
    const later = T0 + 1440 * MINUTE_MS
    await hs.record(ev(1, later), later) // the total fell back under: the override ends on its own
    const rows = (await journaled()).filter((r) => r.table !== 'events' && r.table !== 'budget_alerts')
    const shown = (usd: number, webhook: string | null) => ({ cost_threshold_usd: usd, slack_webhook_url: webhook, auto_resume: false, alert_at: [0.8], velocity_limit_usd: null, velocity_window_minutes: 5, period_budgets: [], run_budget_usd: null })
    const configs = rows
      .filter((r) => r.table === 'agent_configs')
      .map((r) => ({ actor: r.row.actor, shown: JSON.parse(r.row.shown as string), replaced: r.row.replaced }))
    expect(configs.map((c) => [c.actor, c.shown.cost_threshold_usd])).toEqual([['key-1', 1], ['key-2', 2]])
    expect(configs[0]!.replaced).toBe('')
    expect(JSON.parse(configs[1]!.replaced as string)).toEqual(shown(1, configs[0]!.shown.slack_webhook_url))
    expect(configs[0]!.shown.slack_webhook_url).not.toContain('secretsecret')
    expect(configs[0]!.shown).toEqual(shown(1, expect.stringMatching(/^https:\/\/hooks\.example\.com\//)))
    expect(rows.filter((r) => r.table === 'pause_transitions').map((r) => [r.row.reason, r.row.is_paused, r.row.actor])).toEqual([
      ['manual', true, 'key-3'],
      ['manual', false, 'key-4'],
      ['override_cleared', false, 'system'],
    ])
  })

  it('auto-resumes only with auto_resume, and never a manual pause; the resume is journaled by the read that sees it', async () => {
    const { hs, journaled } = await make()
    const other = { userId: 'u', agentId: 'm' }
    await hs.setPolicy(ref, policy(1, { autoResume: true }), T0, 'key-1')
    await hs.setPolicy(other, policy(1, { autoResume: true }), T0, 'key-1')
    await hs.record(ev(2 * USD), T0)
    await hs.setPaused(other, true, T0, 'key-1')
    await journaled()
    const later = T0 + 24 * 60 * MINUTE_MS
    const { snapshot, transition } = await hs.get(ref, later)
    expect(snapshot.pause.paused).toBe(false)
    expect(transition).toMatchObject({ reason: 'auto_resume', paused: false })
    expect((await hs.get(other, later)).snapshot.pause).toMatchObject({ paused: true, reason: 'manual' })
    expect((await journaled()).map((r) => r.row.reason)).toEqual(['auto_resume'])
  })

  it('reads never start a pause', async () => {
    const { hs } = await make()
    await hs.record(ev(2 * USD), T0) // under the default 10 USD
    await hs.setPolicy(ref, policy(1), T0, 'key-1')
    const { snapshot, transition } = await hs.get(ref, T0)
    expect(snapshot.pause.paused).toBe(false)
    expect(transition).toBeNull()
  })

  it('manual pause of a budget-paused agent makes the pause manual; the same again changes nothing', async () => {
    const { hs, journaled } = await make()
    await hs.setPolicy(ref, policy(1, { autoResume: true }), T0, 'key-1')
    await hs.record(ev(2 * USD), T0)
    await journaled()
    expect(await hs.setPaused(ref, true, T0, 'key-1')).toMatchObject({ paused: true, reason: 'manual' })
    expect(await hs.setPaused(ref, true, T0, 'key-1')).toBeNull()
    expect((await journaled()).map((r) => r.row.reason)).toEqual(['manual'])
  })

  it('remembers when a pause began: at the event or the call that paused it, anew for a manual pause, 0 once resumed', async () => {
    const { hs } = await make()
    await hs.setPolicy(ref, policy(1, { alertAt: [] }), T0, 'key-1')
    const later = (minutes: number) => T0 + minutes * MINUTE_MS
    await hs.record(ev(2 * USD, later(1)), later(1))
    expect((await hs.get(ref, later(2))).snapshot.pause).toEqual({ paused: true, reason: 'budget', override: false, since: later(1) })
    await hs.setPaused(ref, true, later(3), 'key-1')
    expect((await hs.get(ref, later(4))).snapshot.pause).toEqual({ paused: true, reason: 'manual', override: false, since: later(3) })
    await hs.setPaused(ref, false, later(5), 'key-1')
    expect((await hs.get(ref, later(6))).snapshot.pause).toEqual({ paused: false, reason: null, override: true, since: 0 })
    await hs.setPaused(fleetOf('u'), true, later(7), 'key-1')
    expect((await hs.get(fleetOf('u'), later(8))).snapshot.pause.since).toBe(later(7))
  })

  it('versions an agent\'s transitions in the order they happened', async () => {
    const { hs } = await make()
    const versions = []
    for (let i = 0; i < 5; i++) versions.push((await hs.setPaused(ref, i % 2 === 0, T0, 'key-1'))!.version)
    expect([...versions].sort((x, y) => x - y)).toEqual(versions)
    expect(new Set(versions).size).toBe(5)
  })

  describe('the spend-velocity limit', () => {
    const fast = (o: Partial<AgentPolicy> = {}) => policy(100, { velocityLimitNano: 2 * USD, velocityWindowMinutes: 5, alertAt: [], ...o })
    const at = (minute: number) => T0 + minute * MINUTE_MS

    it('pauses on the event that takes the spend of the window strictly over the limit, and not the same spend spread out', async () => {
      const { hs, journaled } = await make()
      await hs.setPolicy(ref, fast(), T0, 'key-1')
      const spread = { userId: 'u', agentId: 'spread' }
      // A daily budget the day never reaches; a limit under two events' spend.
      await hs.setPolicy(spread, fast({ thresholdNano: 1000 * USD, velocityLimitNano: 1.5 * USD }), T0, 'key-1')
      await journaled()
      // 1 USD a minute: 2 USD in the window is at the limit, the third is over it.
      const burst = []
      for (const m of [0, 1, 2]) burst.push(await hs.record(ev(USD, at(m)), at(m)))
      expect(burst.map((r) => r.pausedReason)).toEqual([null, null, 'velocity'])
      expect(burst[2]!.transitions).toEqual([
        expect.objectContaining({ reason: 'velocity', paused: true, meter: { id: 'velocity', spentNano: 3 * USD, limitNano: 2 * USD, windowMinutes: 5 } }),
      ])
      expect((await journaled()).filter((r) => r.table === 'pause_transitions').map((r) => r.row.reason)).toEqual(['velocity'])
      // The same 1 USD every 5 minutes, over a day: the window never holds two of them (minute 0
      // is not in the 5 minutes up to minute 5).
      for (let m = 0; m < 1440; m += 5) {
        const r = await hs.record(ev(USD, at(m), { agentId: 'spread' }), at(m))
        if (r.paused) throw new Error(`paused at minute ${m}: ${r.pausedReason}`)
      }
      expect((await hs.get(spread, at(1439))).snapshot).toMatchObject({ totalNano: 288 * USD, pause: { paused: false } })
    })

    it('holds until a manual resume (never auto-resumes); a resume while still fast overrides until the spend falls back', async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, fast({ autoResume: true }), T0, 'key-1')
      for (const m of [0, 0, 0]) await hs.record(ev(USD, at(m)), at(m))
      expect((await hs.get(ref, at(60))).snapshot.pause).toEqual({ paused: true, reason: 'velocity', override: false, since: at(0) })
      // Resumed within the window that paused it: the override keeps it running.
      expect(await hs.setPaused(ref, false, at(1), 'key-2')).toMatchObject({ paused: false, override: true })
      expect((await hs.record(ev(USD, at(2)), at(2))).paused).toBe(false)
      // Once the window's spend is back under the limit the override ends, and a new burst pauses again.
      const later = await hs.record(ev(USD, at(10)), at(10))
      expect(later.transitions.map((t) => t.reason)).toEqual(['override_cleared'])
      expect((await hs.record(ev(2 * USD, at(11)), at(11))).pausedReason).toBe('velocity')
    })

    it('a fleet over its velocity limit pauses every agent of the user', async () => {
      const { hs } = await make()
      await hs.setPolicy(fleetOf('u'), fast(), T0, 'key-1')
      const r = await recordAll(hs, ['a', 'b', 'c'].map((agentId) => ev(USD, T0, { agentId })))
      expect(r.map((x) => x.pausedReason)).toEqual([null, null, 'fleet_velocity'])
      expect(r[2]!.transitions.map((t) => [t.agentId, t.reason])).toEqual([['', 'velocity']])
    })
  })

  describe('period budgets', () => {
    const month = { period: 'month', timeZone: 'America/New_York', weekStarts: 'monday', monthStartsOn: 1 } as const
    const withPeriods = (...periodBudgets: AgentPolicy['periodBudgets']) => policy(1000, { alertAt: [0.5], periodBudgets })
    // 2026-03-31 20:00 in New York (EDT, -4): the month ends at 04:00 UTC on April 1.
    const lateMarch = Date.UTC(2026, 3, 1, 0, 0)

    it('pauses on the event strictly over a month, refuses holds past it, and resumes when the next month begins (journaled)', async () => {
      const { hs, journaled } = await make()
      await hs.setPolicy(ref, withPeriods({ spec: month, limitNano: 3 * USD }), lateMarch, 'key-1')
      const r = await recordAll(hs, [ev(USD, lateMarch), ev(2 * USD, lateMarch), ev(USD, lateMarch)], lateMarch)
      expect(r.map((x) => [x.pausedReason, x.pausedPeriod])).toEqual([
        [null, null],
        [null, null],
        ['period_budget', 'month'],
      ])
      expect(r[1]!.alerts.map((x) => [x.meter, x.level])).toEqual([['period_budget:month', 0.5]])
      expect(r[2]!.transitions).toEqual([expect.objectContaining({ reason: 'period_budget:month', paused: true, meter: expect.objectContaining({ id: 'period_budget:month', spentNano: 4 * USD, limitNano: 3 * USD }) })])
      expect(r[2]!.periods).toEqual([expect.objectContaining({ spentNano: 4 * USD, meter: expect.objectContaining({ from: Date.UTC(2026, 2, 1, 5) / 60_000, endsAt: Date.UTC(2026, 3, 1, 4) }) })])
      await journaled()
      const endsAt = Date.UTC(2026, 3, 1, 4)
      expect((await hs.get(ref, endsAt - 1)).snapshot.pause.paused).toBe(true)
      const next = await hs.get(ref, endsAt)
      expect(next.snapshot.pause.paused).toBe(false)
      expect(next.transition).toMatchObject({ reason: 'auto_resume', paused: false, meter: expect.objectContaining({ id: 'period_budget:month' }) })
      expect(next.snapshot.periods.map((p) => [p.spentNano, p.meter.from])).toEqual([[0, endsAt / 60_000]])
      expect((await journaled()).filter((x) => x.table === 'pause_transitions').map((x) => x.row.reason)).toEqual(['auto_resume'])
      expect((await hs.hold(ref, { holdId: 'h1', costNano: 4 * USD, expiresAt: endsAt + 60_000 }, endsAt)).refusal).toBe('period_budget')
      expect((await hs.hold(ref, { holdId: 'h2', costNano: 3 * USD, expiresAt: endsAt + 60_000 }, endsAt)).refusal).toBeNull()
    })

    it('a rolling window sums the hours it holds and its pause ends once they leave it', async () => {
      const { hs } = await make()
      const h0 = Date.UTC(2026, 5, 1, 10, 30)
      await hs.setPolicy(ref, withPeriods({ spec: { windowDays: 1 }, limitNano: 2 * USD }), h0, 'key-1')
      await hs.record(ev(2 * USD, h0), h0)
      const paused = await hs.record(ev(USD, h0 + 3_600_000), h0 + 3_600_000)
      expect([paused.pausedReason, paused.pausedPeriod]).toEqual(['period_budget', 'window_1d'])
      // The first hour's 2 USD leave as hour 10 + 24 begins.
      expect((await hs.get(ref, Date.UTC(2026, 5, 2, 9, 59))).snapshot.periods[0]!.spentNano).toBe(3 * USD)
      const after = await hs.get(ref, Date.UTC(2026, 5, 2, 10))
      expect([after.snapshot.periods[0]!.spentNano, after.snapshot.pause.paused]).toEqual([USD, false])
    })

    it('a fleet period pauses every agent of the user, and each agent keeps its own periods', async () => {
      const { hs } = await make()
      await hs.setPolicy(fleetOf('u'), withPeriods({ spec: { ...month, period: 'week', weekStarts: 'sunday' }, limitNano: 2 * USD }), T0, 'key-1')
      const r = await recordAll(hs, ['a', 'b', 'c'].map((agentId) => ev(USD, T0, { agentId })))
      expect(r.map((x) => [x.pausedReason, x.pausedPeriod])).toEqual([
        [null, null],
        [null, null],
        ['fleet_period_budget', 'week'],
      ])
      expect((await hs.get(fleetOf('u'), T0)).snapshot.periods.map((p) => p.spentNano)).toEqual([3 * USD])
    })
  })

  describe("an API key's budget of events", () => {
    const charge = (max: number, key = 'events:k1') => ({ key, max, windowMs: 60_000 })

    it('counts events, holds and releases against one window, refuses past it before anything is done, and starts again when it ends', async () => {
      const { hs, journaled } = await make()
      const rate = charge(3)
      expect((await hs.record({ ...ev(1), rate }, T0)).rate).toEqual({ max: 3, current: 1, ttlMs: 60_000 })
      expect((await hs.hold(ref, { holdId: 'h1', costNano: 1, expiresAt: T0 + 60_000, rate }, T0 + 1000)).rate).toEqual({ max: 3, current: 2, ttlMs: 59_000 })
      expect((await hs.release('u', 'h1', T0 + 2000, rate)).rate).toEqual({ max: 3, current: 3, ttlMs: 58_000 })
      await journaled()
      const refused = { ...ev(5), rate }
      await expect(hs.record(refused, T0 + 3000)).rejects.toMatchObject({ name: 'RateLimitedError', rate: { max: 3, current: 4, ttlMs: 57_000 } })
      await expect(hs.hold(ref, { holdId: 'h2', costNano: 1, expiresAt: T0 + 60_000, rate }, T0 + 3000)).rejects.toMatchObject({ rate: { current: 5 } })
      await expect(hs.release('u', 'h2', T0 + 3000, rate)).rejects.toMatchObject({ rate: { current: 6 } })
      // Nothing of the refused ones was done: no row, no count, no hold.
      expect(await journaled()).toEqual([])
      expect((await hs.get(ref, T0 + 3000)).snapshot).toMatchObject({ totalNano: 1, heldNano: 0 })
      // Another key has a budget of its own; the window's end starts this one again.
      expect((await hs.record({ ...ev(1), rate: charge(3, 'events:k2') }, T0 + 3000)).rate).toMatchObject({ current: 1 })
      expect((await hs.record({ ...refused }, T0 + 60_000)).rate).toEqual({ max: 3, current: 1, ttlMs: 60_000 })
      expect((await hs.get(ref, T0 + 60_000)).snapshot.totalNano).toBe(7)
    })

    it('counts concurrent charges exactly: no more than the budget pass', async () => {
      const { hs } = await make()
      const results = await Promise.allSettled(Array.from({ length: 30 }, () => hs.record({ ...ev(1), rate: charge(20) }, T0)))
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(20)
      expect((await hs.get(ref, T0)).snapshot.totalNano).toBe(20)
    })
  })

  describe('agents that ignore their pause', () => {
    it('flags the first llm_call after the pause and its grace, once, counts the rest, and forgets them on resume', async () => {
      const { hs, journaled } = await make()
      await hs.setPolicy(ref, policy(1, { alertAt: [] }), T0, 'key-1')
      await hs.record(ev(2 * USD, T0), T0) // paused at T0
      await journaled()
      // Within the grace (60 s by default) a call may have been in flight: not counted.
      const edge = T0 + 60_000
      expect((await hs.record(ev(USD, edge), edge)).ignored).toBeNull()
      const after = edge + 1
      // Only llm_calls count; a tool call does not.
      expect((await hs.record(ev(USD, after, { llmCall: false }), after)).ignored).toBeNull()
      const first = ev(USD, after)
      expect((await hs.record(first, after)).ignored).toMatchObject({ userId: 'u', agentId: 'a', pausedSince: T0, calls: 1, costNano: USD, at: after })
      expect((await hs.record(first, after)).ignored).toBeNull() // a repeat counts nothing
      expect((await hs.record(ev(2 * USD, after), after)).ignored).toBeNull() // raised once per pause
      expect((await hs.get(ref, after)).snapshot.ignored).toEqual({ since: T0, calls: 2, nano: 3 * USD, flagged: true })
      const rows = (await journaled()).filter((r) => r.table === 'ignored_pauses')
      expect(rows.map((r) => r.row)).toEqual([expect.objectContaining({ user_id: 'u', agent_id: 'a', paused_at_ms: T0, calls: 1, cost_nano: USD })])
      // Resumed: nothing holds, and the next call forgets the counts.
      await hs.setPaused(ref, false, after, 'key-1')
      expect((await hs.record(ev(USD, after + 1), after + 1)).ignored).toBeNull()
      expect((await hs.get(ref, after + 1)).snapshot.ignored).toEqual({ since: 0, calls: 0, nano: 0, flagged: false })
      // A new pause starts a new count and may raise the flag again.
      await hs.setPaused(ref, true, after + 2, 'key-1')
      const later = after + 2 + 60_001
      expect((await hs.record(ev(USD, later), later)).ignored).toMatchObject({ pausedSince: after + 2, calls: 1 })
    })

    it('counts an agent\'s calls against its fleet\'s pause when the fleet holds it', async () => {
      const { hs } = await make()
      await hs.setPaused(fleetOf('u'), true, T0, 'key-1')
      const after = T0 + 60_001
      expect((await hs.record(ev(USD, after, { agentId: 'b' }), after)).ignored).toMatchObject({ agentId: 'b', pausedSince: T0, calls: 1 })
    })
  })

  describe('budget holds', () => {
    let holds = 0
    const hold = (costNano: number, o: Partial<HoldRequest> = {}): HoldRequest => ({ holdId: `h${++holds}`, costNano, expiresAt: T0 + 300_000, ...o })
    const held = async (hs: HotState, r: AgentRef = ref, now = T0) => (await hs.get(r, now)).snapshot.heldNano

    it('grants while the total, the open holds and this one stay within the budget, and refuses past it, holding nothing', async () => {
      const { hs, journaled } = await make()
      await hs.setPolicy(ref, policy(10, { alertAt: [] }), T0, 'key-1')
      await hs.record(ev(4 * USD), T0)
      await journaled()
      expect(await hs.hold(ref, hold(3 * USD), T0)).toEqual({ refusal: null, paused: false, pausedReason: null, pausedPeriod: null, remainingNano: 3 * USD, rate: null })
      // Exactly at the budget is within it; a nano more is over.
      expect(await hs.hold(ref, hold(3 * USD + 1), T0)).toMatchObject({ refusal: 'budget', remainingNano: 3 * USD })
      expect(await hs.hold(ref, hold(3 * USD), T0)).toMatchObject({ refusal: null, remainingNano: 0 })
      expect(await held(hs)).toBe(6 * USD)
      // Holds are hot state only: nothing is journaled.
      expect(await journaled()).toEqual([])
    })

    it('refuses while a pause holds the agent, its own or its fleet\'s, and while the fleet\'s budget would be passed', async () => {
      const { hs } = await make()
      await hs.setPaused(ref, true, T0, 'key-1')
      expect(await hs.hold(ref, hold(1), T0)).toMatchObject({ refusal: 'paused', paused: true, pausedReason: 'manual' })
      await hs.setPaused(ref, false, T0, 'key-1')
      await hs.setPaused(fleetOf('u'), true, T0, 'key-1')
      expect(await hs.hold(ref, hold(1), T0)).toMatchObject({ refusal: 'paused', pausedReason: 'fleet_manual' })
      await hs.setPaused(fleetOf('u'), false, T0, 'key-1')
      await hs.setPolicy(fleetOf('u'), policy(5), T0, 'key-1')
      await hs.record(ev(3 * USD, T0, { agentId: 'b' }), T0)
      expect(await hs.hold(ref, hold(2 * USD), T0)).toMatchObject({ refusal: null, remainingNano: 0 })
      expect(await hs.hold({ userId: 'u', agentId: 'c' }, hold(1), T0)).toMatchObject({ refusal: 'fleet_budget' })
      expect(await held(hs)).toBe(2 * USD)
      expect(await held(hs, fleetOf('u'))).toBe(2 * USD)
    })

    it('an llm_call with its hold releases it and counts its real cost, once: a retry releases nothing again', async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, policy(10, { alertAt: [] }), T0, 'key-1')
      const h = hold(5 * USD)
      await hs.hold(ref, h, T0)
      const other = hold(2 * USD)
      await hs.hold(ref, other, T0)
      const call = ev(USD, T0, { holdId: h.holdId })
      expect(await hs.record(call, T0)).toMatchObject({ counted: true, totalNano: USD })
      expect(await held(hs)).toBe(2 * USD)
      expect(await held(hs, fleetOf('u'))).toBe(2 * USD)
      expect(await hs.record(call, T0)).toMatchObject({ counted: false, totalNano: USD })
      // Another event naming the settled hold releases nothing either.
      expect(await hs.record(ev(USD, T0, { holdId: h.holdId }), T0)).toMatchObject({ counted: true, totalNano: 2 * USD })
      expect(await held(hs)).toBe(2 * USD)
      // An unknown hold never fails an event.
      expect(await hs.record(ev(USD, T0, { holdId: 'no-such-hold' }), T0)).toMatchObject({ counted: true, totalNano: 3 * USD })
    })

    it('an open hold of another agent fails the event before anything changed; another user\'s is unknown', async () => {
      const { hs, journaled } = await make()
      const h = hold(USD)
      await hs.hold({ userId: 'u', agentId: 'b' }, h, T0)
      await expect(hs.record(ev(USD, T0, { holdId: h.holdId }), T0)).rejects.toMatchObject({ code: 'hold_not_found', status: 404 })
      expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: 0, heldNano: 0 })
      expect(await held(hs, { userId: 'u', agentId: 'b' })).toBe(USD)
      expect(await journaled()).toEqual([])
      expect(await hs.record(ev(USD, T0, { userId: 'v', holdId: h.holdId }), T0)).toMatchObject({ counted: true })
      expect(await held(hs, { userId: 'u', agentId: 'b' })).toBe(USD)
    })

    it('an expired hold releases itself at its expiry, not before; release() ends one early, once, for its user only', async () => {
      const { hs } = await make()
      const h = hold(USD, { expiresAt: T0 + 1000 })
      await hs.hold(ref, h, T0)
      expect(await held(hs, ref, T0 + 999)).toBe(USD)
      expect(await held(hs, ref, T0 + 1000)).toBe(0)
      expect(await held(hs, fleetOf('u'), T0 + 1000)).toBe(0)
      expect((await hs.release('u', h.holdId, T0 + 1000)).hold).toBeNull()
      const early = hold(2 * USD)
      await hs.hold(ref, early, T0)
      expect((await hs.release('v', early.holdId, T0)).hold).toBeNull()
      expect((await hs.release('u', early.holdId, T0)).hold).toEqual({ agentId: 'a', costNano: 2 * USD })
      expect((await hs.release('u', early.holdId, T0)).hold).toBeNull()
      expect(await held(hs)).toBe(0)
      expect(await held(hs, fleetOf('u'))).toBe(0)
    })

    it('open holds count with the total for a crossing, and a manual resume over budget lets the agent hold again', async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, policy(10, { alertAt: [] }), T0, 'key-1')
      await hs.hold(ref, hold(8 * USD), T0)
      // 3 spent and 8 held: over the 10 budget, so this event pauses the agent.
      const r = await hs.record(ev(3 * USD), T0)
      expect(r).toMatchObject({ paused: true, pausedReason: 'budget', totalNano: 3 * USD })
      expect(r.transitions).toEqual([expect.objectContaining({ reason: 'budget', totalNano: 3 * USD, heldNano: 8 * USD })])
      expect(await hs.hold(ref, hold(1), T0)).toMatchObject({ refusal: 'paused' })
      // Resumed by hand while still over: the override lets it run, and hold.
      expect(await hs.setPaused(ref, false, T0, 'key-2')).toMatchObject({ override: true })
      expect(await hs.hold(ref, hold(USD), T0)).toMatchObject({ refusal: null })
    })

    it('a hold asked again with its id while open (a retry) is the same hold, held once; another agent\'s id is a 404', async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, policy(10, { alertAt: [] }), T0, 'key-1')
      const h = hold(6 * USD)
      expect(await hs.hold(ref, h, T0)).toMatchObject({ refusal: null, remainingNano: 4 * USD })
      // Granted again, though a second 6 USD would not fit: nothing more is held.
      expect(await hs.hold(ref, h, T0)).toMatchObject({ refusal: null, remainingNano: 4 * USD })
      expect(await held(hs)).toBe(6 * USD)
      await expect(hs.hold({ userId: 'u', agentId: 'b' }, h, T0)).rejects.toMatchObject({ code: 'hold_not_found' })
      expect(await held(hs, fleetOf('u'))).toBe(6 * USD)
      // Settled, the id is free: asked again, it is a new hold.
      await hs.record(ev(USD, T0, { holdId: h.holdId }), T0)
      expect(await hs.hold(ref, h, T0)).toMatchObject({ refusal: null, remainingNano: 3 * USD })
    })

    it('grants concurrent holds no more than the budget allows', async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, policy(10, { alertAt: [] }), T0, 'key-1')
      const asks = Array.from({ length: 50 }, (_, i) => hold((1 + (i % 3)) * USD))
      const answers = await Promise.all(asks.map((h) => hs.hold(ref, h, T0)))
      const granted = asks.filter((_, i) => answers[i]!.refusal === null).reduce((sum, h) => sum + h.costNano, 0)
      expect(granted).toBeLessThanOrEqual(10 * USD)
      expect(granted).toBeGreaterThan(8 * USD) // refused only once there was no room for it
      expect(await held(hs)).toBe(granted)
    })
  })

  describe('run budgets', () => {
    let holds = 0
    const hold = (costNano: number, runId: string, o: Partial<HoldRequest> = {}): HoldRequest => ({ holdId: `rh${++holds}`, costNano, expiresAt: T0 + 300_000, runId, ...o })
    const withRunBudget = (usd: number) => policy(100, { alertAt: [], runBudgetNano: usd * USD })
    const inRun = (runId: string, costNano: number, at = T0, extra: Partial<RecordInput> = {}) => ev(costNano, at, { runId, ...extra })

    it('stops the run whose llm_call goes strictly over, that run only, once, journaled with the event; its later events and retries get the same answer', async () => {
      const { hs, journaled } = await make()
      await hs.setPolicy(ref, withRunBudget(3), T0, 'key-1')
      await journaled()
      // Exactly at the budget is within it.
      expect(await hs.record(inRun('r1', 3 * USD), T0)).toMatchObject({ paused: false, pausedReason: null, runStop: null })
      expect(await hs.record(inRun('r1', 0, T0, { llmCall: false }), T0)).toMatchObject({ paused: false })
      await journaled()
      const crossing = inRun('r1', 1, T0)
      const stopped = await hs.record(crossing, T0)
      expect(stopped).toMatchObject({ counted: true, paused: true, pausedReason: 'run_budget', pausedPeriod: null, transitions: [] })
      expect(stopped.runStop).toMatchObject({ userId: 'u', agentId: 'a', runId: 'r1', spentNano: 3 * USD + 1, heldNano: 0, budgetNano: 3 * USD })
      const rows = await journaled()
      expect(rows.map((r) => r.table)).toEqual(['events', 'run_stops'])
      expect(rows[1]!.row).toMatchObject({ user_id: 'u', agent_id: 'a', run_id: 'r1', spent_nano: 3 * USD + 1, held_nano: 0, budget_nano: 3 * USD, version: stopped.runStop!.version })
      // A retry of the crossing call, and later events of the run: paused, nothing journaled but the events.
      expect(await hs.record(crossing, T0)).toMatchObject({ counted: false, paused: true, pausedReason: 'run_budget', runStop: null })
      expect(await hs.record(inRun('r1', USD, T0 + 1000), T0 + 1000)).toMatchObject({ counted: true, paused: true, pausedReason: 'run_budget', runStop: null })
      expect((await journaled()).map((r) => r.table)).toEqual(['events'])
      // The agent's other runs, and its events outside any run, go on; the agent is not paused.
      expect(await hs.record(inRun('r2', 2 * USD), T0)).toMatchObject({ paused: false, pausedReason: null })
      expect(await hs.record(ev(USD), T0)).toMatchObject({ paused: false })
      expect((await hs.get(ref, T0)).snapshot.pause.paused).toBe(false)
      // Another agent's run of the same id is another run.
      await hs.setPolicy({ userId: 'u', agentId: 'b' }, withRunBudget(3), T0, 'key-1')
      expect(await hs.record(inRun('r1', USD, T0, { agentId: 'b' }), T0)).toMatchObject({ paused: false })
    })

    it('holds count against the run: refused past its budget or once it stopped, granted for other runs, released by the call they settle', async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, withRunBudget(10), T0, 'key-1')
      await hs.record(inRun('r1', 4 * USD), T0)
      const first = hold(5 * USD, 'r1')
      expect(await hs.hold(ref, first, T0)).toMatchObject({ refusal: null, paused: false })
      // 4 spent + 5 held + 1 nano more is over 10 by nothing: within; 1 USD + 1 nano is over.
      expect(await hs.hold(ref, hold(USD + 1, 'r1'), T0)).toMatchObject({ refusal: 'run_budget', paused: false, pausedReason: null })
      expect(await hs.hold(ref, hold(USD + 1, 'r2'), T0)).toMatchObject({ refusal: null })
      // A call without its hold that takes the spend with the open hold over stops the run.
      const crossing = await hs.record(inRun('r1', 2 * USD), T0)
      expect(crossing).toMatchObject({ paused: true, pausedReason: 'run_budget' })
      expect(crossing.runStop).toMatchObject({ spentNano: 6 * USD, heldNano: 5 * USD })
      expect(await hs.hold(ref, hold(1, 'r1'), T0)).toMatchObject({ refusal: 'run_budget', paused: true, pausedReason: 'run_budget' })
      // The call the hold was for settles it: released from the run too.
      await hs.record(inRun('r1', USD, T0, { holdId: first.holdId }), T0)
      expect((await hs.get(ref, T0)).snapshot.heldNano).toBe(USD + 1)
      // A fresh run with a hold that settles: its spend is what the calls cost, not their holds.
      const h = hold(6 * USD, 'r3')
      expect(await hs.hold(ref, h, T0)).toMatchObject({ refusal: null })
      expect(await hs.record(inRun('r3', 5 * USD, T0, { holdId: h.holdId }), T0)).toMatchObject({ paused: false })
      expect(await hs.hold(ref, hold(5 * USD, 'r3'), T0)).toMatchObject({ refusal: null })
      // An expired hold no longer counts.
      expect(await hs.hold(ref, hold(USD, 'r3'), T0 + 300_000)).toMatchObject({ refusal: null })
    })

    it("the agent's own pause or its fleet's comes before the run's stop", async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, withRunBudget(1), T0, 'key-1')
      await hs.record(inRun('r1', 2 * USD), T0)
      await hs.setPaused(ref, true, T0, 'key-1')
      expect(await hs.record(inRun('r1', 1), T0)).toMatchObject({ paused: true, pausedReason: 'manual' })
      expect(await hs.hold(ref, hold(1, 'r1'), T0)).toMatchObject({ refusal: 'paused', pausedReason: 'manual' })
      await hs.setPaused(ref, false, T0, 'key-1')
      await hs.setPaused(fleetOf('u'), true, T0, 'key-1')
      expect(await hs.record(inRun('r1', 1), T0)).toMatchObject({ paused: true, pausedReason: 'fleet_manual' })
      await hs.setPaused(fleetOf('u'), false, T0, 'key-1')
      expect(await hs.record(inRun('r1', 1), T0)).toMatchObject({ paused: true, pausedReason: 'run_budget' })
    })

    it('forgets a run that ends unstopped and one idle for a day; a stopped run stays stopped after its end', async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, withRunBudget(3), T0, 'key-1')
      await hs.record(inRun('r1', 2 * USD), T0)
      await hs.record(inRun('r1', 0, T0, { llmCall: false, endsRun: true }), T0)
      // Ended, it was forgotten: a late event of it starts a tally of its own.
      expect(await hs.record(inRun('r1', 2 * USD), T0)).toMatchObject({ paused: false })
      await hs.record(inRun('r2', 4 * USD), T0)
      expect(await hs.record(inRun('r2', 0, T0, { llmCall: false, endsRun: true }), T0)).toMatchObject({ paused: true, pausedReason: 'run_budget' })
      expect(await hs.record(inRun('r2', 1), T0)).toMatchObject({ paused: true, pausedReason: 'run_budget' })
      // Idle for longer than a day (the default RUN_ABANDONED_AFTER): forgotten as other runs are counted.
      const later = T0 + 24 * 3_600_000 + MINUTE_MS
      await hs.record(inRun('r3', 1, later), later)
      await hs.record(inRun('r4', 1, later), later)
      expect(await hs.record(inRun('r2', 1, later), later)).toMatchObject({ paused: false })
      expect(await hs.record(inRun('r1', 2 * USD, later), later)).toMatchObject({ paused: false })
    })

    it('keeps no run without a run budget; a budget set later counts a run from then on, and removing it lets every run go', async () => {
      const { hs } = await make()
      await hs.setPolicy(ref, policy(100, { alertAt: [] }), T0, 'key-1')
      await hs.record(inRun('r1', 5 * USD), T0)
      await hs.setPolicy(ref, withRunBudget(3), T0, 'key-1')
      expect(await hs.record(inRun('r1', 2 * USD), T0)).toMatchObject({ paused: false })
      expect(await hs.record(inRun('r1', USD + 1), T0)).toMatchObject({ paused: true, pausedReason: 'run_budget' })
      await hs.setPolicy(ref, policy(100, { alertAt: [] }), T0, 'key-1')
      expect(await hs.record(inRun('r1', USD), T0)).toMatchObject({ paused: false, pausedReason: null })
      expect(await hs.hold(ref, hold(50 * USD, 'r1'), T0)).toMatchObject({ refusal: null })
    })
  })

  describe('the fleet budget', () => {
    const fleet = fleetOf('u')
    const of = (agentId: string, usd: number, at = T0) => ev(usd * USD, at, { agentId })

    it('sums every agent of a user, and only of that user; without a budget it never pauses', async () => {
      const { hs } = await make()
      const r = await recordAll(hs, [of('a', 3), of('b', 4), ev(5 * USD, T0, { userId: 'v', agentId: 'a' }), { ...of('a', 2), llmCall: false }])
      expect(r.map((x) => [x.paused, x.pausedReason])).toEqual(Array(4).fill([false, null]))
      expect((await hs.get(fleet, T0)).snapshot).toMatchObject({ active: true, totalNano: 9 * USD, llmCalls: 2, configured: false, pause: { paused: false } })
      expect((await hs.get(fleetOf('v'), T0)).snapshot.totalNano).toBe(5 * USD)
      // A repeat counts in neither.
      const e = of('b', 1)
      await hs.record(e, T0)
      expect((await hs.record(e, T0)).counted).toBe(false)
      expect((await hs.get(fleet, T0)).snapshot.totalNano).toBe(10 * USD)
      // The fleet is not one of the agents.
      expect((await hs.listAgents('u', T0)).map((a) => a.agentId).sort()).toEqual(['a', 'b'])
    })

    it('over its budget, every agent of the user is paused by it, with one transition journaled as the agent ""', async () => {
      const { hs, journaled } = await make()
      await hs.setPolicy(fleet, policy(1, { alertAt: [] }), T0, 'key-1')
      await journaled()
      const r = await recordAll(hs, [of('a', 0.6), of('b', 0.6), of('c', 0.1), ev(USD, T0, { userId: 'v' })])
      expect(r.map((x) => [x.paused, x.pausedReason])).toEqual([
        [false, null],
        [true, 'fleet_budget'],
        [true, 'fleet_budget'],
        [false, null], // another user's agents are not in this fleet
      ])
      expect(r[1]!.transitions).toEqual([expect.objectContaining({ userId: 'u', agentId: '', reason: 'budget', paused: true, totalNano: 1.2 * USD, thresholdNano: USD })])
      expect(r[2]!.transitions).toEqual([])
      // The agent's own answer is its own: its total and what is left of its own threshold.
      expect(r[1]).toMatchObject({ totalNano: 0.6 * USD, thresholdNano: DEFAULT_POLICY.thresholdNano })
      const rows = (await journaled()).filter((x) => x.table === 'pause_transitions')
      expect(rows.map((x) => x.row)).toEqual([expect.objectContaining({ user_id: 'u', agent_id: '', is_paused: true, reason: 'budget', total_nano: 1.2 * USD, actor: 'system' })])
      expect((await hs.get(fleet, T0)).snapshot.pause).toEqual({ paused: true, reason: 'budget', override: false, since: T0 })
      // The agents' own states are untouched: each is paused by the fleet only.
      expect((await hs.get({ userId: 'u', agentId: 'a' }, T0)).snapshot.pause.paused).toBe(false)
    })

    it('an agent\'s own pause comes first; a fleet paused by hand holds until resumed by hand, with the override rule', async () => {
      const { hs } = await make()
      await hs.setPolicy(fleet, policy(1, { alertAt: [] }), T0, 'key-1')
      expect(await hs.setPaused(fleet, true, T0, 'key-2')).toMatchObject({ agentId: '', paused: true, reason: 'manual', actor: 'key-2' })
      await hs.setPaused({ userId: 'u', agentId: 'a' }, true, T0, 'key-2')
      const r = await recordAll(hs, [of('a', 0.1), of('b', 0.1)])
      expect(r.map((x) => x.pausedReason)).toEqual(['manual', 'fleet_manual'])
      // Over budget and resumed by hand: the override keeps it running until the total falls back.
      await hs.record(of('b', 2), T0)
      expect(await hs.setPaused(fleet, false, T0, 'key-2')).toMatchObject({ paused: false, override: true })
      expect((await hs.record(of('b', 1), T0)).pausedReason).toBeNull()
      expect((await hs.record(of('a', 1), T0)).pausedReason).toBe('manual')
      const later = T0 + 1440 * MINUTE_MS
      const again = await hs.record(of('b', 2, later), later)
      expect(again.transitions.map((t) => [t.agentId, t.reason])).toEqual([
        ['', 'override_cleared'],
        ['', 'budget'],
      ])
      expect(again.pausedReason).toBe('fleet_budget')
    })

    it('fires its alert levels once per crossing, as an agent\'s, journaled as the agent ""', async () => {
      const { hs, journaled } = await make()
      await hs.setPolicy(fleet, policy(10, { alertAt: [0.5, 0.9] }), T0, 'key-1')
      await journaled()
      const fired = async (e: RecordEvent) => (await hs.record(e, T0)).alerts.map((a) => [a.agentId, a.level])
      expect(await fired(of('a', 4))).toEqual([])
      expect(await fired(of('b', 1))).toEqual([['', 0.5]])
      expect(await fired(of('c', 1))).toEqual([])
      // The agent's own levels (default 0.8 of 10 USD) and the fleet's, from one event.
      expect(await fired(of('c', 8))).toEqual([['c', 0.8], ['', 0.9]])
      const alerts = (await journaled()).filter((x) => x.table === 'budget_alerts').map((x) => [x.row.agent_id, x.row.level, x.row.total_nano])
      expect(alerts).toEqual([
        ['', 0.5, 5 * USD],
        ['c', 0.8, 9 * USD],
        ['', 0.9, 14 * USD],
      ])
    })
  })

  it('refuses at the journal bound before anything changes, and takes events again once it is shipped', async () => {
    const { hs, journaled } = await make({ maxRows: 3 })
    await recordAll(hs, [ev(1), ev(2), ev(3)])
    const refused = ev(4)
    await expect(hs.record(refused, T0)).rejects.toBeInstanceOf(JournalFullError)
    await expect(hs.setPaused(ref, true, T0, 'key-1')).rejects.toBeInstanceOf(JournalFullError)
    expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: 6, pause: { paused: false } })
    expect(await journaled()).toHaveLength(3)
    // Nothing of the refused event stayed behind: its retry is a new event.
    expect(await hs.record(refused, T0)).toMatchObject({ counted: true, totalNano: 10 })
  })
})

describe.each(implementations)('hot state lifecycle: %s', (_name, make) => {
  it('answers ping while its store does, and close() leaves what was recorded in place', async () => {
    const { hs, journaled } = await make()
    await expect(hs.ping()).resolves.toBeUndefined()
    await hs.record(ev(1), T0)
    await hs.close()
    expect(await journaled()).toHaveLength(1)
  })
})

describe('redis hot state: budget holds', () => {
  const hold = (holdId: string, costNano: number, expiresAt = T0 + 60_000): HoldRequest => ({ holdId, costNano, expiresAt })

  async function redisState() {
    server ??= startRedis()
    const { redis } = await server
    const prefix = `t${++prefixes}:`
    const journal = new RedisJournal({ redis, instance: 'i', partitions: 1, maxRows: 1_000_000, prefix })
    await journal.register()
    return { redis, prefix, hs: new RedisHotState({ redis, prefix, journal, loader: emptyLoad, userAgents: async () => [] }) }
  }

  it('a state whose hold keys expired unread holds nothing, and says so once', async () => {
    const { redis, prefix, hs } = await redisState()
    await hs.hold(ref, hold('h', 2 * USD), T0)
    // The keys' TTL ran out before any access saw the hold expire: they are gone, the sum is not.
    const [hz, ...others] = await redis.keys(`${prefix}*:hs:${agentKeyId('u', 'a')}:hz`)
    expect(others).toEqual([])
    await redis.del(hz!, hz!.replace(/:hz$/, ':h'))
    expect((await hs.get(ref, T0)).snapshot.heldNano).toBe(0)
    const [state] = await redis.keys(`${prefix}*:hs:${agentKeyId('u', 'a')}:s`)
    expect(await packedState(redis, state!)).toMatchObject({ held: 0, flags: 0 })
  })

  it('a state loaded again starts without the holds of the one lost, and never counts their expiry against the new ones', async () => {
    const { redis, prefix, hs } = await redisState()
    await hs.hold(ref, hold('old', 3 * USD), T0)
    expect((await hs.get(ref, T0)).snapshot.heldNano).toBe(3 * USD)
    // The agent's state is lost (its :s expired or was flushed); its hold keys are still there.
    const [agentState, ...others] = await redis.keys(`${prefix}*:hs:${agentKeyId('u', 'a')}:s`)
    expect(others).toEqual([])
    expect(await packedState(redis, agentState!)).toMatchObject({ held: 3 * USD, flags: 8 })
    await redis.del(agentState!)
    expect((await hs.get(ref, T0)).snapshot.heldNano).toBe(0)
    // A new hold counts alone; the old one's expiry takes nothing from it.
    await hs.hold(ref, hold('new', USD, T0 + 120_000), T0)
    expect((await hs.get(ref, T0 + 60_000)).snapshot.heldNano).toBe(USD)
    expect((await hs.get(ref, T0 + 120_000)).snapshot.heldNano).toBe(0)
    // The fleet kept its own holds: the old one there leaves with its expiry.
    expect((await hs.get(fleetOf('u'), T0)).snapshot.heldNano).toBe(4 * USD)
    expect((await hs.get(fleetOf('u'), T0 + 60_000)).snapshot.heldNano).toBe(USD)
    expect((await hs.get(fleetOf('u'), T0 + 120_000)).snapshot.heldNano).toBe(0)
  })
})

describe('memory hot state', () => {
  const open = () => SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-hs-')), fsync: false, maxRows: 1_000_000 })

  it('forgets agents with nothing left to keep, a few per event, and keeps configured ones', async () => {
    const hs = new MemoryHotState(await open())
    await hs.setPolicy({ userId: 'u', agentId: 'kept' }, policy(1), T0, 'key-1')
    await recordAll(
      hs,
      Array.from({ length: 100 }, (_, i) => ev(1, T0, { agentId: `idle${i}` })),
    )
    const later = T0 + 24 * 60 * MINUTE_MS
    // Each event visits a bounded number of agents; enough events visit them all.
    await recordAll(hs, Array.from({ length: 60 }, () => ev(1, later, { agentId: 'live' })), later)
    expect(hs.size).toBe(2) // 'kept' (configured) and 'live'
  })

  it('restore replaces the state (never adds to it), counts each id once, and acts on a stored crossing and journals it', async () => {
    const log = await open()
    const hs = new MemoryHotState(log)
    await hs.record(ev(3), T0)
    await drain(log)
    const minute = Math.floor(T0 / MINUTE_MS)
    const restore = hs.beginRestore(T0)
    const run = restore.agent(ref)
    run(fingerprint(ref.userId, ref.agentId, 'restored'), USD, minute, 1)
    run(fingerprint(ref.userId, ref.agentId, 'restored'), USD, minute, 1) // stored twice: counted once
    run(fingerprint(ref.userId, ref.agentId, 'other'), USD, minute, 1)
    run(fingerprint(ref.userId, ref.agentId, 'old'), 5 * USD, minute - 24 * 60, 1) // left the window
    // The journal's tail: one already shipped (in the run above), one not.
    restore.event(ref, fingerprint(ref.userId, ref.agentId, 'other'), USD, minute, 1)
    restore.event(ref, fingerprint(ref.userId, ref.agentId, 'tail'), USD, minute, 0)
    restore.policy(ref, policy(1))
    const transitions = await restore.finish()
    expect((await hs.get(ref, T0)).snapshot).toMatchObject({ totalNano: 3 * USD, llmCalls: 2, configured: true, pause: { paused: true, reason: 'budget' } })
    expect(transitions).toEqual([expect.objectContaining({ reason: 'budget', paused: true })])
    expect((await drain(log)).map((r) => r.row.reason)).toEqual(['budget'])
    for (const eventId of ['restored', 'other', 'tail']) expect(await hs.record({ ...ev(0), eventId }, T0)).toMatchObject({ counted: false, costNano: USD })
  })

  it('restore keeps an override from the last transition', async () => {
    const hs = new MemoryHotState(await open())
    const restore = hs.beginRestore(T0)
    const run = restore.agent(ref)
    run(fingerprint(ref.userId, ref.agentId, 'a'), 2 * USD, Math.floor(T0 / MINUTE_MS), 1)
    restore.policy(ref, policy(1))
    restore.pause(ref, { paused: false, reason: null, override: true, since: 0 })
    expect(await restore.finish()).toEqual([])
    expect((await hs.get(ref, T0)).snapshot.pause).toEqual({ paused: false, reason: null, override: true, since: 0 })
  })
})

describe.each(implementations)('hot state erase: %s', (_name, make) => {
  it("forgets every state of the user, its holds and its keys' budgets, and nothing of another user", async () => {
    const { hs } = await make()
    const user = (agentId: string) => ({ userId: 'gone', agentId })
    const rate = { key: 'events:gone-key', max: 2, windowMs: 60_000 }
    await recordAll(hs, [{ ...ev(5, T0, user('a')), rate }, ev(7, T0, user('b')), ev(11, T0, { userId: 'kept', agentId: 'a' })])
    await hs.setPolicy(user('configured-only'), policy(1), T0, 'key-1')
    // An agent known only by its open hold.
    expect((await hs.hold(user('held-only'), { holdId: 'h-gone', costNano: 3, expiresAt: T0 + 60_000 }, T0)).refusal).toBeNull()
    expect((await hs.get(fleetOf('gone'), T0)).snapshot).toMatchObject({ totalNano: 12, heldNano: 3 })

    // The stored rows name the configured agent; the hot state finds the others itself.
    expect(await hs.erase('gone', { agentIds: ['configured-only'], budgets: [rate.key] })).toBeGreaterThan(0)

    expect(await hs.listAgents('gone', T0)).toEqual([])
    for (const agentId of ['a', 'b', 'held-only', 'configured-only']) {
      expect((await hs.get(user(agentId), T0)).snapshot, agentId).toMatchObject({ active: false, totalNano: 0, heldNano: 0, configured: false })
    }
    expect((await hs.get(fleetOf('gone'), T0)).snapshot).toMatchObject({ totalNano: 0, heldNano: 0 })
    expect((await hs.release('gone', 'h-gone', T0)).hold).toBeNull()
    // The key's budget starts afresh (one charge used before the erasure, none counted now).
    expect((await hs.record({ ...ev(1, T0, user('a')), rate }, T0)).rate).toMatchObject({ current: 1 })
    expect((await hs.get({ userId: 'kept', agentId: 'a' }, T0)).snapshot).toMatchObject({ totalNano: 11, active: true })
    expect(await hs.erase('nobody', { agentIds: [], budgets: [] })).toBe(0)
  })
})
