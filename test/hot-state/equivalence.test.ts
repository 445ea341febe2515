import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MemoryHotState } from '../../src/hot-state/memory.ts'
import { RedisHotState } from '../../src/hot-state/redis.ts'
import { fleetOf, type AgentRef } from '../../src/hot-state/agent-ref.ts'
import { DEFAULT_POLICY, type AgentPolicy, type PeriodBudget } from '../../src/hot-state/meters.ts'
import type { PeriodSpec } from '../../src/periods.ts'
import { type HotState, type RecordEvent } from '../../src/hot-state/types.ts'
import { RedisJournal } from '../../src/journal/redis-streams.ts'
import { SegmentLog } from '../../src/journal/segment-log.ts'
import type { JournalSource } from '../../src/journal/types.ts'
import { toChDateTime64us } from '../../src/storage/clickhouse.ts'
import { startRedis } from '../helpers/redis.ts'

/**
 * The two hot states cannot drift: the same random history of events (one by one, and sent
 * at once, which the Redis one takes in one call), configs, pauses, holds, releases, reads
 * and clock steps, over three agents of a user and their fleet, runs
 * through the in-process one and the Redis one, and every answer and every row they journal
 * (in order) must be the same. Versions are each store's own counters: they are compared by
 * order (each state's grow), not by value.
 */

const USER = 'u'
const AGENTS = ['a', 'b', 'c']
const USD = 1_000_000_000
const T0 = Date.UTC(2026, 2, 1, 10, 0, 0)

type Target = number // an index into AGENTS, or -1: the fleet
type RecordOp = { k: 'record'; agent: number; cents: number; llm: boolean; repeat: number | null; settle: number | null; charged: boolean; run?: string | null; ends?: boolean }
type Op =
  | RecordOp
  | { k: 'burst'; events: RecordOp[] }
  | { k: 'config'; target: Target; thresholdCents: number; autoResume: boolean; alertAt: number[]; velocity: { cents: number; minutes: number } | null; periods: PeriodBudget[]; runBudgetCents?: number | null }
  | { k: 'pause'; target: Target; paused: boolean }
  | { k: 'hold'; agent: number; cents: number; ttlMinutes: number; retry: number | null; run?: string | null }
  | { k: 'release'; hold: number }
  | { k: 'get'; target: Target }
  | { k: 'list' }
  | { k: 'tick'; ms: number }

// Period budgets whose periods the ticks below cross: a day in a half-hour zone, a week across
// a daylight-saving change, rolling windows of one and two days.
const PERIOD_SPECS: PeriodSpec[] = [
  { period: 'day', timeZone: 'Asia/Kolkata', weekStarts: 'monday', monthStartsOn: 1 },
  { period: 'week', timeZone: 'America/New_York', weekStarts: 'sunday', monthStartsOn: 1 },
  { windowDays: 1 },
  { windowDays: 2 },
]

const target = fc.integer({ min: -1, max: AGENTS.length - 1 })
const agent = fc.integer({ min: 0, max: AGENTS.length - 1 })
// An earlier id named again (taken modulo how many there are), half of the time.
const earlier = fc.option(fc.nat({ max: 1000 }), { freq: 2 })
// Amounts from a few round values, so that spends land exactly on limits and levels.
const cents = fc.constantFrom(0, 10, 20, 25, 40, 50, 100)
const limitCents = fc.constantFrom(50, 100, 150, 200)
// Runs of an agent: a few ids, so that runs go over their budget, end, and start again.
const run = fc.option(fc.constantFrom('r1', 'r2', 'r3'), { freq: 3 })
const recordOp: fc.Arbitrary<RecordOp> = fc.record({
  k: fc.constant('record' as const),
  agent,
  cents,
  llm: fc.boolean(),
  repeat: earlier,
  settle: earlier,
  charged: fc.boolean(),
  run,
  ends: fc.boolean(),
})
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 8, arbitrary: recordOp },
  // Events sent at once: the Redis hot state takes them in one call (its group commit).
  { weight: 3, arbitrary: fc.record({ k: fc.constant('burst' as const), events: fc.array(recordOp, { minLength: 2, maxLength: 8 }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      k: fc.constant('config' as const),
      target,
      runBudgetCents: fc.option(limitCents),
      thresholdCents: limitCents,
      autoResume: fc.boolean(),
      alertAt: fc.subarray([0.5, 0.8, 0.9]),
      velocity: fc.option(fc.record({ cents: limitCents, minutes: fc.integer({ min: 1, max: 10 }) })),
      periods: fc.oneof(
        { weight: 2, arbitrary: fc.constant<PeriodBudget[]>([]) },
        {
          weight: 1,
          arbitrary: fc.subarray(PERIOD_SPECS).chain((specs) => fc.tuple(...specs.map((spec) => limitCents.map((c): PeriodBudget => ({ spec, limitNano: c * (USD / 100) })))).map((b): PeriodBudget[] => b)),
        },
      ),
    }),
  },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('pause' as const), target, paused: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ k: fc.constant('hold' as const), agent, cents, ttlMinutes: fc.integer({ min: 1, max: 30 }), retry: earlier, run }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('release' as const), hold: fc.nat({ max: 1000 }) }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('get' as const), target }) },
  { weight: 1, arbitrary: fc.constant({ k: 'list' as const }) },
  {
    weight: 3,
    arbitrary: fc.record({
      k: fc.constant('tick' as const),
      // Mostly forward; now and then back by up to two minutes (an instance whose clock is behind).
      ms: fc.oneof(
        { weight: 5, arbitrary: fc.integer({ min: 0, max: 90_000 }) },
        { weight: 2, arbitrary: fc.integer({ min: 1, max: 30 }).map((m) => m * 60_000) },
        { weight: 1, arbitrary: fc.integer({ min: 1, max: 30 }).map((h) => h * 3_600_000) },
        { weight: 1, arbitrary: fc.integer({ min: -120_000, max: -1 }) },
      ),
    }),
  },
)

let redis: Awaited<ReturnType<typeof startRedis>>
let runs = 0
beforeAll(async () => {
  redis = await startRedis()
})
afterAll(async () => {
  await redis.stop()
})

interface Store {
  hs: HotState
  journal: JournalSource
}

async function stores(): Promise<[Store, Store]> {
  const log = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-eq-')), fsync: false, maxRows: 1_000_000 })
  const prefix = `eq${++runs}:`
  const journal = new RedisJournal({ redis: redis.redis, instance: 'i', partitions: 4, maxRows: 1_000_000, prefix })
  await journal.register()
  const empty = async () => ({ minutes: [], seen: [], policy: null, policyVersion: 0, pause: null, ignored: null })
  // Runs are kept as long as the histories last: which idle runs leave first depends on the
  // order of their events, which a clock stepping back makes differ between the two (the
  // contract suite checks the idle time with a clock that goes forward).
  const runIdleMs = 10 * 365 * 86_400_000
  const hs = new RedisHotState({ redis: redis.redis, prefix, journal, loader: empty, userAgents: async () => [], runIdleMs })
  return [
    { hs: new MemoryHotState(log, { runIdleMs }), journal: log },
    { hs, journal },
  ]
}

/** The rows journaled since the last call, each as its table and row; versions kept apart. */
async function drain(journal: JournalSource): Promise<Array<{ table: string; row: Record<string, unknown> }>> {
  const batch = await journal.next(1_000_000)
  if (!batch) return []
  await journal.commit(batch)
  return batch.entries.map((e) => ({ table: e.table, row: JSON.parse(e.json.toString('utf8')) as Record<string, unknown> }))
}

const refOf = (t: Target): AgentRef => (t < 0 ? fleetOf(USER) : { userId: USER, agentId: AGENTS[t]! })

/** What an answer says, without the store's own version numbers (collected apart by `key`, to check their order). */
function normal(value: unknown, versions: Array<[string, number]>, key = ''): unknown {
  if (Array.isArray(value)) return value.map((v) => normal(v, versions, key))
  if (value === null || typeof value !== 'object') return value
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) {
    if (k === 'version' && typeof v === 'number') {
      versions.push([`${key}${String((value as { agent_id?: string }).agent_id)}`, v])
      continue
    }
    out[k] = normal(v, versions, k === 'row' ? `${String((value as { table?: string }).table)} of ` : key)
  }
  return out
}

async function outcome(p: Promise<unknown>): Promise<unknown> {
  try {
    return { ok: await p }
  } catch (err) {
    return { error: (err as { code?: string }).code ?? String(err) }
  }
}

/** The ids a step names: an event's (new, or an earlier one again), the hold it settles, asks for or releases. */
interface Ids {
  eventId: string
  holdId: string | undefined
}

/** An event of a step, with the ids it names. */
function eventOf(o: RecordOp, ids: Ids, now: number): RecordEvent {
  const ref = refOf(o.agent)
  const { eventId, holdId: hold } = ids
  const costNano = o.cents * (USD / 100)
  return {
    ...ref,
    eventId,
    costNano,
    llmCall: o.llm,
    at: now,
    holdId: o.llm ? hold : undefined,
    runId: o.run ?? undefined,
    // An agent_end is no llm_call.
    endsRun: !o.llm && o.ends === true,
    row: { user_id: USER, agent_id: ref.agentId, timestamp: toChDateTime64us(now * 1000), event_id: eventId, event_type: o.llm ? 'llm_call' : 'tool_call', model: '', input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, tool_name: null, metadata: '', cost_nano: costNano, price_fallback: false },
    // A small budget, so that some charges are refused.
    ...(o.charged ? { rate: { key: 'events:k', max: 12, windowMs: 600_000 } } : {}),
  }
}

/** Applies one step to a store and answers what it said and journaled. */
async function apply(s: Store, o: Op, now: number, ids: Ids | Ids[]): Promise<unknown> {
  const versions: Array<[string, number]> = []
  let answer: unknown
  switch (o.k) {
    case 'record':
      answer = await outcome(s.hs.record(eventOf(o, ids as Ids, now), now))
      break
    case 'burst': {
      const all = ids as Ids[]
      answer = await Promise.all(o.events.map((e, i) => outcome(s.hs.record(eventOf(e, all[i]!, now), now))))
      break
    }
    case 'config': {
      const policy: AgentPolicy = {
        ...DEFAULT_POLICY,
        thresholdNano: o.thresholdCents * (USD / 100),
        autoResume: o.autoResume,
        alertAt: o.alertAt,
        velocityLimitNano: o.velocity ? o.velocity.cents * (USD / 100) : null,
        velocityWindowMinutes: o.velocity?.minutes ?? 5,
        periodBudgets: o.periods,
        // An agent's only (POST /config/fleet has none).
        runBudgetNano: o.target >= 0 && o.runBudgetCents != null ? o.runBudgetCents * (USD / 100) : null,
      }
      answer = await outcome(s.hs.setPolicy(refOf(o.target), policy, now, 'key'))
      break
    }
    case 'pause':
      answer = await outcome(s.hs.setPaused(refOf(o.target), o.paused, now, 'key'))
      break
    case 'hold': {
      answer = await outcome(s.hs.hold(refOf(o.agent), { holdId: (ids as Ids).holdId!, costNano: o.cents * (USD / 100), expiresAt: now + o.ttlMinutes * 60_000, runId: o.run ?? undefined }, now))
      break
    }
    case 'release':
      answer = await outcome(s.hs.release(USER, (ids as Ids).holdId ?? 'none', now))
      break
    case 'get':
      answer = await outcome(s.hs.get(refOf(o.target), now))
      break
    case 'list':
      answer = await outcome(s.hs.listAgents(USER, now).then((l) => [...l].sort((x, y) => (x.agentId < y.agentId ? -1 : 1))))
      break
    case 'tick':
      return null
  }
  let rows = await drain(s.journal)
  // A listing reads its agents in no set order: its relaxing transitions are compared as a set.
  if (o.k === 'list') rows = [...rows].sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y)))
  // The answer's versions are those of the rows: only the rows' are kept.
  const said = { answer: normal(answer, []), rows: normal(rows, versions) }
  return { said, versions }
}

describe('the two hot states', () => {
  it('answer and journal the same for any history of events, configs, pauses, holds, reads and time (property)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 60 }), async (ops) => {
        const [memory, inRedis] = await stores()
        const events: string[] = []
        const holds: string[] = []
        const versions: Array<Map<string, number>> = [new Map(), new Map()]
        let now = T0
        for (const [i, o] of ops.entries()) {
          if (o.k === 'tick') {
            now += o.ms
            continue
          }
          // An earlier id named again, or a new one (remembered for later steps).
          const again = (list: string[], i: number | null) => (i === null || list.length === 0 ? undefined : list[i % list.length])
          const fresh = (list: string[], prefix: string) => (list.push(`${prefix}${list.length}`), list.at(-1)!)
          const eventIds = (r: RecordOp): Ids => ({ eventId: again(events, r.repeat) ?? fresh(events, 'e'), holdId: again(holds, r.settle) })
          const ids: Ids | Ids[] =
            o.k === 'record'
              ? eventIds(o)
              : o.k === 'burst'
                ? o.events.map(eventIds)
                : o.k === 'hold'
                  ? { eventId: '', holdId: again(holds, o.retry) ?? fresh(holds, 'h') }
                  : { eventId: '', holdId: o.k === 'release' ? again(holds, o.hold) : undefined }
          const results = [await apply(memory, o, now, ids), await apply(inRedis, o, now, ids)] as Array<{ said: unknown; versions: Array<[string, number]> }>
          expect(results[1]!.said, `step ${i}: ${JSON.stringify(o)}`).toEqual(results[0]!.said)
          // Each store's versions grow per table and state in the order it journaled them.
          results.forEach((r, s) => {
            for (const [agentId, v] of r.versions) {
              expect(v, `step ${i}, version of ${agentId}`).toBeGreaterThan(versions[s]!.get(agentId) ?? 0)
              versions[s]!.set(agentId, v)
            }
          })
        }
        await Promise.all([memory.hs.close(), inRedis.hs.close()])
      }),
      {
        numRuns: 150,
        examples: [
          // A rolling window set after the clock stepped back, then a listing.
          [
            [
              { k: 'record', agent: 2, cents: 20, llm: false, repeat: null, settle: null, charged: false },
              { k: 'tick', ms: -1 },
              { k: 'config', target: 2, thresholdCents: 50, autoResume: false, alertAt: [], velocity: null, periods: [{ spec: { windowDays: 1 }, limitNano: 500_000_000 }] },
              { k: 'list' },
              { k: 'config', target: 0, thresholdCents: 50, autoResume: false, alertAt: [], velocity: null, periods: [] },
            ],
          ],
          // A fleet's first config with a period budget, then its first event: the alert's projection.
          [
            [
              {
                k: 'config',
                target: -1,
                thresholdCents: 50,
                autoResume: false,
                alertAt: [0.5],
                velocity: null,
                periods: [{ spec: { period: 'day', timeZone: 'Asia/Kolkata', weekStarts: 'monday', monthStartsOn: 1 }, limitNano: 500_000_000 }],
              },
              { k: 'record', agent: 0, cents: 40, llm: false, repeat: null, settle: null, charged: false },
            ],
          ],
          // An agent asks for the open hold of another agent while its own override could end:
          // the hold is refused before the relaxing rules run, and nothing is journaled.
          [
            [
              { k: 'config', target: 0, thresholdCents: 200, autoResume: false, alertAt: [], velocity: { cents: 50, minutes: 1 }, periods: [] },
              { k: 'record', agent: 0, cents: 100, llm: true, repeat: null, settle: null, charged: false },
              { k: 'pause', target: 0, paused: false },
              { k: 'hold', agent: 1, cents: 10, ttlMinutes: 30, retry: null },
              { k: 'tick', ms: 120_000 },
              { k: 'hold', agent: 0, cents: 10, ttlMinutes: 30, retry: 0 },
            ],
          ],
        ],
      },
    )
  }, 240_000)
})
