import { z } from 'zod'
import type { Nano } from '../money.ts'
import { minuteOf } from '../rolling-day.ts'
import { isFleet, type AgentRef } from './agent-ref.ts'
import { LRUCache } from 'lru-cache'
import { calendarBounds, isCalendar, periodName, rollingFromHour, type CalendarPeriod, type PeriodSpec } from '../periods.ts'

// A policy, and the meters it yields. Whatever a config says about money (a daily budget,
// a velocity limit), the budget rules see a list of meters: each a limit on what is spent
// within a window. The rules (policy.ts, and its mirror in lua/rules.lua) loop over the
// meters and know nothing of the kinds; a kind is one entry of METER_KINDS below, which says
// how a policy yields it, plus the policy field that feeds it. A pause names the meter that
// caused it (PauseState.reason).

/**
 * What a config says about an agent's budget, or its fleet's: the fields POST /config sets.
 * The budget rules see it as meters (metersOf).
 */
export interface AgentPolicy {
  /** The rolling 24 h budget; null: none (a fleet without a config). */
  thresholdNano: Nano | null
  autoResume: boolean
  webhookUrl: string | null
  /** Alert levels, fractions of the threshold in (0, 1), ascending, at most five. */
  alertAt: readonly number[]
  /** Over this much within `velocityWindowMinutes`, a pause; null: none. */
  velocityLimitNano: Nano | null
  /** The velocity limit's window, 1 to 60 minutes (kept while there is no limit, as it was set). */
  velocityWindowMinutes: number
  /** Budgets over calendar periods and rolling windows of days, at most four, one per period (periods.ts). */
  periodBudgets: readonly PeriodBudget[]
  /** What one run of the agent may cost (policy.ts countRun); null: no limit. An agent's only. */
  runBudgetNano: Nano | null
}

/** A limit on what a calendar period or a rolling window of days holds (POST /config period_budgets). */
export interface PeriodBudget {
  spec: PeriodSpec
  limitNano: Nano
}

const periodSpecJson = z.union([
  z.strictObject({ period: z.enum(['day', 'week', 'month']), timeZone: z.string(), weekStarts: z.enum(['monday', 'sunday']), monthStartsOn: z.number().int() }),
  z.strictObject({ windowDays: z.number().int() }),
])

/** An AgentPolicy as JSON keeps it (the Redis hot state stores it so), checked when read back. */
export const agentPolicyJson = z.strictObject({
  thresholdNano: z.number().int().nullable(),
  autoResume: z.boolean(),
  webhookUrl: z.string().nullable(),
  alertAt: z.array(z.number()),
  velocityLimitNano: z.number().int().nullable(),
  velocityWindowMinutes: z.number().int(),
  // Absent from policies stored before period budgets: none.
  periodBudgets: z.array(z.strictObject({ spec: periodSpecJson, limitNano: z.number().int() })).default([]),
  // Absent from policies stored before run budgets: none.
  runBudgetNano: z.number().int().nullable().default(null),
}) satisfies z.ZodType<AgentPolicy>

export const DEFAULT_VELOCITY_WINDOW_MINUTES = 5

export const DEFAULT_ALERT_AT: readonly number[] = Object.freeze([0.8])

/** 10 USD a day: the budget of an agent without a config. */
export const DEFAULT_THRESHOLD_NANO: Nano = 10_000_000_000

export const DEFAULT_POLICY: AgentPolicy = Object.freeze({
  thresholdNano: DEFAULT_THRESHOLD_NANO,
  autoResume: false,
  webhookUrl: null,
  alertAt: DEFAULT_ALERT_AT,
  velocityLimitNano: null,
  velocityWindowMinutes: DEFAULT_VELOCITY_WINDOW_MINUTES,
  periodBudgets: Object.freeze([]) as readonly PeriodBudget[],
  runBudgetNano: null,
})

/** A fleet without a config has no budget and no alert levels: it never pauses by itself. */
export const FLEET_DEFAULT_POLICY: AgentPolicy = Object.freeze({
  ...DEFAULT_POLICY,
  thresholdNano: null,
  alertAt: Object.freeze([]) as readonly number[],
})

export function defaultPolicy(ref: AgentRef): AgentPolicy {
  return isFleet(ref) ? FLEET_DEFAULT_POLICY : DEFAULT_POLICY
}

/** An agent's daily budget: every agent has one (the default without a config); only a fleet may have none. */
export function agentBudget(policy: AgentPolicy): Nano {
  if (policy.thresholdNano === null) throw new Error('an agent has a daily budget')
  return policy.thresholdNano
}

/** Why a state is paused: the meter that paused it, or by hand. */
export type PauseReason = MeterId | 'manual'

/** A limit on what a window holds: what one of METER_KINDS yields for a policy. */
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
  /** A period budget's meter: its period (the other kinds' windows end with the current minute). */
  period?: PeriodSpec
}

/**
 * A meter as the rules apply it at one moment: the minute its window starts at (an event of
 * that minute or later counts), resolved by TypeScript so that the Lua side never reasons
 * about time beyond comparing minutes.
 */
export interface ResolvedMeter extends Meter {
  /** The first minute whose spend counts. */
  from: number
  /** A calendar period's end (epoch ms, the next period's start); absent for the other kinds. */
  endsAt?: number
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

/** A period budget's meter: `period_budget:` and the period's name (periods.ts periodName: month, window_30d, …). */
export type PeriodMeterId = `${typeof PERIOD_BUDGET}:${string}`

export type MeterId = keyof typeof METER_KINDS | PeriodMeterId

/** The kinds' meters; period budgets add theirs after them, one per period. */
export const METER_IDS = Object.keys(METER_KINDS) as ReadonlyArray<keyof typeof METER_KINDS>

/** What the API calls a pause or a hold refused by a period budget (paused_period names the period). */
export const PERIOD_BUDGET = 'period_budget'

/** The meter of a period budget. */
export function periodMeterId(spec: PeriodSpec): PeriodMeterId {
  return `${PERIOD_BUDGET}:${periodName(spec)}`
}

/** The period a meter id names, or null for a meter of another kind ('month', 'window_30d'). */
export function periodOfMeter(id: string): string | null {
  return id.startsWith(`${PERIOD_BUDGET}:`) ? id.slice(PERIOD_BUDGET.length + 1) : null
}

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
    // A period budget counts holds and ends its pause by itself: a calendar period's when the
    // next period begins (the new period starts at nothing spent), a rolling window's when
    // its spend falls back under the limit.
    for (const { spec, limitNano } of policy.periodBudgets) {
      list.push({ id: periodMeterId(spec), limitNano, windowMinutes: nominalMinutes(spec), autoResume: true, alertAt: policy.alertAt, countsHolds: true, period: spec })
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
  const resolved = Object.freeze(meters.map((m) => (m.period ? resolvePeriod(m, m.period, now) : { ...m, from: minute - m.windowMinutes + 1 })))
  resolvedByMeters.set(meters, { minute, resolved })
  return resolved
}

/** A period meter at `now`: a calendar period from its start, a rolling window of days from its first whole UTC hour. */
function resolvePeriod(m: Meter, spec: PeriodSpec, now: number): ResolvedMeter {
  if (!isCalendar(spec)) return { ...m, from: rollingFromHour(spec, now) * 60 }
  const { startMs, endMs } = currentPeriod(m, spec, now)
  return { ...m, from: minuteOf(startMs), endsAt: endMs }
}

// The current period of each calendar spec in use, until it ends: the zone arithmetic takes
// ~100 µs, and every policy's meters are resolved anew each minute (10,000 agents with the
// same month would pay a second a minute). Bounded: specs are a config's to choose.
const periods = new LRUCache<string, { startMs: number; endMs: number }>({ max: 1000 })

function currentPeriod(m: Meter, spec: CalendarPeriod, now: number): { startMs: number; endMs: number } {
  const key = periodKey(m)
  let p = periods.get(key)
  if (!p || now < p.startMs || now >= p.endMs) periods.set(key, (p = calendarBounds(spec, now)))
  return p
}

/** A period's length in minutes as a transition reports it (a calendar period's nominal one: 28 to 31 days are "a month"). */
function nominalMinutes(spec: PeriodSpec): number {
  if (!isCalendar(spec)) return spec.windowDays * DAY_MINUTES
  return { day: 1, week: 7, month: 30 }[spec.period] * DAY_MINUTES
}

/** Every reason the API may give for a pause: a meter kind's, a period budget's, or by hand (metrics start a series for each). */
export const PAUSE_REASONS = [...METER_IDS, PERIOD_BUDGET, 'manual'] as const

/** A pause reason as the API and the metrics say it: a period budget's without its period. */
export type ShownPauseReason = (typeof PAUSE_REASONS)[number]

export function shownReason(reason: PauseReason): ShownPauseReason {
  return periodOfMeter(reason) === null ? (reason as ShownPauseReason) : PERIOD_BUDGET
}

/** Whether `reason` names a meter (a pause the rules made), rather than a manual pause. */
export function isMeterId(reason: string): reason is MeterId {
  return Object.hasOwn(METER_KINDS, reason) || (periodOfMeter(reason) ?? '') !== ''
}

/** The pause reason a stored row names; one whose rule is unknown holds until resumed by hand. */
export function pauseReasonOf(stored: string): PauseReason {
  return isMeterId(stored) ? stored : 'manual'
}

/** Whether any meter's limit or window changed, or a meter came or went: what ends a manual override. */
export function limitsChanged(before: readonly Meter[], after: readonly Meter[]): boolean {
  if (before.length !== after.length) return true
  return before.some((m, i) => m.id !== after[i]!.id || m.limitNano !== after[i]!.limitNano || m.windowMinutes !== after[i]!.windowMinutes || periodKey(m) !== periodKey(after[i]!))
}

/** The daily budget's meter of a policy, or undefined when it has none (a fleet without a config). */
export function budgetMeter(policy: AgentPolicy): Meter | undefined {
  return metersOf(policy).find((m) => m.id === 'budget')
}

/** A period meter's spec as one string (what its tally was counted for), '' for the other kinds: a tally of another spec is not this one's. */
export function periodKey(m: Pick<Meter, 'period'>): string {
  const spec = m.period
  if (!spec) return ''
  // A policy's specs are shared by its meters and their resolved copies: made once per spec (every event asks).
  let key = periodKeys.get(spec)
  if (key === undefined) {
    key = isCalendar(spec) ? `${spec.period} ${spec.timeZone} ${spec.weekStarts} ${spec.monthStartsOn}` : `window ${spec.windowDays}`
    periodKeys.set(spec, key)
  }
  return key
}

const periodKeys = new WeakMap<PeriodSpec, string>()
