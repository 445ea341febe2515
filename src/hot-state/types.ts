import type { Nano } from '../money.ts'

/** What a config says about an agent's budget (DECISIONS.md "Behaviour SPEC.md leaves open"). */
export interface AgentPolicy {
  thresholdNano: Nano
  autoResume: boolean
  webhookUrl: string | null
}

export const DEFAULT_THRESHOLD_NANO: Nano = 10_000_000_000 // SPEC.md 2.3: 10.0 USD

export const DEFAULT_POLICY: AgentPolicy = Object.freeze({
  thresholdNano: DEFAULT_THRESHOLD_NANO,
  autoResume: false,
  webhookUrl: null,
})

export type PauseReason = 'budget' | 'manual'

export interface PauseState {
  paused: boolean
  /** Why it is paused; null while running. */
  reason: PauseReason | null
  /** A manual resume over budget: auto-pause is suppressed until the total is back under the threshold. */
  override: boolean
}

export const RUNNING: PauseState = Object.freeze({ paused: false, reason: null, override: false })

export type TransitionReason = 'budget' | 'manual' | 'auto_resume' | 'override_cleared' | 'threshold_changed'

/** A change of pause state, persisted to pause_transitions. */
export interface Transition {
  userId: string
  agentId: string
  at: number
  paused: boolean
  reason: TransitionReason
  override: boolean
  totalNano: Nano
  /** Orders an agent's transitions (newest wins at a rebuild): assigned when it is decided. */
  version: number
  /** The policy in force when it happened (for the notification; not persisted). */
  thresholdNano: Nano
  webhookUrl: string | null
}

export interface AgentRef {
  userId: string
  agentId: string
}

/** One stored event, applied to the hot state after its batch is in ClickHouse. */
export interface RecordInput extends AgentRef {
  eventId: string
  costNano: Nano
  llmCall: boolean
  at: number
}

export interface RecordResult {
  /** False when the event id had already been counted for this user (then nothing changed). */
  counted: boolean
  /** The cost the event is counted at: for a repeat, its first cost. */
  costNano: Nano
  totalNano: Nano
  paused: boolean
  /** What this event changed: at most an ended override (the window expired first) and a budget pause. */
  transitions: Transition[]
}

export interface AgentSnapshot {
  /** Whether the agent has events in the window (of any type). */
  active: boolean
  totalNano: Nano
  llmCalls: number
  pause: PauseState
  policy: AgentPolicy
  /** Whether a config was set (POST /config) for this agent. */
  configured: boolean
}

/** What an instance may do with an event id it is about to store (see HotState.reserve). */
export type Reservation =
  /** Not seen: this instance stores it. */
  | { state: 'reserved' }
  /** Another instance reserved it and went quiet (crashed, or its insert failed): this one
   * takes over, and must look in ClickHouse before storing it again. */
  | { state: 'takeover' }
  /** Already stored and counted, at this cost. */
  | { state: 'done'; costNano: Nano }
  /** Another instance is storing it right now: ask again shortly. */
  | { state: 'busy' }

export interface EventRef extends AgentRef {
  eventId: string
}

/** A reservation (see HotState.reserve) and when it was made. */
export interface Claim extends EventRef {
  at: number
}

/** Everything the hot state is rebuilt from (storage reads it from ClickHouse). */
export interface RestoreData {
  minutes: Array<AgentRef & { minute: number; costNano: Nano; llmCalls: number }>
  seen: Array<AgentRef & { eventId: string; costNano: Nano; minute: number }>
  policies: Array<AgentRef & { policy: AgentPolicy }>
  pauses: Array<AgentRef & { pause: PauseState }>
}

/**
 * The hot state: rolling 24 h totals, pause flags and the event-id dedup set, answered
 * in constant time per event. Two implementations share the same behavioural tests:
 * in process (memory.ts) and, for several instances, Redis.
 */
export interface HotState {
  /**
   * Claims event ids before they are stored, so an event sent twice at once (through two
   * instances) is stored once. A reservation that is not recorded within a few seconds goes
   * stale and the next claim takes it over. In one process the in-flight map already does
   * this, and the memory hot state answers only 'reserved' or 'done'. Ids are kept per
   * (user, agent): a retry repeats the whole event, and one agent's keys live in one Redis
   * Cluster slot, so a single script can dedup and count.
   */
  reserve(events: readonly EventRef[], token: string, now: number): Promise<Reservation[]>
  /**
   * Claims made before `before` and never recorded, oldest first: their instance died
   * between claiming and counting. A sweeper looks each up in ClickHouse and records it
   * (stored) or drops it (not stored), so totals converge without waiting for a retry.
   */
  staleClaims(before: number, limit: number): Promise<Claim[]>
  /** Forgets a claim nobody stored, unless the event was claimed again since. */
  dropClaim(claim: Claim): Promise<void>
  /** Applies stored events in order: dedup, add to window, evaluate the budget rules. */
  record(events: readonly RecordInput[], now: number): Promise<RecordResult[]>
  /** The agent's window and state; relaxing rules (override cleared, auto-resume) apply. */
  get(ref: AgentRef, now: number): Promise<{ snapshot: AgentSnapshot; transition: Transition | null }>
  /**
   * The user's agents with events in the window, or null where the implementation cannot
   * list them (Redis, until it is partitioned by user: issue 8); the caller then asks ClickHouse.
   */
  activeAgents(userId: string, now: number): Promise<string[] | null>
  /** Snapshots of several agents of one user (for listings). */
  getMany(userId: string, agentIds: readonly string[], now: number): Promise<{ snapshots: AgentSnapshot[]; transitions: Transition[] }>
  /** POST /config: a new policy; a changed threshold ends a manual override. */
  setPolicy(ref: AgentRef, policy: AgentPolicy, now: number): Promise<Transition | null>
  /** POST /config/pause: a manual pause or resume; null when the state already was that. */
  setPaused(ref: AgentRef, paused: boolean, now: number): Promise<Transition | null>
  /** Replaces the whole state with a rebuild; returns transitions the rebuild decided (a budget crossing stored but not yet acted on). */
  restore(data: RestoreData, now: number): Promise<Transition[]>
  ping(): Promise<void>
  close(): Promise<void>
}

/** One agent's state as ClickHouse has it, for a hot state that lost it (Redis). */
export interface AgentLoad {
  minutes: Array<{ minute: number; costNano: Nano; llmCalls: number }>
  seen: Array<{ eventId: string; costNano: Nano; minute: number }>
  /** The stored config; null when none was set (the default policy applies). */
  policy: AgentPolicy | null
  /** The latest stored pause transition; null when there is none (running). */
  pause: PauseState | null
}

export type AgentLoader = (ref: AgentRef, now: number) => Promise<AgentLoad>
