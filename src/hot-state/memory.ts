import type { Nano } from '../money.ts'
import type { JournalRow, JournalStatus } from '../journal/types.ts'
import { alertRow } from '../storage/alerts.ts'
import { configRow, shownConfig } from '../storage/configs.ts'
import { ignoredRow } from '../storage/ignored.ts'
import { runStopRow } from '../storage/run-stops.ts'
import { transitionRow } from '../storage/transitions.ts'
import { nextVersion } from '../storage/version.ts'
import { MINUTE_MS, minuteOf, inWindow } from '../rolling-day.ts'
import { budgetMeter, metersOf, resolveMeters, type Meter, type MeterId, type ResolvedMeter } from './meters.ts'
import { changePolicy, countRun, cross, holdRoom, levelsReached, manual, pausedBy, relax, stepEvent, stepHold, type BudgetedRun, type Change, type Counted, type Judged, type RunJudged } from './policy.ts'
import { HoldBook, holdOfAnotherAgent, type OpenHold } from './holds.ts'
import { exhaustionAt, periodExhaustionAt } from './projection.ts'
import { EventIdSet, FingerprintTable, fingerprint, type Fingerprint } from './dedup.ts'
import { RollingWindow } from './minute-buckets.ts'
import { NO_HISTORY, NO_PERIODS, PeriodTallies, type PeriodHistory } from './period-tallies.ts'
import { FLEET, agentKey, fleetOf, isFleet, refOf, type AgentRef } from './agent-ref.ts'
import { agentBudget, defaultPolicy, type AgentPolicy } from './meters.ts'
import { DEFAULT_IGNORE_GRACE_MS, DEFAULT_RUN_IDLE_MS, NOT_IGNORED, RUNNING, RateLimitedError, SYSTEM_ACTOR, type AgentSnapshot, type BudgetAlert, type HoldRequest, type HoldResult, type HotState, type Ignored, type PeriodSpend, type IgnoredPause, type ListedAgent, type PauseState, type RateCharge, type RateState, type RecordEvent, type RecordInput, type RecordResult, type ReleasedHold, type Restore, type RunStop, type Transition } from './types.ts'

interface AgentEntry {
  window: RollingWindow
  pause: PauseState
  policy: AgentPolicy
  /** The policy's meters (meters.ts metersOf). */
  meters: readonly Meter[]
  configured: boolean
  /** Per meter, the alert levels fired and not re-armed (policy.ts alerts). */
  alerted: Partial<Record<MeterId, number>>
  /** llm_calls after its pause and grace (policy.ts countIgnored); replaced, never changed. */
  ignored: Ignored
  /** The sum of its open budget holds, which #holds keeps. */
  held: Nano
  /** Its spend over the periods of its period budgets; null while its policy has none. */
  periods: PeriodTallies | null
  /**
   * Its runs, while its policy has a run budget (else null), by run id, least recently
   * counted first: a run that ends unstopped, or has no event for the idle time, is dropped.
   */
  runs: Map<string, RunEntry> | null
}

/** A run of an agent with a run budget: its tally, and when its newest event was counted (epoch ms). */
interface RunEntry extends RunJudged {
  lastAt: number
}

/** The embedded journal as the in-process hot state writes to it (journal/segment-log.ts). */
export interface LocalJournal extends JournalStatus {
  /** Synchronous up to the promise it returns, which resolves once the rows are durable. */
  append(rows: readonly JournalRow[], now: number): Promise<void>
  /** Resolves once every row appended so far is durable. */
  synced(): Promise<void>
  /** Throws what append() would refuse with now (the journal's bound, a full disk). */
  mustHaveRoom(): void
}

/**
 * The hot state in process memory, for the embedded single-instance deployment, with its
 * journal. Every change and its journal append run in one synchronous block, so no other
 * request sees one without the other: that block is the atomic step, and the caller is
 * answered once the journal has written it (group commit). It keeps nothing another
 * instance could need: with several instances, use the Redis one.
 *
 * Each operation takes its states through the rules of policy.ts in the same order as the
 * Redis scripts (lua/record.lua and the others) do: the window and the holds move on to
 * `now`, then the rules run on the states judged at that moment (judge()).
 */
export class MemoryHotState implements HotState {
  readonly #journal: LocalJournal
  readonly #agents = new Map<string, AgentEntry>()
  // user → their agents held in #agents, by id (listings without a scan of every agent).
  readonly #byUser = new Map<string, Map<string, AgentEntry>>()
  // The window's event ids and their costs, at most 64 bytes each (dedup.ts).
  readonly #seen = new EventIdSet()
  // user → their open budget holds; a user without any has no book.
  readonly #holds = new Map<string, HoldBook>()
  // Round-robin cursor over the agents, to forget idle ones a few at a time.
  #sweep: Iterator<[string, AgentEntry]> = this.#agents.entries()
  // API keys' budgets of events in their current window (#charge), and a cursor to forget spent ones.
  readonly #budgets = new Map<string, { count: number; endsAt: number }>()
  #budgetSweep: Iterator<[string, { count: number; endsAt: number }]> = this.#budgets.entries()

  readonly #graceMs: number
  readonly #runIdleMs: number

  /**
   * `graceMs`: how long after a pause an llm_call may still arrive unflagged; `runIdleMs`:
   * how long a run kept for its agent's run budget may go without an event.
   */
  constructor(journal: LocalJournal, o: { graceMs?: number; runIdleMs?: number } = {}) {
    this.#journal = journal
    this.#graceMs = o.graceMs ?? DEFAULT_IGNORE_GRACE_MS
    this.#runIdleMs = o.runIdleMs ?? DEFAULT_RUN_IDLE_MS
  }

  async record(e: RecordEvent, now: number): Promise<RecordResult> {
    // The bound is checked before anything changes: a refused event leaves no trace.
    this.#journal.mustHaveRoom()
    const rate = this.#charge(e.rate, now)
    const step = { ...this.#count(e, now), rate }
    if (!step.counted) {
      // The first of these may still be on its way to the disk: answer once it is there.
      await this.#journal.synced()
      return step
    }
    // In the order the Redis script journals them: the agent's changes, then its fleet's.
    const changes = (fleet: boolean): JournalRow[] =>
      step.transitions.length + step.alerts.length === 0
        ? []
        : [...step.transitions.filter((t) => isFleet(t) === fleet).map(asRow), ...step.alerts.filter((x) => isFleet(x) === fleet).map(alertAsRow)]
    await this.#journal.append(
      [
        { table: 'events', row: e.row },
        ...changes(false),
        ...changes(true),
        ...(step.ignored ? [{ table: 'ignored_pauses', row: ignoredRow(step.ignored) } as const] : []),
        ...(step.runStop ? [{ table: 'run_stops', row: runStopRow(step.runStop) } as const] : []),
      ],
      now,
    )
    return step
  }

  /** The atomic step of record(): dedup, the hold it settles, the rules (policy.ts stepEvent), the windows. */
  #count(e: RecordInput, now: number): Omit<RecordResult, 'rate'> {
    const nowMinute = minuteOf(now)
    this.#seen.expire(nowMinute)
    this.#forgetIdle(nowMinute, SWEEP_PER_ACCESS)
    const fleetRef = fleetOf(e.userId)
    const agent = this.#moveOn(e, now)
    const fleet = this.#moveOn(fleetRef, now)
    this.#expireHolds(e.userId, now)
    const fp = fingerprint(e.userId, e.agentId, e.eventId)
    const seenCost = this.#seen.get(fp, nowMinute)
    if (seenCost !== undefined) {
      const stopped = e.runId !== undefined && agent.runs?.get(e.runId)?.stopped
      return { counted: false, costNano: seenCost, ...this.#budget(agent, now), ...pausedBy(agent.pause, fleet.pause, stopped), transitions: [], alerts: [], ignored: null, runStop: null, periods: periodsOf(agent, now) }
    }
    // The hold this call settles is released before its real cost is counted; a retry was a
    // repeat above, and an unknown or expired hold releases nothing.
    if (e.holdId !== undefined) this.#settle(e, e.holdId)
    const minute = minuteOf(e.at)
    this.#seen.add(fp, e.costNano, minute)
    const run = this.#runOf(agent, e.runId, now)
    const meters = { agent: resolveMeters(agent.meters, now), fleet: resolveMeters(fleet.meters, now) }
    const a = judge(agent, meters.agent)
    const f = judge(fleet, meters.fleet)
    const totals = { agent: agent.window.totalNano, fleet: fleet.window.totalNano }
    const step = stepEvent(a, f, meters, { costNano: e.costNano, llmCall: e.llmCall, ignored: agent.ignored, graceMs: this.#graceMs }, now)
    agent.window.add(minute, e.costNano, e.llmCall ? 1 : 0)
    fleet.window.add(minute, e.costNano, e.llmCall ? 1 : 0)
    // In the minute the window counted it in (an event older than its newest bucket folds into it), as the Redis state does.
    agent.periods?.add(agent.window.lastMinute!, e.costNano)
    fleet.periods?.add(fleet.window.lastMinute!, e.costNano)
    agent.pause = a.pause
    agent.ignored = step.ignored
    fleet.pause = f.pause
    const transitions: Transition[] = []
    const alerts: BudgetAlert[] = []
    this.#changes(e, agent, a, meters.agent, totals.agent, step.agent, now, transitions, alerts)
    this.#changes(fleetRef, fleet, f, meters.fleet, totals.fleet, step.fleet, now, transitions, alerts)
    const ignored = step.raised ? this.#ignoredPause(e, step.ignored, agent, fleet, now) : null
    const runStop = run && countRun(run, e.costNano, e.llmCall) ? runStopOf(e, e.runId!, run, agent, now) : null
    // A run that ends unstopped is done with; a stopped one is kept, to answer its late events.
    if (run && e.endsRun && !run.s.stopped) agent.runs!.delete(e.runId!)
    return { counted: true, costNano: e.costNano, ...this.#budget(agent, now), ...pausedBy(agent.pause, fleet.pause, run?.s.stopped), transitions, alerts, ignored, runStop, periods: periodsOf(agent, now) }
  }

  /**
   * The run `runId` of an agent with a run budget, with its budget (undefined without
   * either). A new one is made after at most two runs idle for longer than the idle time
   * leave from the head (runs leave as fast as they come). When it was last seen moves on to
   * `now` once a minute has passed since, and the run to the end of the agent's runs, so they
   * stay in that order (as lua/state.lua read_run keeps them, a write a minute).
   */
  #runOf(agent: AgentEntry, runId: string | undefined, now: number): BudgetedRun | undefined {
    const runs = agent.runs
    if (runs === null || runId === undefined) return undefined
    let run = runs.get(runId)
    if (!run) {
      let i = 0
      for (const [id, r] of runs) {
        if (i++ === 2 || r.lastAt > now - this.#runIdleMs) break
        runs.delete(id)
      }
      runs.set(runId, (run = { spent: 0, held: 0, stopped: false, lastAt: now }))
    } else if (now >= run.lastAt + MINUTE_MS) {
      run.lastAt = now
      runs.delete(runId)
      runs.set(runId, run)
    }
    return { s: run, budgetNano: agent.policy.runBudgetNano! }
  }

  /** What counting an event did to a state, as transitions and alerts (`before`: its total before the event). */
  #changes(ref: AgentRef, entry: AgentEntry, s: Judged, meters: readonly ResolvedMeter[], before: Nano, c: Counted, now: number, transitions: Transition[], alerts: BudgetAlert[]): void {
    if (c.relaxed) transitions.push(transitionOf(ref, entry, c.relaxed, s, meters, before, now))
    if (c.crossed) transitions.push(transitionOf(ref, entry, c.crossed, s, meters, entry.window.totalNano, now))
    if (c.fired.length === 0) return
    const exhaustion = this.#exhaustion(entry, now)
    for (const { meter, level } of c.fired) {
      const m = meters[meter]!
      const exhaustionAt = m.period ? periodExhaustionAt(m, s.spent[meter]!, entry.window.spentSince(minuteOf(now) - 59), now) : exhaustion
      alerts.push({
        userId: ref.userId,
        agentId: ref.agentId,
        at: now,
        version: nextVersion(now),
        meter: m.id,
        level,
        totalNano: s.spent[meter]!,
        thresholdNano: m.limitNano,
        exhaustionAt,
        webhookUrl: entry.policy.webhookUrl,
      })
    }
  }

  /** Releases the agent's open hold `holdId`; another agent's is a 404, before anything changed. */
  #settle(ref: AgentRef, holdId: string): void {
    const book = this.#holds.get(ref.userId)
    const hold = book?.get(holdId)
    if (!book || !hold) return
    if (hold.agentId !== ref.agentId) throw holdOfAnotherAgent(holdId)
    book.take(holdId)
    this.#unhold(ref.userId, hold)
  }

  /** Drops the user's expired holds from what they hold. */
  #expireHolds(userId: string, now: number): void {
    const book = this.#holds.get(userId)
    if (!book) return
    book.expire(now, (hold) => this.#unhold(userId, hold))
    if (book.size === 0) this.#holds.delete(userId)
  }

  /** A hold no longer counts against its agent's budget nor its fleet's, nor its run's. */
  #unhold(userId: string, hold: OpenHold): void {
    const agent = this.#entry({ userId, agentId: hold.agentId })
    agent.held -= hold.costNano
    this.#entry(fleetOf(userId)).held -= hold.costNano
    const run = hold.runId === undefined ? undefined : agent.runs?.get(hold.runId)
    if (run) run.held -= hold.costNano
  }

  async hold(ref: AgentRef, request: HoldRequest, now: number): Promise<HoldResult> {
    const rate = this.#charge(request.rate, now)
    this.#expireHolds(ref.userId, now)
    let book = this.#holds.get(ref.userId)
    const open = book?.get(request.holdId)
    // Another agent's open hold is refused before anything changes.
    if (open && open.agentId !== ref.agentId) throw holdOfAnotherAgent(request.holdId)
    const fleetRef = fleetOf(ref.userId)
    const agent = this.#moveOn(ref, now)
    const fleet = this.#moveOn(fleetRef, now)
    const meters = { agent: resolveMeters(agent.meters, now), fleet: resolveMeters(fleet.meters, now) }
    const a = judge(agent, meters.agent)
    const f = judge(fleet, meters.fleet)
    const run = this.#runOf(agent, request.runId, now)
    const step = stepHold(a, f, meters, request.costNano, open !== undefined, run)
    agent.pause = a.pause
    fleet.pause = f.pause
    const transitions: Transition[] = []
    if (step.agent) transitions.push(transitionOf(ref, agent, step.agent, a, meters.agent, agent.window.totalNano, now))
    if (step.fleet) transitions.push(transitionOf(fleetRef, fleet, step.fleet, f, meters.fleet, fleet.window.totalNano, now))
    if (step.refusal === null && !open) {
      if (!book) this.#holds.set(ref.userId, (book = new HoldBook()))
      book.add({ id: request.holdId, agentId: ref.agentId, costNano: request.costNano, expiresAt: request.expiresAt, ...(run ? { runId: request.runId } : {}) })
      a.held = agent.held += request.costNano
      f.held = fleet.held += request.costNano
      if (run) run.s.held += request.costNano
    }
    const answer = {
      refusal: step.refusal,
      ...pausedBy(agent.pause, fleet.pause, run?.s.stopped),
      remainingNano: holdRoom([
        { s: a, meters: meters.agent },
        { s: f, meters: meters.fleet },
      ]),
      rate,
    }
    // Reads append past the bound, and so does a hold: it stores nothing but the rare relaxing transition.
    if (transitions.length > 0) await this.#journal.append(transitions.map(asRow), now)
    return answer
  }

  async release(userId: string, holdId: string, now: number, charge?: RateCharge): Promise<{ hold: ReleasedHold | null; rate: RateState | null }> {
    const rate = this.#charge(charge, now)
    this.#expireHolds(userId, now)
    const hold = this.#holds.get(userId)?.take(holdId)
    if (!hold) return { hold: null, rate }
    this.#unhold(userId, hold)
    return { hold: { agentId: hold.agentId, costNano: hold.costNano }, rate }
  }

  /**
   * Counts a charge against its budget (types.ts RateCharge), before anything else the
   * request does; throws RateLimitedError past the budget. A window starts with its first
   * charge and ends `windowMs` later, as lua/state.lua charge() keeps it in Redis.
   */
  #charge(charge: RateCharge | undefined, now: number): RateState | null {
    if (!charge) return null
    this.#forgetSpentBudgets(now)
    let window = this.#budgets.get(charge.key)
    if (!window || window.endsAt <= now) this.#budgets.set(charge.key, (window = { count: 0, endsAt: now + charge.windowMs }))
    window.count++
    const rate = { max: charge.max, current: window.count, ttlMs: window.endsAt - now }
    if (rate.current > rate.max) throw new RateLimitedError(rate)
    return rate
  }

  /** Drops a few budgets whose window has ended, so memory follows the keys in use. */
  #forgetSpentBudgets(now: number): void {
    for (let i = 0; i < SWEEP_PER_ACCESS; i++) {
      const next = this.#budgetSweep.next()
      if (next.done) {
        this.#budgetSweep = this.#budgets.entries()
        return
      }
      if (next.value[1].endsAt <= now) this.#budgets.delete(next.value[0])
    }
  }

  /** The ignoring-pause flag an llm_call raised, against the pause that held its agent. */
  #ignoredPause(e: RecordInput, ignored: Ignored, agent: AgentEntry, fleet: AgentEntry, now: number): IgnoredPause {
    return {
      userId: e.userId,
      agentId: e.agentId,
      at: now,
      pausedSince: ignored.since,
      calls: ignored.calls,
      costNano: ignored.nano,
      version: nextVersion(now),
      webhookUrl: agent.policy.webhookUrl ?? fleet.policy.webhookUrl,
    }
  }

  /** An agent's total against its daily budget, and when it reaches it (projection.ts). */
  #budget(agent: AgentEntry, now: number): { totalNano: Nano; thresholdNano: Nano; exhaustionAt: number | null } {
    const { window } = agent
    const threshold = agentBudget(agent.policy)
    return { totalNano: window.totalNano, thresholdNano: threshold, exhaustionAt: this.#exhaustion(agent, now) }
  }

  /** When a state's total reaches its daily budget at the last hour's rate (projection.ts); null without one. */
  #exhaustion(entry: AgentEntry, now: number): number | null {
    const { window, policy } = entry
    if (policy.thresholdNano === null) return null
    return exhaustionAt({ totalNano: window.totalNano, lastHourNano: window.spentSince(minuteOf(now) - 59), hours: window.hours }, policy.thresholdNano, now)
  }

  async listAgents(userId: string, now: number): Promise<ListedAgent[]> {
    // One synchronous pass over the user's agents and at most one append: GET /agents reads
    // every agent of a user (10,000 in bench/), so nothing is allocated per agent but its entry.
    const nowMinute = minuteOf(now)
    this.#expireHolds(userId, now)
    const listed: ListedAgent[] = []
    const transitions: Transition[] = []
    for (const [agentId, agent] of this.#byUser.get(userId) ?? []) {
      agent.window.expire(nowMinute)
      if (agent.window.empty) continue
      const transition = this.#relax({ userId, agentId }, agent, now)
      if (transition) transitions.push(transition)
      listed.push({ agentId, snapshot: snapshotOf(agent, now) })
    }
    if (transitions.length > 0) await this.#journal.append(transitions.map(asRow), now)
    return listed
  }

  async get(ref: AgentRef, now: number): Promise<{ snapshot: AgentSnapshot; transition: Transition | null; exhaustionAt: number | null }> {
    const agent = this.#agents.get(agentKey(ref))
    if (!agent) {
      return {
        snapshot: { active: false, lastEventMinute: null, totalNano: 0, llmCalls: 0, pause: RUNNING, policy: defaultPolicy(ref), configured: false, ignored: NOT_IGNORED, heldNano: 0, periods: NO_PERIODS },
        transition: null,
        exhaustionAt: null,
      }
    }
    this.#expireHolds(ref.userId, now)
    this.#moveOn(ref, now)
    const transition = this.#relax(ref, agent, now)
    const exhaustionAt = this.#exhaustion(agent, now)
    // Reads append past the bound: a relaxing transition is rare, and a read never fails for it.
    if (transition) await this.#journal.append([asRow(transition)], now)
    return { snapshot: snapshotOf(agent, now), transition, exhaustionAt }
  }

  async setPolicy(ref: AgentRef, policy: AgentPolicy, now: number, actor: string, history: PeriodHistory = NO_HISTORY): Promise<Transition | null> {
    this.#journal.mustHaveRoom()
    const agent = this.#moveOn(ref, now)
    const row = configRow(ref, policy, now, actor, agent.configured ? shownConfig(agent.policy) : '')
    const next = { ...policy }
    const meters = resolveMeters(agent.meters, now)
    const s = judge(agent, meters)
    const change = changePolicy(s, agent.meters, metersOf(next))
    agent.policy = next
    agent.meters = metersOf(next)
    keepRuns(agent)
    startPeriods(agent, now, history)
    agent.alerted = s.alerted
    agent.pause = s.pause
    agent.configured = true
    const transition = change ? transitionOf(ref, agent, change, s, meters, agent.window.totalNano, now, actor) : null
    await this.#journal.append([{ table: 'agent_configs', row }, ...(transition ? [asRow(transition)] : [])], now)
    return transition
  }

  async setPaused(ref: AgentRef, paused: boolean, now: number, actor: string): Promise<Transition | null> {
    this.#journal.mustHaveRoom()
    this.#expireHolds(ref.userId, now)
    const agent = this.#moveOn(ref, now)
    const meters = resolveMeters(agent.meters, now)
    const s = judge(agent, meters)
    const change = manual(s, meters, paused, now)
    if (!change) {
      // Already so: answer once what made it so is on disk.
      await this.#journal.synced()
      return null
    }
    agent.pause = s.pause
    const transition = transitionOf(ref, agent, change, s, meters, agent.window.totalNano, now, actor)
    await this.#journal.append([asRow(transition)], now)
    return transition
  }

  /**
   * Starts replacing the whole state with a rebuild (ingest/rebuild.ts): the state is
   * cleared now, filled through the returned Restore, and acted on by its finish(). Events
   * are fed without ever holding them all: ten million of them as objects once took the
   * process past its heap.
   */
  beginRestore(now: number): Restore {
    this.#agents.clear()
    this.#byUser.clear()
    this.#seen.clear()
    // Holds are hot state only: a rebuild starts without any (losing them loses only reservations).
    this.#holds.clear()
    const nowMinute = minuteOf(now)
    const histories = new Map<string, PeriodHistory>()
    // Runs found, by agentKey then run id: kept in finish() by the agents whose policy has a run budget.
    const runs = new Map<string, Map<string, RunEntry>>()
    const runOf = (ref: AgentRef, runId: string, at: number): RunEntry => {
      const key = agentKey(ref)
      let ofAgent = runs.get(key)
      if (!ofAgent) runs.set(key, (ofAgent = new Map()))
      let run = ofAgent.get(runId)
      if (!run) ofAgent.set(runId, (run = { spent: 0, held: 0, stopped: false, lastAt: at }))
      run.lastAt = Math.max(run.lastAt, at)
      return run
    }
    // An event counts in its agent's window and in its fleet's.
    const count = (agent: AgentEntry, fleet: AgentEntry, fp: Fingerprint, costNano: Nano, minute: number, llmCalls: number) => {
      this.#seen.add(fp, costNano, minute)
      agent.window.add(minute, costNano, llmCalls)
      fleet.window.add(minute, costNano, llmCalls)
    }
    return {
      agent: (ref) => {
        const agent = this.#entry(ref)
        const fleet = this.#entry(fleetOf(ref.userId))
        // The run holds all of the agent's stored events, and an id is one agent's: a repeat
        // (a retry whose first INSERT failed ambiguously) can only be in this run, found
        // here with one probe instead of one per hour of the whole set.
        const run = new FingerprintTable()
        return (fp, costNano, minute, llmCalls) => {
          if (!inWindow(minute, nowMinute) || run.find(fp) >= 0) return
          run.add(fp, costNano, 0)
          count(agent, fleet, fp, costNano, minute, llmCalls)
        }
      },
      event: (ref, fp, costNano, minute, llmCalls, runId) => {
        if (!inWindow(minute, nowMinute) || this.#seen.get(fp, nowMinute) !== undefined) return
        count(this.#entry(ref), this.#entry(fleetOf(ref.userId)), fp, costNano, minute, llmCalls)
        if (runId !== undefined) runOf(ref, runId, minute * MINUTE_MS).spent += costNano
      },
      run: (ref, runId, spentNano, lastAt, stopped) => {
        const run = runOf(ref, runId, lastAt)
        run.spent += spentNano
        run.stopped ||= stopped
      },
      runStop: (ref, runId) => {
        // Its events, journaled with it, say when the run was last counted.
        runOf(ref, runId, 0).stopped = true
      },
      policy: (ref, policy) => {
        const agent = this.#entry(ref)
        agent.policy = { ...policy }
        agent.meters = metersOf(agent.policy)
        agent.configured = true
        keepRuns(agent)
      },
      pause: (ref, pause) => {
        this.#entry(ref).pause = { ...pause }
      },
      ignored: (ref, ignored) => {
        this.#entry(ref).ignored = { ...ignored }
      },
      history: (ref, history) => {
        histories.set(agentKey(ref), history)
      },
      finish: async () => {
        // A crossing stored just before a crash was never acted on, and is now (journaled).
        // The alert levels the spend is at count as fired: they were, with the events that
        // crossed them (the same journal append), or their level came with a config since.
        const transitions: Transition[] = []
        for (const [key, agent] of this.#agents) {
          startPeriods(agent, now, histories.get(key) ?? NO_HISTORY)
          // Oldest first, as #runOf keeps them; those idle past the idle time are not kept.
          const found = [...(runs.get(key) ?? [])].filter(([, r]) => r.lastAt > now - this.#runIdleMs).sort(([, a], [, b]) => a.lastAt - b.lastAt)
          if (agent.runs) for (const [id, r] of found) agent.runs.set(id, r)
          const meters = resolveMeters(agent.meters, now)
          const s = judge(agent, meters)
          agent.alerted = {}
          meters.forEach((m, i) => {
            if (m.alertAt.length > 0) agent.alerted[m.id] = levelsReached(m, s.spent[i]!)
          })
          const change = relax(s, meters) ?? cross(s, meters, now)
          agent.pause = s.pause
          if (change) transitions.push(transitionOf(refOf(key), agent, change, s, meters, agent.window.totalNano, now))
        }
        if (transitions.length > 0) await this.#journal.append(transitions.map(asRow), now)
        return transitions
      },
    }
  }

  /** How long a run kept for its agent's run budget may go without an event before it is forgotten. */
  get runIdleMs(): number {
    return this.#runIdleMs
  }

  /** How many agents are held, fleets not counted (for tests and metrics; a walk over the users). */
  get size(): number {
    let agents = 0
    for (const ofUser of this.#byUser.values()) agents += ofUser.size
    return agents
  }

  async ping(): Promise<void> {}

  async erase(userId: string, o: { agentIds: readonly string[]; budgets: readonly string[] }): Promise<number> {
    let dropped = 0
    const agents = new Set([...o.agentIds, ...(this.#byUser.get(userId)?.keys() ?? []), FLEET])
    for (const agentId of agents) if (this.#agents.delete(agentKey({ userId, agentId }))) dropped++
    this.#byUser.delete(userId)
    if (this.#holds.delete(userId)) dropped++
    for (const budget of o.budgets) if (this.#budgets.delete(budget)) dropped++
    return dropped
  }

  async close(): Promise<void> {}

  #entry(ref: AgentRef): AgentEntry {
    const key = agentKey(ref)
    let agent = this.#agents.get(key)
    if (!agent) {
      const policy = defaultPolicy(ref)
      agent = { window: new RollingWindow(), pause: RUNNING, policy, meters: metersOf(policy), configured: false, alerted: {}, ignored: NOT_IGNORED, held: 0, periods: null, runs: null }
      this.#agents.set(key, agent)
      // A fleet is kept with the agents (types.ts FLEET), but is not one of them.
      if (isFleet(ref)) return agent
      let agents = this.#byUser.get(ref.userId)
      if (!agents) this.#byUser.set(ref.userId, (agents = new Map()))
      agents.set(ref.agentId, agent)
    }
    return agent
  }

  /** The entry of a state, its window moved on to `now`. */
  #moveOn(ref: AgentRef, now: number): AgentEntry {
    const entry = this.#entry(ref)
    entry.window.expire(minuteOf(now))
    return entry
  }

  /** The relaxing rules on a state (a read), and the transition they journal. */
  #relax(ref: AgentRef, agent: AgentEntry, now: number): Transition | null {
    const meters = resolveMeters(agent.meters, now)
    const s = judge(agent, meters)
    const change = relax(s, meters)
    if (!change) return null
    agent.pause = s.pause
    return transitionOf(ref, agent, change, s, meters, agent.window.totalNano, now)
  }

  /**
   * Drops agents that hold nothing worth keeping (an empty window, running, no override, no
   * config), visiting at most `budget` entries per call, so memory follows the agents active
   * in the last 24 h without a scan on the hot path.
   */
  #forgetIdle(nowMinute: number, budget: number): void {
    for (let i = 0; i < budget; i++) {
      const next = this.#sweep.next()
      if (next.done) {
        this.#sweep = this.#agents.entries()
        return
      }
      const [key, agent] = next.value
      agent.window.expire(nowMinute)
      if (agent.window.empty && !agent.configured && !agent.pause.paused && !agent.pause.override && agent.held === 0) {
        this.#agents.delete(key)
        const { userId, agentId } = refOf(key)
        const agents = this.#byUser.get(userId)
        agents?.delete(agentId)
        if (agents?.size === 0) this.#byUser.delete(userId)
      }
    }
  }
}

// Agents looked at per event: every agent is visited within (agents / 2) events. Eight a
// time took 2 % of burnrate's CPU under the bench's load (bench/, --cpu-prof).
const SWEEP_PER_ACCESS = 2

/**
 * An agent keeps its runs while its policy has a run budget, from when it was set: a run
 * open then counts what it costs from then on (a rebuild takes the whole of its stored cost).
 */
function keepRuns(agent: AgentEntry): void {
  agent.runs = agent.policy.runBudgetNano === null ? null : (agent.runs ?? new Map())
}

/** A state as the rules judge it at the moment its meters were resolved for (its window moved on to it). */
function judge(entry: AgentEntry, meters: readonly ResolvedMeter[]): Judged {
  const spent = new Array<Nano>(meters.length)
  for (let i = 0; i < meters.length; i++) spent[i] = spentOf(entry, meters[i]!)
  return { pause: entry.pause, spent, held: entry.held, alerted: entry.alerted }
}

/** What a meter's window or period holds. */
function spentOf(entry: AgentEntry, m: ResolvedMeter): Nano {
  return m.period ? (entry.periods ??= new PeriodTallies()).spent(m, entry.window) : entry.window.spentSince(m.from)
}

/**
 * Starts counting the periods of a state's policy that it does not count yet, from the
 * stored spend `history` and its window (period-tallies.ts); a policy without any drops them.
 */
function startPeriods(entry: AgentEntry, now: number, history: PeriodHistory): void {
  const meters = resolveMeters(entry.meters, now)
  if (!meters.some((m) => m.period)) {
    entry.periods = null
    return
  }
  ;(entry.periods ??= new PeriodTallies()).begin(meters, entry.window, history)
}

/** What each period of a state's period budgets holds at `now`, and when its limit is reached at the last hour's rate. */
function periodsOf(entry: AgentEntry, now: number): readonly PeriodSpend[] {
  if (entry.periods === null) return NO_PERIODS
  const lastHourNano = entry.window.spentSince(minuteOf(now) - 59)
  const out: PeriodSpend[] = []
  for (const m of resolveMeters(entry.meters, now)) {
    if (!m.period) continue
    const spentNano = spentOf(entry, m)
    out.push({ meter: m, spentNano, exhaustionAt: periodExhaustionAt(m, spentNano, lastHourNano, now) })
  }
  return out
}

/** The stop of run `runId` an event caused, as journaled and announced. */
function runStopOf(ref: AgentRef, runId: string, run: BudgetedRun, agent: AgentEntry, now: number): RunStop {
  return {
    userId: ref.userId,
    agentId: ref.agentId,
    runId,
    at: now,
    version: nextVersion(now),
    spentNano: run.s.spent,
    heldNano: run.s.held,
    budgetNano: run.budgetNano,
    webhookUrl: agent.policy.webhookUrl,
  }
}

function asRow(t: Transition): JournalRow {
  return { table: 'pause_transitions', row: transitionRow(t) }
}

function alertAsRow(a: BudgetAlert): JournalRow {
  return { table: 'budget_alerts', row: alertRow(a) }
}

function snapshotOf(agent: AgentEntry, now: number): AgentSnapshot {
  // The pause state and policy are replaced on every change, never changed in place: a
  // snapshot shares them (GET /agents reads 10,000 agents; copies were half its garbage).
  return {
    active: !agent.window.empty,
    lastEventMinute: agent.window.lastMinute,
    totalNano: agent.window.totalNano,
    llmCalls: agent.window.llmCalls,
    pause: agent.pause,
    policy: agent.policy,
    configured: agent.configured,
    ignored: agent.ignored,
    heldNano: agent.held,
    periods: periodsOf(agent, now),
  }
}

/** A change the rules made, as the transition journaled and announced; `totalNano`: the window's total at that point. */
function transitionOf(ref: AgentRef, entry: AgentEntry, change: Change, s: Judged, meters: readonly ResolvedMeter[], totalNano: Nano, now: number, actor = SYSTEM_ACTOR): Transition {
  // The meter of a pause it made, or of a pause ending by itself.
  const m = change.meter >= 0 && (change.reason === meters[change.meter]!.id || change.reason === 'auto_resume') ? meters[change.meter]! : undefined
  return {
    userId: ref.userId,
    agentId: ref.agentId,
    at: now,
    version: nextVersion(now),
    actor,
    paused: change.pause.paused,
    reason: change.reason,
    override: change.pause.override,
    totalNano,
    thresholdNano: budgetMeter(entry.policy)?.limitNano ?? null,
    webhookUrl: entry.policy.webhookUrl,
    ...(m ? { meter: { id: m.id, spentNano: s.spent[change.meter]!, limitNano: m.limitNano, windowMinutes: m.windowMinutes } } : {}),
    ...(s.held !== 0 ? { heldNano: s.held } : {}),
  }
}
