import type { Fingerprint } from './dedup.ts'
import type { AgentRef } from './agent-ref.ts'
import type { AgentPolicy, MeterId, PauseReason, ResolvedMeter, ShownPauseReason } from './meters.ts'
import type { PeriodHistory } from './period-tallies.ts'
import type { Nano } from '../money.ts'
import type { EventRow } from '../storage/rows.ts'

/** Why an agent is paused, as the API says it: its own state's reason, or its fleet's (a period budget's period apart, in `pausedPeriod`). */
export type PausedReason = ShownPauseReason | `fleet_${ShownPauseReason}` | 'run_budget'

export interface PauseState {
  paused: boolean
  /** Why it is paused; null while running. */
  reason: PauseReason | null
  /**
   * A resume by hand while a meter was over its limit: pauses by the rules are suppressed
   * until no meter is over (policy.ts relax).
   */
  override: boolean
  /** When the pause began (epoch ms; a manual pause begins anew), 0 while running. */
  since: number
}

export const RUNNING: PauseState = Object.freeze({ paused: false, reason: null, override: false, since: 0 })

/** An agent's llm_call events that came after the pause holding it and its grace period. */
export interface Ignored {
  /** The `since` of the pause they were counted against; 0: none. */
  since: number
  calls: number
  nano: Nano
  /** Whether the flag was raised for that pause (one message, one record). */
  flagged: boolean
}

export const NOT_IGNORED: Ignored = Object.freeze({ since: 0, calls: 0, nano: 0, flagged: false })

/** How long a run kept for its agent's run budget may go without an event before it is forgotten, by default (RUN_ABANDONED_AFTER's). */
export const DEFAULT_RUN_IDLE_MS = 24 * 3_600_000

/** How long after a pause an llm_call may still arrive without counting as ignored: one already in flight. */
export const DEFAULT_IGNORE_GRACE_MS = 60_000

/** The flag raised once per pause for an agent that went on calling the model (its record and message). */
export interface IgnoredPause {
  userId: string
  agentId: string
  at: number
  /** When the pause it ignores began. */
  pausedSince: number
  calls: number
  costNano: Nano
  /** The agent's version counter when it was raised: names the record and its message. */
  version: number
  webhookUrl: string | null
}

/** A run stopped by its agent's run budget: the record journaled (run_stops) and announced. */
export interface RunStop {
  userId: string
  agentId: string
  runId: string
  at: number
  /** The agent's version counter when it stopped: names the record and its message. */
  version: number
  /** What the run's events cost, with the one that stopped it, and its open holds. */
  spentNano: Nano
  heldNano: Nano
  budgetNano: Nano
  webhookUrl: string | null
}

/** The actor of what the budget rules do on their own (audit log). */
export const SYSTEM_ACTOR = 'system'

/** A pause by a meter or by hand, or one of the ways a pause or an override ends. */
export type TransitionReason = PauseReason | 'auto_resume' | 'override_cleared' | 'threshold_changed'

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
  /** The id of the API key whose request caused it, or 'system' (the budget rules): the audit log's actor. */
  actor: string
  /** The daily budget in force when it happened, null for none (for the notification; not persisted). */
  thresholdNano: Nano | null
  webhookUrl: string | null
  /** For a pause by a meter, or its end by itself: the meter, what its window held and its limit (the notification's). */
  meter?: { id: MeterId; spentNano: Nano; limitNano: Nano; windowMinutes: number }
  /** The open budget holds counted with the total, when there were any. */
  heldNano?: Nano
}

/**
 * A request's charge against its API key's budget of events (POST /events, each event of
 * POST /events/batch, POST /holds, DELETE /holds): counted in the same step as what the
 * request does, so an instance asks its store once. A fixed window of `windowMs` starts with
 * the first charge; the charge that takes the count past `max` is refused, and so is every
 * one after it until the window ends.
 */
export interface RateCharge {
  /** What is counted: the API key's budget (its key id, and the group of routes). */
  key: string
  max: number
  windowMs: number
}

/** A budget after a charge: the charges in its window, this one included, and when the window ends. */
export interface RateState {
  max: number
  current: number
  /** Milliseconds until the window ends. */
  ttlMs: number
}

/** A request over its API key's budget: nothing of it was done (429). */
export class RateLimitedError extends Error {
  readonly rate: RateState
  constructor(rate: RateState) {
    super(`at most ${rate.max} requests per minute for this API key`)
    this.name = 'RateLimitedError'
    this.rate = rate
  }
}

/** What the hot state counts of one event. */
export interface RecordInput extends AgentRef {
  eventId: string
  costNano: Nano
  llmCall: boolean
  at: number
  /** The budget hold this llm_call settles: released in the same step, once. */
  holdId?: string | undefined
  /** The run the event belongs to (its run_id), if any. */
  runId?: string | undefined
  /** Whether it is the run's agent_end: a run that ends unstopped is forgotten. */
  endsRun?: boolean
}

/**
 * A budget hold asked for: the worst case of a coming call, reserved against the
 * agent's budget and its fleet's until it is settled, released or expires. Holds are hot
 * state only, never journaled: losing them loses only the reservation.
 */
export interface HoldRequest {
  holdId: string
  costNano: Nano
  /** Epoch ms; the hold is gone at and after this instant. */
  expiresAt: number
  rate?: RateCharge
  /** The run the call belongs to: held against the run's budget too. */
  runId?: string | undefined
}

/**
 * Why a hold is refused: a pause holds the agent, the worst case would take the agent or
 * its fleet over a budget (a period budget's, apart), or its run is stopped or would go over
 * the run budget.
 */
export type HoldRefusal = 'paused' | 'budget' | 'fleet_budget' | 'period_budget' | 'fleet_period_budget' | 'run_budget'

export interface HoldResult {
  /** null: granted (and held); else why not (nothing held). */
  refusal: HoldRefusal | null
  paused: boolean
  pausedReason: PausedReason | null
  /** The period of the period budget that paused it (`month`, `window_30d`), else null. */
  pausedPeriod: string | null
  /** What is left for further holds once this one is counted (policy.ts holdRoom): the agent's, or its fleet's when less. */
  remainingNano: Nano
  /** Its API key's budget after its charge; null when it was not charged. */
  rate: RateState | null
}

/** A hold released early (DELETE /holds/{id}): whose it was and what it held. */
export interface ReleasedHold {
  agentId: string
  costNano: Nano
}

/** One event's atomic step: what is counted, the row the journal takes with it, and its charge. */
export interface RecordEvent extends RecordInput {
  row: EventRow
  rate?: RateCharge
}

export interface RecordResult {
  /** False when the event id had already been counted for this user (then nothing changed). */
  counted: boolean
  /** The cost the event is counted at: for a repeat, its first cost. */
  costNano: Nano
  totalNano: Nano
  /** The agent's daily budget, for what is left of it. */
  thresholdNano: Nano
  /** When the total reaches the threshold at the last hour's rate (projection.ts), epoch ms, or null. */
  exhaustionAt: number | null
  /** Whether the agent is paused by its own state or its fleet's (policy.ts pausedBy). */
  paused: boolean
  pausedReason: PausedReason | null
  /** The period of the period budget that paused it (`month`, `window_30d`), else null. */
  pausedPeriod: string | null
  /**
   * What this event changed, the agent's then its fleet's: at most an ended override or
   * pause (the window moved on first) and a pause each.
   */
  transitions: Transition[]
  /** The alert levels this event took the agent's or its fleet's spend to or past, lowest first. */
  alerts: BudgetAlert[]
  /** The ignoring-pause flag this event raised, once per pause. */
  ignored: IgnoredPause | null
  /** The stop of its run this event caused (its record is journaled with it). */
  runStop: RunStop | null
  /** Each period of the agent's period budgets after the event (none: an empty list). */
  periods: readonly PeriodSpend[]
  /** Its API key's budget after its charge; null when it was not charged. */
  rate: RateState | null
}

/** An alert level of a meter crossed by an event: fired once, until the spend falls back below it. */
export interface BudgetAlert {
  userId: string
  agentId: string
  at: number
  /** The agent's version counter when it fired: names the alert (its webhook's idempotency key). */
  version: number
  meter: MeterId
  level: number
  /** What the meter's window held, and its limit. */
  totalNano: Nano
  thresholdNano: Nano
  exhaustionAt: number | null
  webhookUrl: string | null
}

export interface AgentSnapshot {
  /** Whether the agent has events in the window (of any type). */
  active: boolean
  /** The minute (minuteOf) of its newest event in the window; null when it has none. */
  lastEventMinute: number | null
  totalNano: Nano
  llmCalls: number
  /** Shared with the hot state, which replaces it rather than changing it: never to be changed. */
  pause: Readonly<PauseState>
  policy: Readonly<AgentPolicy>
  /** Whether a config was set (POST /config) for this agent. */
  configured: boolean
  /** llm_calls after its pause and grace (policy.ts ignoring() says whether the flag holds). */
  ignored: Readonly<Ignored>
  /** The open budget holds, counted with the spend of the meters that count them. */
  heldNano: Nano
  /** Each period of its period budgets, in its policy's order (none: an empty list). */
  periods: readonly PeriodSpend[]
}

/** What a period budget's period holds at the moment a snapshot was taken. */
export interface PeriodSpend {
  /** Its meter, resolved for that moment: `from` (its first minute) and, for a calendar period, `endsAt`. */
  meter: ResolvedMeter
  spentNano: Nano
  /** When its spend reaches its limit at the last hour's rate, within the period (projection.ts periodExhaustionAt); null: not before it ends. */
  exhaustionAt: number | null
}

export interface ListedAgent {
  agentId: string
  snapshot: AgentSnapshot
}

/** Receives one agent's events, oldest first: the event id's fingerprint (dedup.ts), cost, minute, llm_calls. */
export type EventSink = (fp: Fingerprint, costNano: Nano, minute: number, llmCalls: number) => void

/**
 * A rebuild of the in-process hot state, fed piece by piece (MemoryHotState.beginRestore):
 * first each agent's stored events in one run, then events from anywhere (the journal's
 * unshipped tail), the newest config and pause state of each agent, then finish().
 */
export interface Restore {
  /**
   * A run of ALL of one agent's stored events, oldest first (a repeated id counts at its
   * first): call it once per agent, before any event().
   */
  agent(ref: AgentRef): EventSink
  /** One event, counted unless its id is counted already (in its run's tally too, `runId`). */
  event(ref: AgentRef, fp: Fingerprint, costNano: Nano, minute: number, llmCalls: number, runId?: string): void
  /**
   * A run of an agent, as its stored events have it: what they cost, when the newest came
   * (epoch ms), and whether its run budget stopped it. Kept for agents whose policy has a run
   * budget; the events of event() add to it.
   */
  run(ref: AgentRef, runId: string, spentNano: Nano, lastAt: number, stopped: boolean): void
  /** A run stopped by its run budget, from the journal's unshipped tail. */
  runStop(ref: AgentRef, runId: string): void
  policy(ref: AgentRef, policy: AgentPolicy): void
  pause(ref: AgentRef, pause: PauseState): void
  /** The newest ignoring-pause record of the agent. */
  ignored(ref: AgentRef, ignored: Ignored): void
  /** What the stored events say the state spent before the window fed, for its period budgets. */
  history(ref: AgentRef, history: PeriodHistory): void
  /** Acts on what the rebuild found (a crossing stored just before a crash); returns the transitions, journaled. */
  finish(): Promise<Transition[]>
}

/**
 * The hot state: rolling 24 h totals, pause flags and the event-id dedup set, answered in
 * constant time per event, and the journal every change is written to in the same atomic
 * step. Two implementations, one contract suite (test/hot-state/contract.test.ts):
 * in process with the segment log (memory.ts), and Redis with its streams (redis.ts).
 * Transitions returned are already journaled: the caller only announces them.
 */
export interface HotState {
  /**
   * POST /events, all of it or none of it: dedup the event id (per user and agent), add the
   * cost to the window, step the budget rules (policy.ts stepEvent), and append the
   * event's row and its transitions to the journal; resolves once that append is durable.
   * A repeat changes nothing and answers with the cost it was first counted at. Throws
   * JournalFullError at the journal's bound, before anything changed. An llm_call's
   * `holdId` releases that open hold of its agent in the same step (an unknown or expired
   * one releases nothing); an open hold of another agent of the user is a 404
   * (hold_not_found), before anything changed. A charge over its budget throws
   * RateLimitedError, before anything else is done.
   */
  record(event: RecordEvent, now: number): Promise<RecordResult>
  /**
   * The agent's window and state, and when its total reaches its threshold at the last
   * hour's rate (projection.ts); the relaxing rules (policy.ts relax) apply and are
   * journaled.
   */
  get(ref: AgentRef, now: number): Promise<{ snapshot: AgentSnapshot; transition: Transition | null; exhaustionAt: number | null }>
  /**
   * GET /agents: the user's agents with events in the window, each with its snapshot, in no
   * particular order; relaxing rules apply and are journaled, as in get().
   */
  listAgents(userId: string, now: number): Promise<ListedAgent[]>
  /**
   * POST /config: the policy and its agent_configs row (with the config it replaced, for the
   * audit log), and the end of a manual override a changed limit causes (policy.ts
   * changePolicy). `actor`: the key id of the request.
   */
  setPolicy(ref: AgentRef, policy: AgentPolicy, now: number, actor: string, history?: PeriodHistory): Promise<Transition | null>
  /** POST /config/pause: a manual pause or resume; null when the state already was that. */
  setPaused(ref: AgentRef, paused: boolean, now: number, actor: string): Promise<Transition | null>
  /**
   * POST /holds: grants the hold when the agent and its fleet run and its worst case
   * stays within their budgets with every open hold counted (policy.ts stepHold),
   * atomically with every other hold and event of the user; nothing is held otherwise. The
   * id of a hold of the agent still open (a retry) is granted again without a second hold;
   * of another agent's, a 404 (hold_not_found).
   */
  hold(ref: AgentRef, request: HoldRequest, now: number): Promise<HoldResult>
  /**
   * DELETE /holds/{id}: releases an open hold of the user early; `hold` null when the user
   * has no such open hold (settled, released, expired, never granted, or another user's).
   */
  release(userId: string, holdId: string, now: number, rate?: RateCharge): Promise<{ hold: ReleasedHold | null; rate: RateState | null }>
  /**
   * burnrate users erase: forgets every state of the user (its agents' and its fleet's, open
   * holds with them) and the budgets of events `budgets` names (RateCharge keys of its API
   * keys), journaling nothing. `agentIds`: agents the stored rows name, beside those the hot
   * state knows itself. Answers how many entries it dropped (states, hold books, budgets; in
   * Redis, keys).
   */
  erase(userId: string, o: { agentIds: readonly string[]; budgets: readonly string[] }): Promise<number>
  ping(): Promise<void>
  close(): Promise<void>
}

/** One agent's state as ClickHouse has it, for a hot state that lost it (Redis). */
export interface AgentLoad {
  minutes: Array<{ minute: number; costNano: Nano; llmCalls: number }>
  seen: Array<{ eventId: string; costNano: Nano; minute: number }>
  /** The stored config; null when none was set (the default policy applies). */
  policy: AgentPolicy | null
  /** The stored config's version (0: none), which names the policy to every instance's cache. */
  policyVersion: number
  /** The latest stored pause transition; null when there is none (running). */
  pause: PauseState | null
  /** The newest ignoring-pause record; null when there is none. */
  ignored: Ignored | null
  /** For a state with period budgets: what the stored events say it spent before `minutes` begin; absent: nothing. */
  history?: PeriodHistory
  /** For an agent with a run budget: the runs it keeps (StoredRun's), oldest first; absent: none. */
  runs?: Array<{ runId: string; spentNano: Nano; lastAt: number; stopped: boolean }>
}

export type AgentLoader = (ref: AgentRef, now: number) => Promise<AgentLoad>
