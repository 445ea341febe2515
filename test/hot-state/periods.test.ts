import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { afterAll, describe, expect, it } from 'vitest'
import { fingerprint } from '../../src/hot-state/dedup.ts'
import { MemoryHotState } from '../../src/hot-state/memory.ts'
import { DEFAULT_POLICY, metersOf, resolveMeters, type AgentPolicy, type PeriodBudget } from '../../src/hot-state/meters.ts'
import type { PeriodHistory } from '../../src/hot-state/period-tallies.ts'
import { RedisHotState } from '../../src/hot-state/redis.ts'
import type { AgentLoad, HotState, RecordEvent } from '../../src/hot-state/types.ts'
import { RedisJournal } from '../../src/journal/redis-streams.ts'
import { SegmentLog } from '../../src/journal/segment-log.ts'
import { startRedis } from '../helpers/redis.ts'
import { toChDateTime64us } from '../../src/storage/clickhouse.ts'
import { minuteOf, windowStartMs } from '../../src/rolling-day.ts'
import type { EventRow } from '../../src/storage/rows.ts'

/**
 * Both hot states' period sums against a plain model that sums every event of a period:
 * random events at random clocks, budgets set midway (their history as ClickHouse would give
 * it: the spend per quarter hour before the cut), and the state rebuilt from the stored events
 * (the in-process one at a restart, the Redis one loaded when Redis has lost it).
 */
const HOUR = 3_600_000
const NO_LIMIT = 1e15

const specs: PeriodBudget[] = [
  { spec: { period: 'month', timeZone: 'America/New_York', weekStarts: 'monday', monthStartsOn: 28 }, limitNano: NO_LIMIT },
  { spec: { period: 'week', timeZone: 'Asia/Kolkata', weekStarts: 'sunday', monthStartsOn: 1 }, limitNano: NO_LIMIT },
  { spec: { period: 'day', timeZone: 'Australia/Adelaide', weekStarts: 'monday', monthStartsOn: 1 }, limitNano: NO_LIMIT },
  { spec: { windowDays: 7 }, limitNano: NO_LIMIT },
  { spec: { windowDays: 30 }, limitNano: NO_LIMIT },
  { spec: { windowDays: 1 }, limitNano: NO_LIMIT },
]

const policyWith = (budgets: readonly PeriodBudget[]): AgentPolicy => ({ ...DEFAULT_POLICY, thresholdNano: NO_LIMIT, alertAt: [], periodBudgets: budgets })

async function memory(): Promise<MemoryHotState> {
  const log = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-periods-')), fsync: false, maxRows: 10_000_000 })
  return new MemoryHotState(log)
}

let server: ReturnType<typeof startRedis> | undefined
let prefixes = 0
afterAll(async () => {
  await (await server)?.stop()
})

/** A Redis hot state on a fresh prefix, which loads a lost state with `load` (none: nothing stored). */
async function redis(load?: (ref: { userId: string; agentId: string }) => AgentLoad): Promise<RedisHotState> {
  server ??= startRedis()
  const { redis } = await server
  const prefix = `p${++prefixes}:`
  const journal = new RedisJournal({ redis, instance: 'i', partitions: 1, maxRows: 10_000_000, prefix })
  await journal.register()
  const empty: AgentLoad = { minutes: [], seen: [], policy: null, policyVersion: 0, pause: null, ignored: null }
  return new RedisHotState({ redis, prefix, journal, loader: async (ref) => load?.(ref) ?? empty, userAgents: async () => [] })
}

type Stored = ReadonlyArray<{ at: number; cost: number }>

/** Each hot state, and the same state made again from the stored events (`policy` set on the agent). */
const implementations: Array<[string, () => Promise<HotState>, (events: Stored, policy: AgentPolicy, now: number) => Promise<HotState>]> = [
  [
    'memory',
    memory,
    async (events, policy, now) => {
      const rebuilt = await memory()
      const restore = rebuilt.beginRestore(now)
      const agent = { userId: 'u', agentId: 'a' }
      const sink = restore.agent(agent)
      const since = minuteOf(windowStartMs(now))
      for (const [i, e] of events.entries()) if (minuteOf(e.at) >= since) sink(fingerprint('u', 'a', `x${i}`), e.cost, minuteOf(e.at), 1)
      restore.policy(agent, policy)
      restore.history(agent, historyOf(events, now, since))
      await restore.finish()
      return rebuilt
    },
  ],
  [
    'redis',
    () => redis(),
    async (events, policy, now) => {
      const since = minuteOf(windowStartMs(now))
      const byMinute = new Map<number, number>()
      for (const e of events) if (minuteOf(e.at) >= since) byMinute.set(minuteOf(e.at), (byMinute.get(minuteOf(e.at)) ?? 0) + e.cost)
      return redis((ref) => ({
        minutes: [...byMinute].map(([minute, costNano]) => ({ minute, costNano, llmCalls: 1 })),
        seen: [],
        policy: ref.agentId === 'a' ? policy : null,
        policyVersion: ref.agentId === 'a' ? 1 : 0,
        pause: null,
        ignored: null,
        ...(ref.agentId === 'a' ? { history: historyOf(events, now, since) } : {}),
      }))
    },
  ],
]

let ids = 0
function event(agentId: string, costNano: number, at: number): RecordEvent {
  const eventId = `e${++ids}`
  const row = { user_id: 'u', agent_id: agentId, timestamp: toChDateTime64us(at * 1000), event_id: eventId, event_type: 'llm_call', cost_nano: costNano } as unknown as EventRow
  return { userId: 'u', agentId, eventId, costNano, llmCall: true, at, row }
}

/** What a plain sum of the events says each period of `policy` holds at `now`. */
function modelSpent(events: ReadonlyArray<{ at: number; cost: number }>, policy: AgentPolicy, now: number): number[] {
  return resolveMeters(metersOf(policy), now)
    .filter((m) => m.period)
    .map((m) => events.reduce((sum, e) => (minuteOf(e.at) >= m.from ? sum + e.cost : sum), 0))
}

/** What ClickHouse would say: the spend per quarter hour before minute `cut` (by default the window's start plus two minutes, as a config's read asks). */
function historyOf(events: ReadonlyArray<{ at: number; cost: number }>, now: number, cut = minuteOf(windowStartMs(now)) + 2): PeriodHistory {
  const quarters = new Map<number, number>()
  for (const e of events) if (minuteOf(e.at) < cut) quarters.set(Math.floor(minuteOf(e.at) / 15), (quarters.get(Math.floor(minuteOf(e.at) / 15)) ?? 0) + e.cost)
  return { cut, quarters: [...quarters].sort((a, b) => a[0] - b[0]).flat() }
}

describe.each(implementations)('period sums, %s', (_name, create, rebuild) => {
  it('equal a plain sum of the events of each period, with budgets set midway and after a rebuild (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ gap: fc.oneof(fc.integer({ min: 0, max: HOUR }), fc.integer({ min: 0, max: 4 * 24 * HOUR })), cost: fc.integer({ min: 0, max: 5_000_000 }) }), { minLength: 1, maxLength: 60 }),
        fc.subarray(specs, { minLength: 1, maxLength: 4 }),
        fc.nat({ max: 59 }),
        fc.integer({ min: Date.UTC(2027, 0, 1), max: Date.UTC(2028, 11, 31) }),
        async (steps, budgets, setAt, start) => {
          const hs = await create()
          const policy = policyWith(budgets)
          const agent = { userId: 'u', agentId: 'a' }
          const events: Array<{ at: number; cost: number }> = []
          let now = start
          let configured = false
          for (const [i, s] of steps.entries()) {
            now += s.gap
            if (i === Math.min(setAt, steps.length - 1)) {
              await hs.setPolicy(agent, policy, now, 'test', historyOf(events, now))
              configured = true
            }
            await hs.record(event('a', s.cost, now), now)
            events.push({ at: now, cost: s.cost })
            if (!configured) continue
            const { snapshot } = await hs.get(agent, now)
            expect(snapshot.periods.map((p) => p.spentNano), `step ${i}`).toEqual(modelSpent(events, policy, now))
          }
          // The state made again from the stored events (those of the window, and the history before it).
          const rebuilt = await rebuild(events, policy, now)
          expect((await rebuilt.get(agent, now)).snapshot.periods.map((p) => p.spentNano)).toEqual(modelSpent(events, policy, now))
        },
      ),
      { numRuns: 60 },
    )
  })
})
