import type { Nano } from '../money.ts'
import { NOT_IGNORED, type AgentPolicy, type HoldRefusal, type Ignored, type PausedReason, type PauseReason, type PauseState, type TransitionReason } from './types.ts'

/**
 * The budget rules of SPEC.md 3 and DECISIONS.md, as one pure function both hot-state
 * implementations follow branch for branch (the Redis Lua script mirrors it). `spentNano` is
 * the spend in the policy's velocity window (0 when it has no velocity limit).
 *
 * - A manual override ends once the total is at or below the threshold and the spend at or
 *   below the velocity limit.
 * - With auto_resume, an agent paused by its budget runs again at or below the threshold. A
 *   velocity pause never resumes on its own (issue 13).
 * - When `mayPause`, a running agent without override is paused: by its budget when its total
 *   is strictly above the threshold, else by its velocity when its spend in the window is
 *   strictly above the limit. Only ingestion (and a rebuild) may pause: reads never start a
 *   pause nor send a notification.
 */
export function evaluate(
  state: PauseState,
  totalNano: Nano,
  spentNano: Nano,
  policy: AgentPolicy,
  mayPause: boolean,
  now: number,
): { state: PauseState; reason: TransitionReason } | null {
  const under = totalNano <= policy.thresholdNano
  const slow = policy.velocityLimitNano === null || spentNano <= policy.velocityLimitNano
  if (state.override && under && slow) return { state: { ...state, override: false }, reason: 'override_cleared' }
  if (state.paused && state.reason === 'budget' && policy.autoResume && under) {
    return { state: { paused: false, reason: null, override: false, since: 0 }, reason: 'auto_resume' }
  }
  if (mayPause && !state.paused && !state.override && !(under && slow)) {
    const reason = under ? 'velocity' : 'budget'
    return { state: { paused: true, reason, override: false, since: now }, reason }
  }
  return null
}

/**
 * Alert levels (issue 12): bit i of `alerted` says that level alertAt[i] fired and the total
 * has not fallen below it since. A level fires when the total is at or above its share of
 * the threshold and its bit is clear (only when `mayFire`: an event counted); it re-arms
 * once the total is below it. Returns the new bits and the levels fired, lowest first.
 */
export function evaluateAlerts(alerted: number, totalNano: Nano, policy: AgentPolicy, mayFire: boolean): { alerted: number; fired: number[] } {
  const fired: number[] = []
  policy.alertAt.forEach((level, i) => {
    const bit = 1 << i
    if (totalNano >= level * policy.thresholdNano) {
      if (mayFire && (alerted & bit) === 0) {
        alerted |= bit
        fired.push(level)
      }
    } else {
      alerted &= ~bit
    }
  })
  return { alerted, fired }
}

/** The levels the total is at or above (GET /agents; the bits a rebuild or a load starts from). */
export function alertsReached(totalNano: Nano, policy: AgentPolicy): number {
  let bits = 0
  for (let i = 0; i < policy.alertAt.length; i++) if (totalNano >= policy.alertAt[i]! * policy.thresholdNano) bits |= 1 << i
  return bits
}

/** The bits of `alerted` (over `from`'s levels) carried to `to`'s levels: a level kept keeps its state. */
export function carryAlerts(alerted: number, from: readonly number[], to: readonly number[]): number {
  return to.reduce((bits, level, i) => {
    const j = from.indexOf(level)
    return j >= 0 && (alerted & (1 << j)) !== 0 ? bits | (1 << i) : bits
  }, 0)
}

/**
 * A manual pause holds until a manual resume (so pausing an agent its budget paused makes
 * the pause manual: auto-resume no longer ends it); a resume over budget or over the velocity
 * limit overrides auto-pause (evaluate says until when).
 */
export function manual(state: PauseState, paused: boolean, totalNano: Nano, spentNano: Nano, policy: AgentPolicy, now: number): PauseState | null {
  if (state.paused === paused && !(paused && state.reason !== 'manual')) return null
  const fast = policy.velocityLimitNano !== null && spentNano > policy.velocityLimitNano
  return paused
    ? { paused: true, reason: 'manual', override: false, since: now }
    : { paused: false, reason: null, override: totalNano > policy.thresholdNano || fast, since: 0 }
}

/**
 * An agent is paused when its own state or its fleet's says so (issue 12); its own pause
 * comes first, as it outlasts the fleet's (a fleet resumed leaves a paused agent paused).
 * Returns the pause that holds, null while both run.
 */
export function holdingPause<T extends Told>(agent: T, fleet: T): { pause: T; fleet: boolean } | null {
  if (agent.paused) return { pause: agent, fleet: false }
  if (fleet.paused) return { pause: fleet, fleet: true }
  return null
}

/** Why the pause that holds (holdingPause) holds, as the API says it; null when none does. */
export function pausedReasonOf(holding: { pause: Told; fleet: boolean } | null): PausedReason | null {
  if (!holding) return null
  const reason = holding.pause.reason ?? 'budget'
  return holding.fleet ? FLEET_REASONS[reason] : reason
}

/** Whether an agent is paused (holdingPause), and why as the API says it. */
export function pausedBy(agent: Told, fleet: Told): { paused: boolean; pausedReason: PausedReason | null } {
  const holding = holdingPause(agent, fleet)
  return holding ? { paused: true, pausedReason: pausedReasonOf(holding) } : NOT_PAUSED
}

const NOT_PAUSED = Object.freeze({ paused: false, pausedReason: null })

/** What an answer tells of a pause state. */
type Told = Pick<PauseState, 'paused' | 'reason'>

const FLEET_REASONS = { budget: 'fleet_budget', velocity: 'fleet_velocity', manual: 'fleet_manual' } as const satisfies Record<PauseReason, PausedReason>

/**
 * Agents that ignore their pause (issue 13): an llm_call arriving at `now` while a pause
 * holds (`since`, when it began; 0: none) and more than `graceMs` after it began is ignored:
 * counted, and the first such call of that pause raises the flag. Counts of an earlier pause
 * start again; with no pause holding, there is nothing to count.
 */
export function countIgnored(ign: Ignored, since: number, now: number, costNano: Nano, graceMs: number): { ignored: Ignored; raised: boolean } {
  if (since === 0) return { ignored: ign.since === 0 ? ign : NOT_IGNORED, raised: false }
  const base = ign.since === since ? ign : { ...NOT_IGNORED, since }
  if (now <= since + graceMs) return { ignored: base, raised: false }
  return { ignored: { since, calls: base.calls + 1, nano: base.nano + costNano, flagged: true }, raised: !base.flagged }
}

/** Whether the ignoring-pause flag holds: raised against the pause that holds now (`since`); a resume clears it. */
export function ignoring(ign: Ignored, since: number): boolean {
  return ign.flagged && since !== 0 && ign.since === since
}

/** What the hold rules read of a state (an agent's, its fleet's). */
export interface HoldBudget {
  pause: Told & Pick<PauseState, 'override'>
  totalNano: Nano
  /** Its open holds. */
  heldNano: Nano
  thresholdNano: Nano
}

/**
 * Budget holds (issue 13): a hold of `costNano` is refused while a pause holds the agent
 * (holdingPause), or when the agent's total plus its open holds plus this one would be
 * strictly over its threshold, or its fleet's (a fleet without a budget has an infinite
 * one). A manual resume over budget (override) lets the agent run past its budget, so a
 * state in override is not held to it. Null: granted.
 */
export function holdRefusal(agent: HoldBudget, fleet: HoldBudget, costNano: Nano): HoldRefusal | null {
  if (holdingPause(agent.pause, fleet.pause)) return 'paused'
  if (!agent.pause.override && agent.totalNano + agent.heldNano + costNano > agent.thresholdNano) return 'budget'
  if (!fleet.pause.override && fleet.totalNano + fleet.heldNano + costNano > fleet.thresholdNano) return 'fleet_budget'
  return null
}

/** What further holds could still take: the agent's budget left with its holds counted, or its fleet's when less. */
export function holdRoom(agent: HoldBudget, fleet: HoldBudget): Nano {
  return Math.min(agent.thresholdNano - agent.totalNano - agent.heldNano, fleet.thresholdNano - fleet.totalNano - fleet.heldNano)
}
