import type { Nano } from '../money.ts'
import type { AgentPolicy, PausedReason, PauseState, TransitionReason } from './types.ts'

/**
 * The budget rules of SPEC.md 3 and DECISIONS.md, as one pure function both hot-state
 * implementations follow branch for branch (the Redis Lua script mirrors it).
 *
 * - A manual override ends once the total is at or below the threshold.
 * - With auto_resume, an agent paused by its budget runs again at or below the threshold.
 * - When `mayPause`, a running agent without override whose total is strictly above the
 *   threshold is paused by its budget. Only ingestion (and a rebuild) may pause: reads
 *   never start a pause nor send a notification.
 */
export function evaluate(
  state: PauseState,
  totalNano: Nano,
  policy: AgentPolicy,
  mayPause: boolean,
): { state: PauseState; reason: TransitionReason } | null {
  const under = totalNano <= policy.thresholdNano
  if (state.override && under) return { state: { ...state, override: false }, reason: 'override_cleared' }
  if (state.paused && state.reason === 'budget' && policy.autoResume && under) {
    return { state: { paused: false, reason: null, override: false }, reason: 'auto_resume' }
  }
  if (mayPause && !state.paused && !state.override && !under) {
    return { state: { paused: true, reason: 'budget', override: false }, reason: 'budget' }
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
 * the pause manual: auto-resume no longer ends it); a resume over budget overrides auto-pause.
 */
export function manual(state: PauseState, paused: boolean, totalNano: Nano, policy: AgentPolicy): PauseState | null {
  if (state.paused === paused && !(paused && state.reason === 'budget')) return null
  return paused
    ? { paused: true, reason: 'manual', override: false }
    : { paused: false, reason: null, override: totalNano > policy.thresholdNano }
}

/**
 * An agent is paused when its own state or its fleet's says so (issue 12); its own reason
 * comes first, as it outlasts the fleet's (a fleet resumed leaves a paused agent paused).
 */
export function pausedBy(agent: PauseState, fleet: PauseState): { paused: boolean; pausedReason: PausedReason | null } {
  if (agent.paused) return { paused: true, pausedReason: agent.reason }
  if (fleet.paused) return { paused: true, pausedReason: fleet.reason === 'manual' ? 'fleet_manual' : 'fleet_budget' }
  return NOT_PAUSED
}

const NOT_PAUSED = Object.freeze({ paused: false, pausedReason: null })
