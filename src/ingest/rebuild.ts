import type { ClickHouseClient } from '@clickhouse/client'
import type { MemoryHotState } from '../hot-state/memory.ts'
import { fingerprint } from '../hot-state/dedup.ts'
import { pauseReasonOf } from '../hot-state/meters.ts'
import { agentKey, fleetOf, isFleet, refOf, type AgentRef } from '../hot-state/agent-ref.ts'
import { metersOf, resolveMeters } from '../hot-state/meters.ts'
import type { PeriodHistory } from '../hot-state/period-tallies.ts'
import { type AgentPolicy } from '../hot-state/meters.ts'
import { DEFAULT_RUN_IDLE_MS, type Ignored, type AgentLoad, type AgentLoader, type PauseState, type Transition } from '../hot-state/types.ts'
import { allConfigs, journaledConfigRow, policyOf } from '../storage/configs.ts'
import { fleetMinutes, scanWindow, seenEvents, spendByQuarter, windowMinutes } from '../storage/events.ts'
import { ignoredOf, latestIgnored } from '../storage/ignored.ts'
import { keptRuns } from '../storage/run-stops.ts'
import { latestTransitions, type LatestTransition } from '../storage/transitions.ts'
import type { JournalEntry } from '../journal/types.ts'
import { chDateTimeToMs } from '../storage/clickhouse.ts'
import { MINUTE_MS, minuteOf, windowStartMs } from '../rolling-day.ts'

/**
 * Rebuilds the whole hot state from ClickHouse and the rows of the journal not yet shipped
 * there: every event of the window, each id once (wherever it is found: a row shipped whose
 * commit was not recorded is in both), every config and the latest pause state (the newest
 * version, wherever it is found). It replaces the hot state rather than adding to it, so it
 * never counts twice, and streams the window rather than holding it. Returns the
 * transitions the rebuild decided (journaled), for the caller to announce.
 */
export async function rebuildHotState(
  clickhouse: ClickHouseClient,
  hotState: MemoryHotState,
  now: number,
  unshipped: AsyncIterable<JournalEntry> = (async function* () {})(),
): Promise<Transition[]> {
  const since = windowStartMs(now)
  const [configs, pauses, ignored] = await Promise.all([allConfigs(clickhouse), latestTransitions(clickhouse), latestIgnored(clickhouse)])
  const restore = hotState.beginRestore(now)
  await scanWindow(clickhouse, since, (ref) => restore.agent(ref))
  const { policies, pauseStates, ignoredFlags, offer } = newestStates(configs, pauses, ignored)
  for await (const entry of unshipped) {
    const { table, row } = entry
    if (table === 'events') {
      const ref = { userId: row.user_id, agentId: row.agent_id }
      const minute = minuteOf(chDateTimeToMs(row.timestamp))
      restore.event(ref, fingerprint(row.user_id, row.agent_id, row.event_id), row.cost_nano, minute, row.event_type === 'llm_call' ? 1 : 0, row.run_id || undefined)
    } else if (table === 'run_stops') {
      restore.runStop({ userId: row.user_id, agentId: row.agent_id }, row.run_id)
    } else {
      offer(entry)
    }
    // budget_alerts: a record; the alert state follows from the totals (MemoryHotState.beginRestore).
  }
  for (const { ref, value } of policies.values()) restore.policy(ref, value)
  const withRunBudget = policies.values().flatMap(({ ref, value }) => (value.runBudgetNano === null ? [] : [ref]))
  for (const r of await keptRuns(clickhouse, withRunBudget, now - hotState.runIdleMs)) {
    restore.run({ userId: r.user_id, agentId: r.agent_id }, r.run_id, r.cost_nano, r.last_ms, r.stopped)
  }
  for (const [key, history] of await periodHistories(clickhouse, policies.values(), minuteOf(since), now)) restore.history(refOf(key), history)
  for (const { ref, value } of pauseStates.values()) restore.pause(ref, value)
  for (const { ref, value } of ignoredFlags.values()) restore.ignored(ref, value)
  return restore.finish()
}

/**
 * What the stored events say each state with a period budget spent before minute `cut` in
 * its periods, by agentKey: two queries (agents, fleets) from the earliest period's start.
 */
async function periodHistories(clickhouse: ClickHouseClient, policies: Iterable<{ ref: AgentRef; value: AgentPolicy }>, cut: number, now: number): Promise<Map<string, PeriodHistory>> {
  const histories = new Map<string, { cut: number; quarters: number[] }>()
  let from = Infinity
  for (const { ref, value } of policies) {
    if (value.periodBudgets.length === 0) continue
    for (const m of resolveMeters(metersOf(value), now)) if (m.period) from = Math.min(from, m.from)
    histories.set(agentKey(ref), { cut, quarters: [] })
  }
  if (from >= cut) return histories
  const refs = [...histories.keys()].map(refOf)
  const agents = refs.filter((r) => !isFleet(r))
  const fleets = refs.filter(isFleet).map((r) => r.userId)
  const rows = await Promise.all([
    agents.length > 0 ? spendByQuarter(clickhouse, from * MINUTE_MS, cut * MINUTE_MS, { refs: agents }) : [],
    fleets.length > 0 ? spendByQuarter(clickhouse, from * MINUTE_MS, cut * MINUTE_MS, { fleets }) : [],
  ])
  // Rows of pairs not asked for (a user of the batch with another user's agent id) are skipped.
  for (const r of rows.flat()) histories.get(agentKey({ userId: r.user_id, agentId: r.agent_id }))?.quarters.push(r.quarter, r.cost_nano)
  return histories
}

/**
 * The newest config, pause state and ignoring flag of each agent, by version: ClickHouse's
 * rows, then `offer` takes the journal's rows not yet there (a row of another table is left).
 */
function newestStates(
  configs: Awaited<ReturnType<typeof allConfigs>>,
  pauses: Awaited<ReturnType<typeof latestTransitions>>,
  ignored: Awaited<ReturnType<typeof latestIgnored>>,
) {
  const policies = new NewestPerAgent<AgentPolicy>()
  for (const c of configs) policies.offer(c, c.version, policyOf(c))
  const pauseStates = new NewestPerAgent<PauseState>()
  for (const p of pauses) pauseStates.offer(p, p.version, pauseOf(p, p.atMs))
  const ignoredFlags = new NewestPerAgent<Ignored>()
  for (const i of ignored) ignoredFlags.offer(i, i.version, i.ignored)
  const offer = ({ table, row }: JournalEntry) => {
    if (table === 'pause_transitions') pauseStates.offer(row, row.version, pauseOf(row, chDateTimeToMs(row.at)))
    else if (table === 'agent_configs') policies.offer(row, row.version, policyOf(journaledConfigRow(row)))
    else if (table === 'ignored_pauses') ignoredFlags.offer(row, row.version, ignoredOf(row))
  }
  return { policies, pauseStates, ignoredFlags, offer }
}

/** Per agent, the value of the newest version offered (a config, a pause state). */
class NewestPerAgent<T> {
  readonly #byAgent = new Map<string, { ref: AgentRef; version: number; value: T }>()

  offer(row: { user_id: string; agent_id: string }, version: number, value: T): void {
    const ref = { userId: row.user_id, agentId: row.agent_id }
    const id = agentKey(ref)
    if (version > (this.#byAgent.get(id)?.version ?? -1)) this.#byAgent.set(id, { ref, version, value })
  }

  values(): Array<{ ref: AgentRef; version: number; value: T }> {
    return [...this.#byAgent.values()]
  }
}

export interface AgentLoaderOptions {
  /** Agents per batch at most, when more are waiting. */
  maxBatch?: number
  /** Batches running at once; agents asked for meanwhile gather into the next one. */
  concurrency?: number
  /** How long a run kept for its agent's run budget may go without an event (the hot state's). */
  runIdleMs?: number
  /**
   * The rows the journal holds of these users, ClickHouse may not have yet (with Redis, every
   * instance's streams of their partitions): a state is loaded from ClickHouse and them, as
   * the embedded rebuild is, each event id once. Without them, a state lost while an
   * instance that died had its rows unshipped (or one written by an earlier release, whose
   * states this one does not read) would be loaded without those rows, until the window
   * passed them.
   */
  journalRows?: (userIds: readonly string[]) => AsyncIterable<JournalEntry>
}

/**
 * Agents' state from ClickHouse, for a hot state that lost it (Redis: loaded on demand).
 * The agents asked for in one turn of the event loop share one batch of reads: four queries
 * run together, whatever the number of agents. One query each per agent, queued behind one
 * another, held a fleet's first events after a Redis restart or a new day to 14-21 new agents
 * a second. An agent with no history waits for one batch.
 */
export function agentLoader(clickhouse: ClickHouseClient, o: AgentLoaderOptions = {}): AgentLoader & { readonly stats: { batches: number; agents: number } } {
  const maxBatch = o.maxBatch ?? 1000
  const concurrency = o.concurrency ?? 4
  const runIdleMs = o.runIdleMs ?? DEFAULT_RUN_IDLE_MS
  const stats = { batches: 0, agents: 0 }
  type Waiting = { ref: AgentRef; done: Array<{ resolve: (l: AgentLoad) => void; reject: (e: unknown) => void }> }
  let gathering: { agents: Map<string, Waiting>; now: number } | null = null
  let running = 0

  const start = (): void => {
    if (!gathering || running >= concurrency) return
    const { agents, now } = gathering
    gathering = null
    running++
    stats.batches++
    stats.agents += agents.size
    loadAgents(clickhouse, [...agents.values()].map((w) => w.ref), now, runIdleMs, o.journalRows)
      .then(
        (loads) => agents.forEach((w, id) => w.done.forEach((d) => d.resolve(loads.get(id)!))),
        (err: unknown) => agents.forEach((w) => w.done.forEach((d) => d.reject(err))),
      )
      .finally(() => {
        running--
        start()
      })
  }

  const load = (ref: AgentRef, now: number): Promise<AgentLoad> =>
    new Promise((resolve, reject) => {
      if (!gathering) {
        gathering = { agents: new Map(), now }
        setImmediate(start)
      }
      gathering.now = Math.max(gathering.now, now)
      const id = agentKey(ref)
      let waiting = gathering.agents.get(id)
      if (!waiting) gathering.agents.set(id, (waiting = { ref, done: [] }))
      waiting.done.push({ resolve, reject })
      if (gathering.agents.size >= maxBatch) start()
    })
  return Object.assign(load, { stats })
}

/** The state of a batch of agents as ClickHouse has it, by `user\0agent`. */
async function loadAgents(
  clickhouse: ClickHouseClient,
  refs: readonly AgentRef[],
  now: number,
  runIdleMs: number,
  journalRows?: AgentLoaderOptions['journalRows'],
): Promise<Map<string, AgentLoad>> {
  const since = windowStartMs(now)
  const users = [...new Set(refs.map((r) => r.userId))]
  // The journal is read before ClickHouse: a batch shipped and trimmed from it meanwhile is
  // then found in ClickHouse, never in neither.
  const journaled: JournalEntry[] = []
  if (journalRows) for await (const entry of journalRows(users)) if (users.includes(entry.row.user_id)) journaled.push(entry)
  const journaledEvents = journaled.flatMap((e) => (e.table === 'events' && chDateTimeToMs(e.row.timestamp) >= since ? [e.row] : []))
  // Fleets (types.ts FLEET) are loaded as agents are, their minutes summed over the user's agents.
  const agents = refs.filter((r) => !isFleet(r))
  const fleets = refs.filter(isFleet).map((r) => r.userId)
  // The ids ClickHouse holds of the agents asked for, and of those the journaled events are of.
  const seenOf = [...new Map([...agents, ...journaledEvents.map((e) => ({ userId: e.user_id, agentId: e.agent_id }))].map((r) => [agentKey(r), r])).values()]
  // The minutes leave the journaled events out, which are counted from the journal below:
  // whether a batch is shipped before, between or after these reads, each event counts once.
  const excluded = [...new Set(journaledEvents.map((e) => e.event_id))]
  const [minutes, fleetMinuteRows, seen, configs, pauses, ignored] = await Promise.all([
    agents.length > 0 ? windowMinutes(clickhouse, since, agents, excluded) : [],
    fleets.length > 0 ? fleetMinutes(clickhouse, since, fleets, excluded) : [],
    seenOf.length > 0 ? seenEvents(clickhouse, since, seenOf) : [],
    allConfigs(clickhouse, refs),
    latestTransitions(clickhouse, refs),
    latestIgnored(clickhouse, refs),
  ])
  const loads = new Map<string, AgentLoad>(refs.map((r) => [agentKey(r), { minutes: [], seen: [], policy: null, policyVersion: 0, pause: null, ignored: null }]))
  // Rows of pairs not asked for (a user of the batch with another user's agent id) are skipped.
  const of = (r: { user_id: string; agent_id: string }) => loads.get(agentKey({ userId: r.user_id, agentId: r.agent_id }))
  for (const m of [...minutes, ...fleetMinuteRows]) of(m)?.minutes.push({ minute: m.minute, costNano: m.cost_nano, llmCalls: m.llm_calls })
  for (const s of seen) of(s)?.seen.push({ eventId: s.event_id, costNano: s.cost_nano, minute: s.minute })
  const { policies, pauseStates, ignoredFlags, offer } = newestStates(configs, pauses, ignored)

  // The journaled events, each once (as minutes, whether ClickHouse has them yet or not),
  // and their ids as seen where ClickHouse did not show them; the rest by version.
  const seenIds = new Set(seen.map((s) => `${agentKey({ userId: s.user_id, agentId: s.agent_id })}\0${s.event_id}`))
  const counted = new Set<string>()
  for (const e of journaledEvents) {
    const ref = { userId: e.user_id, agentId: e.agent_id }
    const id = `${agentKey(ref)}\0${e.event_id}`
    if (counted.has(id)) continue
    counted.add(id)
    const minute = minuteOf(chDateTimeToMs(e.timestamp))
    const llmCalls = e.event_type === 'llm_call' ? 1 : 0
    const agent = loads.get(agentKey(ref))
    agent?.minutes.push({ minute, costNano: e.cost_nano, llmCalls })
    if (!seenIds.has(id)) agent?.seen.push({ eventId: e.event_id, costNano: e.cost_nano, minute })
    loads.get(agentKey(fleetOf(e.user_id)))?.minutes.push({ minute, costNano: e.cost_nano, llmCalls })
  }
  for (const entry of journaled) offer(entry)
  for (const l of loads.values()) l.minutes.sort((a, b) => a.minute - b.minute)
  for (const { ref, value, version } of policies.values()) {
    const l = loads.get(agentKey(ref))
    if (l) {
      l.policy = value
      l.policyVersion = version
    }
  }
  for (const { ref, value } of pauseStates.values()) {
    const l = loads.get(agentKey(ref))
    if (l) l.pause = value
  }
  for (const { ref, value } of ignoredFlags.values()) {
    const l = loads.get(agentKey(ref))
    if (l) l.ignored = value
  }
  // The states with period budgets, one more read: what they spent before the window.
  const withPeriods = [...loads].flatMap(([key, l]) => (l.policy && l.policy.periodBudgets.length > 0 ? [{ ref: refOf(key), value: l.policy }] : []))
  if (withPeriods.length > 0) {
    for (const [key, history] of await periodHistories(clickhouse, withPeriods, minuteOf(since), now)) loads.get(key)!.history = history
  }
  // The agents with a run budget, one more read: the runs they keep.
  const withRunBudget = [...loads].flatMap(([key, l]) => (l.policy?.runBudgetNano != null ? [refOf(key)] : []))
  for (const r of (await keptRuns(clickhouse, withRunBudget, now - runIdleMs)).sort((a, b) => a.last_ms - b.last_ms)) {
    const l = of(r)
    if (l?.policy?.runBudgetNano != null) (l.runs ??= []).push({ runId: r.run_id, spentNano: r.cost_nano, lastAt: r.last_ms, stopped: r.stopped })
  }
  return loads
}


/** A stored transition's pause state; a pause began with its newest transition (`atMs`), the pause itself. */
function pauseOf(p: Pick<LatestTransition, 'is_paused' | 'reason' | 'override'>, atMs: number): PauseState {
  return {
    paused: p.is_paused,
    reason: p.is_paused ? pauseReasonOf(p.reason) : null,
    override: p.override,
    since: p.is_paused ? atMs : 0,
  }
}
