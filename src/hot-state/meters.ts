import type { Nano } from '../money.ts'
import { minuteOf } from '../window.ts'
import type { AgentPolicy, PauseReason } from './types.ts'

/**
 * Budgets as meters. Whatever a config says about money (a daily budget, a velocity limit),
 * the budget rules see a list of meters: each a limit on what is spent within a window.
 * The rules (policy.ts, and its mirror in lua/rules.lua) loop over the meters and know
 * nothing of the kinds; a kind is one entry of METER_KINDS below, which says how a config
 * yields it and how its window is resolved for a moment. A pause names the meter that
 * caused it (PauseState.reason).
 */
export interface Meter {
  id: MeterId
  limitNano: Nano
  /** Its window, in whole minutes ending with the current one. */
  windowMinutes: number
  /** Whether a pause by this meter ends by itself once its spend is back at or under the limit. */
  autoResume: boolean
  /** Alert levels, fractions of the limit in (0, 1), ascending. */
  alertAt: readonly number[]
  /**
   * Whether open budget holds count with its spend: a budget reserves room for calls in
   * flight; a rate limit (velocity) judges only what was spent.
   */
  countsHolds: boolean
}

/**
 * A meter as the rules apply it at one moment: the minute its window starts at (an event of
 * that minute or later counts), resolved by TypeScript so that the Lua side never reasons
 * about time beyond comparing minutes.
 */
export interface ResolvedMeter extends Meter {
  /** The first minute whose spend counts. */
  from: number
}

interface MeterKind {
  /** The meter a policy yields of this kind, or null when the policy has none. */
  of(policy: AgentPolicy): Omit<Meter, 'id'> | null
}

/** A day: the rolling window of the daily budget and of every total the API shows. */
export const DAY_MINUTES = 24 * 60

/**
 * Every kind of meter, in the order the rules look at them: the first meter over its limit
 * names the pause. Adding a kind is one entry here (and the config field that feeds it).
 */
export const METER_KINDS = {
  /** The rolling 24 h budget (cost_threshold_usd): holds count; auto_resume applies. */
  budget: {
    of: (p) => (p.thresholdNano === null ? null : { limitNano: p.thresholdNano, windowMinutes: DAY_MINUTES, autoResume: p.autoResume, alertAt: p.alertAt, countsHolds: true }),
  },
  /** The spend-velocity limit: more than this within its last few minutes; it never resumes by itself. */
  velocity: {
    of: (p) =>
      p.velocityLimitNano === null ? null : { limitNano: p.velocityLimitNano, windowMinutes: p.velocityWindowMinutes, autoResume: false, alertAt: NO_LEVELS, countsHolds: false },
  },
} as const satisfies Record<string, MeterKind>

export type MeterId = keyof typeof METER_KINDS

export const METER_IDS = Object.keys(METER_KINDS) as readonly MeterId[]

const NO_LEVELS: readonly number[] = Object.freeze([])

// Policies are replaced, never changed in place: their meters, and the meters resolved for
// the current minute, are computed once per policy and minute (every event asks for them).
const metersByPolicy = new WeakMap<AgentPolicy, readonly Meter[]>()
const resolvedByMeters = new WeakMap<readonly Meter[], { minute: number; resolved: readonly ResolvedMeter[] }>()

/** The meters a policy yields, in METER_KINDS order. */
export function metersOf(policy: AgentPolicy): readonly Meter[] {
  let meters = metersByPolicy.get(policy)
  if (!meters) {
    const list: Meter[] = []
    for (const id of METER_IDS) {
      const m = METER_KINDS[id].of(policy)
      if (m) list.push({ id, ...m })
    }
    metersByPolicy.set(policy, (meters = Object.freeze(list)))
  }
  return meters
}

/** The meters resolved for `now`: each window ends with the current minute. */
export function resolveMeters(meters: readonly Meter[], now: number): readonly ResolvedMeter[] {
  const minute = minuteOf(now)
  const known = resolvedByMeters.get(meters)
  if (known?.minute === minute) return known.resolved
  const resolved = Object.freeze(meters.map((m) => ({ ...m, from: minute - m.windowMinutes + 1 })))
  resolvedByMeters.set(meters, { minute, resolved })
  return resolved
}

/** Every reason a state may be paused for: a meter's, or by hand (metrics start a series for each). */
export const PAUSE_REASONS: readonly PauseReason[] = [...METER_IDS, 'manual']

/** Whether `reason` names a meter (a pause the rules made), rather than a manual pause. */
export function isMeterId(reason: string): reason is MeterId {
  return Object.hasOwn(METER_KINDS, reason)
}

/** The pause reason a stored row names; one whose rule is unknown holds until resumed by hand. */
export function pauseReasonOf(stored: string): PauseReason {
  return isMeterId(stored) ? stored : 'manual'
}

/** Whether any meter's limit or window changed, or a meter came or went: what ends a manual override. */
export function limitsChanged(before: readonly Meter[], after: readonly Meter[]): boolean {
  if (before.length !== after.length) return true
  return before.some((m, i) => m.id !== after[i]!.id || m.limitNano !== after[i]!.limitNano || m.windowMinutes !== after[i]!.windowMinutes)
}

/** The daily budget's meter of a policy, or undefined when it has none (a fleet without a config). */
export function budgetMeter(policy: AgentPolicy): Meter | undefined {
  return metersOf(policy).find((m) => m.id === 'budget')
}
