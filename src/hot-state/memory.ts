import type { Nano } from '../money.ts'
import { JournalFullError, type JournalRow, type JournalStatus } from '../journal/types.ts'
import { alertRow } from '../storage/alerts.ts'
import { configRow, shownConfig } from '../storage/configs.ts'
import { ignoredRow } from '../storage/ignored.ts'
import { transitionRow } from '../storage/transitions.ts'
import { nextVersion } from '../storage/version.ts'
import { minuteOf, inWindow } from '../window.ts'
import { alertsReached, carryAlerts, countIgnored, evaluate, evaluateAlerts, holdRefusal, holdRoom, holdingPause, manual, pausedBy, type HoldBudget } from './policy.ts'
import { HoldBook, holdOfAnotherAgent, type OpenHold } from './holds.ts'
import { exhaustionAt } from './projection.ts'
import { EventIdSet, FingerprintTable, fingerprint, type Fingerprint } from './dedup.ts'
import { RollingWindow } from './window.ts'
import {
  DEFAULT_IGNORE_GRACE_MS,
  NOT_IGNORED,
  RUNNING,
  SYSTEM_ACTOR,
  defaultPolicy,
  fleetOf,
  isFleet,
  type AgentPolicy,
  type AgentRef,
  type AgentSnapshot,
  type BudgetAlert,
  type HoldRequest,
  type HoldResult,
  type HotState,
  type Ignored,
  type IgnoredPause,
  type ListedAgent,
  type PauseState,
  type RecordEvent,
  type RecordInput,
  type RecordResult,
  type ReleasedHold,
  type Restore,
  type Transition,
  type TransitionReason,
} from './types.ts'

interface AgentEntry {
  window: RollingWindow
  pause: PauseState
  policy: AgentPolicy
  configured: boolean
  /** The alert levels fired and not re-armed, a bit per level of policy.alertAt (policy.ts evaluateAlerts). */
  alerted: number
  /** llm_calls after its pause and grace (policy.ts countIgnored); replaced, never changed. */
  ignored: Ignored
  /** The sum of its open budget holds (issue 13), which #holds keeps. */
  held: Nano
}

/** The embedded journal as the in-process hot state writes to it (journal/segment-log.ts). */
export interface LocalJournal extends JournalStatus {
  /** Synchronous up to the promise it returns, which resolves once the rows are durable. */
  append(rows: readonly JournalRow[], now: number): Promise<void>
  /** Resolves once every row appended so far is durable. */
  synced(): Promise<void>
}

/**
 * The hot state in process memory, for the embedded single-instance deployment, with its
 * journal (issue 8). Every change and its journal append run in one synchronous block, so
 * no other request sees one without the other: that block is the atomic step, and the
 * caller is answered once the journal has written it (group commit). It keeps nothing
 * another instance could need: with several instances, use the Redis one.
 */
export class MemoryHotState implements HotState {
  readonly #journal: LocalJournal
  readonly #agents = new Map<string, AgentEntry>()
  // user → their agents held in #agents, by id (listings without a scan of every agent).
  readonly #byUser = new Map<string, Map<string, AgentEntry>>()
  // The window's event ids and their costs, at most 64 bytes each (dedup.ts).
  readonly #seen = new EventIdSet()
  // user → their open budget holds (issue 13); a user without any has no book.
  readonly #holds = new Map<string, HoldBook>()
  // Round-robin cursor over the agents, to forget idle ones a few at a time.
  #sweep: Iterator<[string, AgentEntry]> = this.#agents.entries()

  readonly #graceMs: number

  /** `graceMs`: how long after a pause an llm_call may still arrive unflagged (issue 13). */
  constructor(journal: LocalJournal, o: { graceMs?: number } = {}) {
    this.#journal = journal
    this.#graceMs = o.graceMs ?? DEFAULT_IGNORE_GRACE_MS
  }

  async record(e: RecordEvent, now: number): Promise<RecordResult> {
    // The bound is checked before anything changes: a refused event leaves no trace.
    this.#mustHaveRoom()
    const step = this.#count(e, now)
    if (!step.counted) {
      // The first of these may still be on its way to the disk: answer once it is there.
      await this.#journal.synced()
      return step
    }
    await this.#journal.append(
      [
        { table: 'events', row: e.row },
        ...step.transitions.map(asRow),
        ...step.alerts.map(alertAsRow),
        ...(step.ignored ? [{ table: 'ignored_pauses', row: ignoredRow(step.ignored) } as const] : []),
      ],
      now,
    )
    return step
  }

  #count(e: RecordInput, now: number): RecordResult {
    const nowMinute = minuteOf(now)
    this.#seen.expire(nowMinute)
    this.#forgetIdle(nowMinute, SWEEP_PER_ACCESS)
    const fleetRef = fleetOf(e.userId)
    const agent = this.#entry(e)
    const fleet = this.#entry(fleetRef)
    agent.window.expire(nowMinute)
    fleet.window.expire(nowMinute)
    this.#expireHolds(e.userId, now)
    const fp = fingerprint(e.userId, e.agentId, e.eventId)
    const seenCost = this.#seen.get(fp, nowMinute)
    if (seenCost !== undefined) {
      return { counted: false, costNano: seenCost, ...this.#budget(agent, now), ...pausedBy(agent.pause, fleet.pause), transitions: [], alerts: [], ignored: null }
    }
    // The hold this call settles is released before its real cost is counted; a retry was a
    // repeat above, and an unknown or expired hold releases nothing.
    if (e.holdId !== undefined) this.#settle(e, e.holdId)
    const minute = minuteOf(e.at)
    this.#seen.add(fp, e.costNano, minute)
    // Against the pause its client was told of before this event: the agent's own, else its fleet's.
    const ignored = e.llmCall ? this.#ignore(e, agent, holdingPause(agent.pause, fleet.pause)?.pause.since ?? 0, now, fleet) : null
    const transitions: Transition[] = []
    const alerts: BudgetAlert[] = []
    // The same step for the agent and for its fleet, whose window sums all of the user's agents.
    this.#add(e, agent, e, minute, now, transitions, alerts)
    this.#add(fleetRef, fleet, e, minute, now, transitions, alerts)
    return { counted: true, costNano: e.costNano, ...this.#budget(agent, now), ...pausedBy(agent.pause, fleet.pause), transitions, alerts, ignored }
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

  /** A hold no longer counts against its agent's budget nor its fleet's. */
  #unhold(userId: string, hold: OpenHold): void {
    this.#entry({ userId, agentId: hold.agentId }).held -= hold.costNano
    this.#entry(fleetOf(userId)).held -= hold.costNano
  }

  async hold(ref: AgentRef, request: HoldRequest, now: number): Promise<HoldResult> {
    const nowMinute = minuteOf(now)
    this.#expireHolds(ref.userId, now)
    let book = this.#holds.get(ref.userId)
    const open = book?.get(request.holdId)
    if (open && open.agentId !== ref.agentId) throw holdOfAnotherAgent(request.holdId)
    const fleetRef = fleetOf(ref.userId)
    const agent = this.#entry(ref)
    const fleet = this.#entry(fleetRef)
    agent.window.expire(nowMinute)
    fleet.window.expire(nowMinute)
    // What the expiry relaxed comes first: an auto-resumed agent may hold again.
    const transitions = [this.#evaluate(ref, agent, now, false), this.#evaluate(fleetRef, fleet, now, false)].filter((t) => t !== null)
    // A retry of a hold still open is that hold, granted again and held once.
    const refusal = open ? null : holdRefusal(holdBudget(agent), holdBudget(fleet), request.costNano)
    if (refusal === null && !open) {
      if (!book) this.#holds.set(ref.userId, (book = new HoldBook()))
      book.add({ id: request.holdId, agentId: ref.agentId, costNano: request.costNano, expiresAt: request.expiresAt })
      agent.held += request.costNano
      fleet.held += request.costNano
    }
    const answer = { refusal, ...pausedBy(agent.pause, fleet.pause), remainingNano: holdRoom(holdBudget(agent), holdBudget(fleet)), transitions }
    // Reads append past the bound, and so does a hold: it stores nothing but the rare relaxing transition.
    if (transitions.length > 0) await this.#journal.append(transitions.map(asRow), now)
    return answer
  }

  async release(userId: string, holdId: string, now: number): Promise<ReleasedHold | null> {
    this.#expireHolds(userId, now)
    const hold = this.#holds.get(userId)?.take(holdId)
    if (!hold) return null
    this.#unhold(userId, hold)
    return { agentId: hold.agentId, costNano: hold.costNano }
  }

  /** Counts an llm_call against the pause that holds (policy.ts countIgnored); the flag when it raises it. */
  #ignore(e: RecordInput, agent: AgentEntry, since: number, now: number, fleet: AgentEntry): IgnoredPause | null {
    const { ignored, raised } = countIgnored(agent.ignored, since, now, e.costNano, this.#graceMs)
    agent.ignored = ignored
    if (!raised) return null
    return {
      userId: e.userId,
      agentId: e.agentId,
      at: now,
      pausedSince: since,
      calls: ignored.calls,
      costNano: ignored.nano,
      version: nextVersion(now),
      webhookUrl: agent.policy.webhookUrl ?? fleet.policy.webhookUrl,
    }
  }

  /** Adds an event to an agent's or a fleet's window and applies the rules: what changed goes to `transitions` and `alerts`. */
  #add(ref: AgentRef, agent: AgentEntry, e: RecordInput, minute: number, now: number, transitions: Transition[], alerts: BudgetAlert[]): void {
    // What the expiry relaxed comes first (an override ends when the total fell back under
    // the threshold, even if this event takes it over again), then this event.
    const relaxed = this.#evaluate(ref, agent, now, false)
    if (relaxed) transitions.push(relaxed)
    // Levels the expiry took the total below re-arm first, so this event can fire them again.
    agent.alerted = evaluateAlerts(agent.alerted, agent.window.totalNano, agent.policy, false).alerted
    agent.window.add(minute, e.costNano, e.llmCall ? 1 : 0)
    const crossed = this.#evaluate(ref, agent, now, true)
    if (crossed) transitions.push(crossed)
    const { alerted, fired } = evaluateAlerts(agent.alerted, agent.window.totalNano, agent.policy, true)
    agent.alerted = alerted
    if (fired.length === 0) return
    const budget = this.#budget(agent, now)
    for (const level of fired) {
      alerts.push({ userId: ref.userId, agentId: ref.agentId, at: now, version: nextVersion(now), level, ...budget, webhookUrl: agent.policy.webhookUrl })
    }
  }

  /** The total against the threshold, and when it reaches it (projection.ts). */
  #budget(agent: AgentEntry, now: number): { totalNano: Nano; thresholdNano: Nano; exhaustionAt: number | null } {
    const { window, policy } = agent
    const spend = { totalNano: window.totalNano, lastHourNano: window.lastHourNano(minuteOf(now)), hours: window.hours }
    return { totalNano: window.totalNano, thresholdNano: policy.thresholdNano, exhaustionAt: exhaustionAt(spend, policy.thresholdNano, now) }
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
      const transition = this.#evaluate({ userId, agentId }, agent, now, false)
      if (transition) transitions.push(transition)
      listed.push({ agentId, snapshot: snapshotOf(agent) })
    }
    if (transitions.length > 0) await this.#journal.append(transitions.map(asRow), now)
    return listed
  }

  async get(ref: AgentRef, now: number): Promise<{ snapshot: AgentSnapshot; transition: Transition | null; exhaustionAt: number | null }> {
    const agent = this.#agents.get(agentKey(ref))
    if (!agent) {
      return {
        snapshot: { active: false, totalNano: 0, llmCalls: 0, pause: RUNNING, policy: defaultPolicy(ref), configured: false, ignored: NOT_IGNORED, heldNano: 0 },
        transition: null,
        exhaustionAt: null,
      }
    }
    agent.window.expire(minuteOf(now))
    this.#expireHolds(ref.userId, now)
    const transition = this.#evaluate(ref, agent, now, false)
    const { exhaustionAt } = this.#budget(agent, now)
    // Reads append past the bound: a relaxing transition is rare, and a read never fails for it.
    if (transition) await this.#journal.append([asRow(transition)], now)
    return { snapshot: snapshotOf(agent), transition, exhaustionAt }
  }

  async setPolicy(ref: AgentRef, policy: AgentPolicy, now: number, actor: string): Promise<Transition | null> {
    this.#mustHaveRoom()
    const agent = this.#entry(ref)
    const row = configRow(ref, policy, now, actor, agent.configured ? shownConfig(agent.policy) : '')
    const thresholdChanged = agent.policy.thresholdNano !== policy.thresholdNano
    agent.alerted = carryAlerts(agent.alerted, agent.policy.alertAt, policy.alertAt)
    agent.policy = { ...policy }
    agent.configured = true
    let transition: Transition | null = null
    if (thresholdChanged && agent.pause.override) {
      agent.pause = { ...agent.pause, override: false }
      transition = transitionOf(ref, agent, now, 'threshold_changed', actor)
    }
    await this.#journal.append([{ table: 'agent_configs', row }, ...(transition ? [asRow(transition)] : [])], now)
    return transition
  }

  async setPaused(ref: AgentRef, paused: boolean, now: number, actor: string): Promise<Transition | null> {
    this.#mustHaveRoom()
    const agent = this.#entry(ref)
    agent.window.expire(minuteOf(now))
    this.#expireHolds(ref.userId, now)
    const next = manual(agent.pause, paused, committedNano(agent), spentNano(agent, now), agent.policy, now)
    if (!next) {
      // Already so: answer once what made it so is on disk.
      await this.#journal.synced()
      return null
    }
    agent.pause = next
    const transition = transitionOf(ref, agent, now, 'manual', actor)
    await this.#journal.append([asRow(transition)], now)
    return transition
  }

  /**
   * Starts replacing the whole state with a rebuild (ingest/rebuild.ts): the state is
   * cleared now, filled through the returned Restore, and acted on by its finish(). Events
   * are fed without ever holding them all: ten million of them once took the process past
   * its heap as objects (issue 11).
   */
  beginRestore(now: number): Restore {
    this.#agents.clear()
    this.#byUser.clear()
    this.#seen.clear()
    // Holds are hot state only: a rebuild starts without any (losing them loses only reservations).
    this.#holds.clear()
    const nowMinute = minuteOf(now)
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
      event: (ref, fp, costNano, minute, llmCalls) => {
        if (!inWindow(minute, nowMinute) || this.#seen.get(fp, nowMinute) !== undefined) return
        count(this.#entry(ref), this.#entry(fleetOf(ref.userId)), fp, costNano, minute, llmCalls)
      },
      policy: (ref, policy) => {
        const agent = this.#entry(ref)
        agent.policy = { ...policy }
        agent.configured = true
      },
      pause: (ref, pause) => {
        this.#entry(ref).pause = { ...pause }
      },
      ignored: (ref, ignored) => {
        this.#entry(ref).ignored = { ...ignored }
      },
      finish: async () => {
        // A crossing stored just before a crash was never acted on, and is now (journaled).
        // The alert levels the totals are at count as fired: they were, with the events that
        // crossed them (the same journal append), or their level came with a config since.
        const transitions: Transition[] = []
        for (const [key, agent] of this.#agents) {
          agent.alerted = alertsReached(agent.window.totalNano, agent.policy)
          const t = this.#evaluate(refOf(key), agent, now, true)
          if (t) transitions.push(t)
        }
        if (transitions.length > 0) await this.#journal.append(transitions.map(asRow), now)
        return transitions
      },
    }
  }

  /** How many agents are held, fleets not counted (for tests and metrics; a walk over the users). */
  get size(): number {
    let agents = 0
    for (const ofUser of this.#byUser.values()) agents += ofUser.size
    return agents
  }

  async ping(): Promise<void> {}

  #mustHaveRoom(): void {
    if (this.#journal.backlogFull) throw new JournalFullError(this.#journal.backlog())
  }

  async close(): Promise<void> {}

  #entry(ref: AgentRef): AgentEntry {
    const key = agentKey(ref)
    let agent = this.#agents.get(key)
    if (!agent) {
      agent = { window: new RollingWindow(), pause: RUNNING, policy: defaultPolicy(ref), configured: false, alerted: 0, ignored: NOT_IGNORED, held: 0 }
      this.#agents.set(key, agent)
      // A fleet is kept with the agents (types.ts FLEET), but is not one of them.
      if (isFleet(ref)) return agent
      let agents = this.#byUser.get(ref.userId)
      if (!agents) this.#byUser.set(ref.userId, (agents = new Map()))
      agents.set(ref.agentId, agent)
    }
    return agent
  }

  #evaluate(ref: AgentRef, agent: AgentEntry, now: number, mayPause: boolean): Transition | null {
    const spent = spentNano(agent, now)
    const next = evaluate(agent.pause, committedNano(agent), spent, agent.policy, mayPause, now)
    if (!next) return null
    agent.pause = next.state
    const transition = transitionOf(ref, agent, now, next.reason)
    const limit = agent.policy.velocityLimitNano
    if (next.reason === 'velocity' && limit !== null) transition.velocity = { spentNano: spent, limitNano: limit, windowMinutes: agent.policy.velocityWindowMinutes }
    return transition
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

function agentKey(ref: AgentRef): string {
  return `${ref.userId}\0${ref.agentId}`
}

function refOf(key: string): AgentRef {
  const i = key.indexOf('\0')
  return { userId: key.slice(0, i), agentId: key.slice(i + 1) }
}


function asRow(t: Transition): JournalRow {
  return { table: 'pause_transitions', row: transitionRow(t) }
}

function alertAsRow(a: BudgetAlert): JournalRow {
  return { table: 'budget_alerts', row: alertRow(a) }
}

function snapshotOf(agent: AgentEntry): AgentSnapshot {
  // The pause state and policy are replaced on every change, never changed in place: a
  // snapshot shares them (GET /agents reads 10,000 agents; copies were half its garbage).
  return {
    active: !agent.window.empty,
    totalNano: agent.window.totalNano,
    llmCalls: agent.window.llmCalls,
    pause: agent.pause,
    policy: agent.policy,
    configured: agent.configured,
    ignored: agent.ignored,
    heldNano: agent.held,
  }
}

/** What the budget rules count: the spend of the window and the open holds (issue 13). */
function committedNano(agent: AgentEntry): Nano {
  return agent.window.totalNano + agent.held
}

function holdBudget(agent: AgentEntry): HoldBudget {
  return { pause: agent.pause, totalNano: agent.window.totalNano, heldNano: agent.held, thresholdNano: agent.policy.thresholdNano }
}

/** The spend in the agent's velocity window (issue 13: at most 60 buckets read); 0 without a limit. */
function spentNano(agent: AgentEntry, now: number): Nano {
  const { velocityLimitNano, velocityWindowMinutes } = agent.policy
  return velocityLimitNano === null ? 0 : agent.window.spentInLast(velocityWindowMinutes, minuteOf(now))
}

function transitionOf(ref: AgentRef, agent: AgentEntry, now: number, reason: TransitionReason, actor = SYSTEM_ACTOR): Transition {
  return {
    userId: ref.userId,
    agentId: ref.agentId,
    at: now,
    version: nextVersion(now),
    actor,
    paused: agent.pause.paused,
    reason,
    override: agent.pause.override,
    totalNano: agent.window.totalNano,
    thresholdNano: agent.policy.thresholdNano,
    webhookUrl: agent.policy.webhookUrl,
    ...(agent.held !== 0 ? { heldNano: agent.held } : {}),
  }
}
