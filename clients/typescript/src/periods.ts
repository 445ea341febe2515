import type { Period, PeriodBudget, PeriodResponse } from './types.js'

/** The server's rules for period_budgets of POST /config (docs/api.md, "Period budgets"). */
export const MAX_PERIOD_BUDGETS = 4
export const MAX_PERIOD_LIMIT_USD = 1_000_000
const CALENDAR_PERIODS = ['day', 'week', 'month']
const CALENDAR_FIELDS = new Set(['period', 'limitUsd', 'timeZone', 'weekStarts', 'monthStartsOn'])
const ROLLING_FIELDS = new Set(['windowDays', 'limitUsd'])

function isIntegerIn(v: unknown, min: number, max: number): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max
}

/** One entry of the option as POST /config takes it, and the period it budgets (`month`, `window_30d`). */
function periodBudgetBody(budget: unknown, at: string): { name: string; body: Record<string, unknown> } {
  if (typeof budget !== 'object' || budget === null || Array.isArray(budget)) {
    throw new TypeError(`burnrate: ${at} must be { period, limitUsd, … } or { windowDays, limitUsd }`)
  }
  const b = budget as Record<string, unknown>
  const rolling = 'windowDays' in b
  const fields = rolling ? ROLLING_FIELDS : CALENDAR_FIELDS
  for (const key of Object.keys(b)) {
    if (!fields.has(key)) throw new TypeError(`burnrate: unknown field ${JSON.stringify(key)} in ${at} (${rolling ? 'a rolling window' : 'a calendar period'})`)
  }
  const limit = b.limitUsd
  if (typeof limit !== 'number' || !Number.isFinite(limit) || limit <= 0 || limit > MAX_PERIOD_LIMIT_USD) {
    throw new TypeError(`burnrate: ${at}.limitUsd must be a number above 0 and at most ${MAX_PERIOD_LIMIT_USD}`)
  }
  if (rolling) {
    if (!isIntegerIn(b.windowDays, 1, 31)) throw new TypeError(`burnrate: ${at}.windowDays must be an integer from 1 to 31`)
    return { name: `window_${b.windowDays}d`, body: { window_days: b.windowDays, limit_usd: limit } }
  }
  if (typeof b.period !== 'string' || !CALENDAR_PERIODS.includes(b.period)) {
    throw new TypeError(`burnrate: ${at}.period must be "day", "week" or "month" (or give windowDays for a rolling window)`)
  }
  const body: Record<string, unknown> = { period: b.period, limit_usd: limit }
  // Whether the zone exists only the server can tell: its time zone data is the one that counts.
  if (b.timeZone !== undefined) {
    if (typeof b.timeZone !== 'string' || b.timeZone === '') throw new TypeError(`burnrate: ${at}.timeZone must be an IANA time zone name`)
    body.time_zone = b.timeZone
  }
  if (b.weekStarts !== undefined) {
    if (b.weekStarts !== 'monday' && b.weekStarts !== 'sunday') throw new TypeError(`burnrate: ${at}.weekStarts must be "monday" or "sunday"`)
    body.week_starts = b.weekStarts
  }
  if (b.monthStartsOn !== undefined) {
    if (!isIntegerIn(b.monthStartsOn, 1, 28)) throw new TypeError(`burnrate: ${at}.monthStartsOn must be an integer from 1 to 28`)
    body.month_starts_on = b.monthStartsOn
  }
  return { name: b.period, body }
}

/**
 * The `period_budgets` of POST /config for the `periodBudgets` option ([] removes the agent's).
 * Throws a TypeError for what the server would refuse, but for an unknown time zone name.
 */
export function periodBudgetsBody(option: readonly PeriodBudget[]): Array<Record<string, unknown>> {
  if (!Array.isArray(option) || option.length > MAX_PERIOD_BUDGETS) {
    throw new TypeError(`burnrate: periodBudgets must be an array of at most ${MAX_PERIOD_BUDGETS} period budgets`)
  }
  const names = new Set<string>()
  return option.map((budget: unknown, i) => {
    const { name, body } = periodBudgetBody(budget, `periodBudgets[${i}]`)
    if (names.has(name)) throw new TypeError(`burnrate: periodBudgets[${i}] repeats the period ${JSON.stringify(name)}: one budget per period`)
    names.add(name)
    return body
  })
}

/** The periods of an answer, with dates; [] when it has none (a burnrate older than period budgets). */
export function periodsOf(periods: readonly PeriodResponse[] | undefined): Period[] {
  if (!Array.isArray(periods)) return []
  return periods.map((p) => ({
    period: p.period,
    spentUsd: p.spent_usd,
    limitUsd: p.limit_usd,
    remainingUsd: p.remaining_usd,
    startsAt: new Date(p.starts_at),
    endsAt: p.ends_at === null ? null : new Date(p.ends_at),
    projectedExhaustionAt: p.projected_exhaustion_at === null ? null : new Date(p.projected_exhaustion_at),
  }))
}
