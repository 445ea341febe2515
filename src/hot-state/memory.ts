import { nextVersion } from '../storage/version.ts'
import { minuteOf, inWindow } from '../window.ts'
import { evaluate, manual } from './policy.ts'
import { EventIdSet, fingerprint } from './dedup.ts'
import { RollingWindow } from './window.ts'
import {
  DEFAULT_POLICY,
  RUNNING,
  type AgentPolicy,
  type AgentRef,
  type AgentSnapshot,
  type Claim,
  type EventRef,
  type HotState,
  type PauseState,
  type RecordInput,
  type RecordResult,
  type Reservation,
  type RestoreData,
  type Transition,
  type TransitionReason,
} from './types.ts'

interface AgentEntry {
  window: RollingWindow
  pause: PauseState
  policy: AgentPolicy
  configured: boolean
}

/**
 * The hot state in process memory, for the embedded single-instance deployment. It keeps
 * nothing another instance could need: with several instances, use the Redis one.
 */
export class MemoryHotState implements HotState {
  readonly #agents = new Map<string, AgentEntry>()
  // user → the ids of their agents held in #agents (listings without a scan of every agent).
  readonly #byUser = new Map<string, Set<string>>()
  // user\0agent\0event_id → cost, and a FIFO of the same keys by minute for amortised expiry.
  // The window's event ids and their costs, at most 64 bytes each (dedup.ts).
  readonly #seen = new EventIdSet()
  // Round-robin cursor over the agents, to forget idle ones a few at a time.
  #sweep: Iterator<[string, AgentEntry]> = this.#agents.entries()

  async reserve(events: readonly EventRef[], _token: string, now: number): Promise<Reservation[]> {
    const nowMinute = minuteOf(now)
    this.#seen.expire(nowMinute)
    return events.map((e) => {
      const hit = this.#seen.get(fingerprint(e.userId, e.agentId, e.eventId), nowMinute)
      return hit !== undefined ? { state: 'done', costNano: hit } : { state: 'reserved' }
    })
  }

  // One process: a claim dies with the process that made it.
  async staleClaims(): Promise<Claim[]> {
    return []
  }

  async dropClaim(): Promise<void> {}

  async record(events: readonly RecordInput[], now: number): Promise<RecordResult[]> {
    return events.map((e) => this.recordNow(e, now))
  }

  /**
   * record() for one event, synchronously: a caller that appends the result to its journal
   * in the same synchronous block makes dedup, count, evaluate, flip and append one atomic
   * step (no other request runs in between).
   */
  recordNow(e: RecordInput, now: number): RecordResult {
    const nowMinute = minuteOf(now)
    this.#seen.expire(nowMinute)
    this.#forgetIdle(nowMinute, SWEEP_PER_ACCESS)
    const agent = this.#entry(e)
    agent.window.expire(nowMinute)
    const fp = fingerprint(e.userId, e.agentId, e.eventId)
    const seenCost = this.#seen.get(fp, nowMinute)
    if (seenCost !== undefined) {
      return { counted: false, costNano: seenCost, totalNano: agent.window.totalNano, paused: agent.pause.paused, transitions: [] }
    }
    const minute = minuteOf(e.at)
    this.#seen.add(fp, e.costNano, minute)
    // What the expiry relaxed comes first (an override ends when the total fell back
    // under the threshold, even if this event takes it over again), then this event.
    const transitions: Transition[] = []
    const relaxed = this.#evaluate(e, agent, now, false)
    if (relaxed) transitions.push(relaxed)
    agent.window.add(minute, e.costNano, e.llmCall ? 1 : 0)
    const crossed = this.#evaluate(e, agent, now, true)
    if (crossed) transitions.push(crossed)
    return { counted: true, costNano: e.costNano, totalNano: agent.window.totalNano, paused: agent.pause.paused, transitions }
  }

  async activeAgents(userId: string, now: number): Promise<string[]> {
    const nowMinute = minuteOf(now)
    const active: string[] = []
    for (const agentId of this.#byUser.get(userId) ?? []) {
      const agent = this.#agents.get(agentKey({ userId, agentId }))!
      agent.window.expire(nowMinute)
      if (!agent.window.empty) active.push(agentId)
    }
    return active
  }

  async get(ref: AgentRef, now: number): Promise<{ snapshot: AgentSnapshot; transition: Transition | null }> {
    const agent = this.#agents.get(agentKey(ref))
    if (!agent) return { snapshot: { active: false, totalNano: 0, llmCalls: 0, pause: RUNNING, policy: DEFAULT_POLICY, configured: false }, transition: null }
    agent.window.expire(minuteOf(now))
    const transition = this.#evaluate(ref, agent, now, false)
    return { snapshot: snapshotOf(agent), transition }
  }

  async getMany(userId: string, agentIds: readonly string[], now: number) {
    const snapshots: AgentSnapshot[] = []
    const transitions: Transition[] = []
    for (const agentId of agentIds) {
      const { snapshot, transition } = await this.get({ userId, agentId }, now)
      snapshots.push(snapshot)
      if (transition) transitions.push(transition)
    }
    return { snapshots, transitions }
  }

  async setPolicy(ref: AgentRef, policy: AgentPolicy, now: number): Promise<Transition | null> {
    return this.setPolicyNow(ref, policy, now)
  }

  /** setPolicy(), synchronously (see recordNow()). */
  setPolicyNow(ref: AgentRef, policy: AgentPolicy, now: number): Transition | null {
    const agent = this.#entry(ref)
    const thresholdChanged = agent.policy.thresholdNano !== policy.thresholdNano
    agent.policy = { ...policy }
    agent.configured = true
    if (thresholdChanged && agent.pause.override) {
      agent.pause = { ...agent.pause, override: false }
      return transitionOf(ref, agent, now, 'threshold_changed')
    }
    return null
  }

  async setPaused(ref: AgentRef, paused: boolean, now: number): Promise<Transition | null> {
    return this.setPausedNow(ref, paused, now)
  }

  /** setPaused(), synchronously (see recordNow()). */
  setPausedNow(ref: AgentRef, paused: boolean, now: number): Transition | null {
    const agent = this.#entry(ref)
    agent.window.expire(minuteOf(now))
    const next = manual(agent.pause, paused, agent.window.totalNano, agent.policy)
    if (!next) return null
    agent.pause = next
    return transitionOf(ref, agent, now, 'manual')
  }

  async restore(data: RestoreData, now: number): Promise<Transition[]> {
    this.#agents.clear()
    this.#byUser.clear()
    this.#seen.clear()
    const nowMinute = minuteOf(now)
    for (const p of data.policies) {
      const agent = this.#entry(p)
      agent.policy = { ...p.policy }
      agent.configured = true
    }
    for (const p of data.pauses) this.#entry(p).pause = { ...p.pause }
    for (const m of data.minutes) {
      if (inWindow(m.minute, nowMinute)) this.#entry(m).window.add(m.minute, m.costNano, m.llmCalls)
    }
    for (const s of data.seen) {
      if (!inWindow(s.minute, nowMinute)) continue
      const fp = fingerprint(s.userId, s.agentId, s.eventId)
      if (this.#seen.get(fp, nowMinute) === undefined) this.#seen.add(fp, s.costNano, s.minute)
    }
    // A crossing stored just before a crash was never acted on: act on it now.
    const transitions: Transition[] = []
    for (const [key, agent] of this.#agents) {
      const t = this.#evaluate(refOf(key), agent, now, true)
      if (t) transitions.push(t)
    }
    return transitions
  }

  /** How many agents are held (for tests and metrics). */
  get size(): number {
    return this.#agents.size
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {}

  #entry(ref: AgentRef): AgentEntry {
    const key = agentKey(ref)
    let agent = this.#agents.get(key)
    if (!agent) {
      agent = { window: new RollingWindow(), pause: RUNNING, policy: DEFAULT_POLICY, configured: false }
      this.#agents.set(key, agent)
      let agents = this.#byUser.get(ref.userId)
      if (!agents) this.#byUser.set(ref.userId, (agents = new Set()))
      agents.add(ref.agentId)
    }
    return agent
  }

  #evaluate(ref: AgentRef, agent: AgentEntry, now: number, mayPause: boolean): Transition | null {
    const next = evaluate(agent.pause, agent.window.totalNano, agent.policy, mayPause)
    if (!next) return null
    agent.pause = next.state
    return transitionOf(ref, agent, now, next.reason)
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
      if (agent.window.empty && !agent.configured && !agent.pause.paused && !agent.pause.override) {
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


function snapshotOf(agent: AgentEntry): AgentSnapshot {
  return {
    active: !agent.window.empty,
    totalNano: agent.window.totalNano,
    llmCalls: agent.window.llmCalls,
    pause: { ...agent.pause },
    policy: { ...agent.policy },
    configured: agent.configured,
  }
}

function transitionOf(ref: AgentRef, agent: AgentEntry, now: number, reason: TransitionReason): Transition {
  return {
    userId: ref.userId,
    agentId: ref.agentId,
    at: now,
    version: nextVersion(now),
    paused: agent.pause.paused,
    reason,
    override: agent.pause.override,
    totalNano: agent.window.totalNano,
    thresholdNano: agent.policy.thresholdNano,
    webhookUrl: agent.policy.webhookUrl,
  }
}
