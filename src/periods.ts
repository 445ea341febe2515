import { DateTime, IANAZone, type DurationLike } from 'luxon'

// Period budgets: a budget that resets at the start of each calendar period (a day, a week,
// a month) in a time zone, or one that covers a rolling window of whole days. These functions
// say which instants a period holds; they do no I/O and keep nothing. luxon reads the zone rules
// through Intl (the tz database Node ships) and keeps a formatter per zone.

/** The calendar period a budget resets on. */
export type CalendarUnit = 'day' | 'week' | 'month'

/** A budget that resets at the start of each `period` in local time of `timeZone`. */
export interface CalendarPeriod {
  period: CalendarUnit
  /** An IANA time zone name (isTimeZone). */
  timeZone: string
  /** The first day of a week. */
  weekStarts: 'monday' | 'sunday'
  /** The day of the month a month begins on, 1 to 28, so that every month has it. */
  monthStartsOn: number
}

/** A budget over the current UTC hour and the hours before it, `windowDays` days' worth in all. */
export interface RollingWindowOfDays {
  /** 1 to 31. */
  windowDays: number
}

/** What a period budget covers: a calendar period, or a rolling window of days. */
export type PeriodSpec = CalendarPeriod | RollingWindowOfDays

const HOUR_MS = 3_600_000

/** Whether a spec resets on the calendar, rather than covering a rolling window. */
export function isCalendar(p: PeriodSpec): p is CalendarPeriod {
  return 'period' in p
}

/** The name the API uses: 'day' | 'week' | 'month' | `window_${n}d` */
export function periodName(p: PeriodSpec): string {
  return isCalendar(p) ? p.period : `window_${p.windowDays}d`
}

/**
 * Whether `zone` is a time zone name of the tz database, as Intl knows it: 'UTC', 'Europe/Paris',
 * and links such as 'Asia/Calcutta' or 'US/Eastern'. Names match regardless of case, as they do
 * in Intl (ECMA-402): 'utc' and 'europe/paris' are UTC and Europe/Paris. Offsets are not names:
 * '+05:00', which Intl accepts as a zone since ES2024, and 'utc+5' are refused.
 */
export function isTimeZone(zone: string): boolean {
  // Every name begins with a letter. isValidZone builds a formatter and keeps none, so names a
  // client sends are not cached (IANAZone.create would keep each one).
  return /^[A-Za-z]/.test(zone) && IANAZone.isValidZone(zone)
}

/**
 * The calendar period containing instant `now` (epoch ms): [startMs, endMs), start <= now < end.
 * A period begins at the first instant of its first day in `timeZone` (firstInstantOf), and
 * ends where the next begins, so a day across a change of offset lasts 23 or 25 hours.
 */
export function calendarBounds(p: CalendarPeriod, now: number): { startMs: number; endMs: number } {
  const zone = zoneOf(p)
  const local = DateTime.fromMillis(now, { zone })
  const first = firstDayOf(p, DateTime.utc(local.year, local.month, local.day))
  let next = first.plus(STEP[p.period])
  let startMs = firstInstantOf(first, zone)
  let endMs = firstInstantOf(next, zone)
  // A day begins at its first midnight: where clocks turned back across midnight (America/St_Johns,
  // 2010-11-07: 00:01 became 23:01 the day before), an instant that reads the old day may follow it.
  if (now >= endMs) {
    startMs = endMs
    next = next.plus(STEP[p.period])
    endMs = firstInstantOf(next, zone)
  }
  return { startMs, endMs }
}

/** The first UTC hour (Math.floor(ms / 3_600_000)) a rolling window of days holds at `now`: it holds the current UTC hour and the 24*windowDays - 1 hours before it. */
export function rollingFromHour(p: RollingWindowOfDays, now: number): number {
  if (!Number.isInteger(p.windowDays) || p.windowDays < 1 || p.windowDays > 31) throw new RangeError(`windowDays must be an integer from 1 to 31, got ${p.windowDays}`)
  return Math.floor(now / HOUR_MS) - 24 * p.windowDays + 1
}

/** How far one period's first day is from the next's. */
const STEP: Record<CalendarUnit, DurationLike> = { day: { days: 1 }, week: { days: 7 }, month: { months: 1 } }

/** luxon's weekday (1 Monday … 7 Sunday) a week begins on. */
const WEEK_START = { monday: 1, sunday: 7 } as const

function zoneOf(p: CalendarPeriod): IANAZone {
  const zone = IANAZone.create(p.timeZone)
  if (!zone.isValid) throw new RangeError(`unknown time zone: ${p.timeZone}`)
  return zone
}

/**
 * The first day of the period that holds local date `today`. Local dates are luxon DateTimes
 * at midnight UTC: calendar arithmetic on them has no offsets to change.
 */
function firstDayOf(p: CalendarPeriod, today: DateTime): DateTime {
  switch (p.period) {
    case 'day':
      return today
    case 'week':
      return today.minus({ days: (today.weekday - WEEK_START[p.weekStarts] + 7) % 7 })
    case 'month': {
      if (!Number.isInteger(p.monthStartsOn) || p.monthStartsOn < 1 || p.monthStartsOn > 28) throw new RangeError(`monthStartsOn must be an integer from 1 to 28, got ${p.monthStartsOn}`)
      const thisMonth = today.set({ day: p.monthStartsOn })
      return today.day < p.monthStartsOn ? thisMonth.minus({ months: 1 }) : thisMonth
    }
  }
}

/**
 * The first instant of local date `date` in `zone`, epoch ms: its midnight; the earlier one where
 * clocks turned back to midnight so that it read twice (America/Havana on the first Sunday of
 * November: 01:00 becomes 00:00), of which luxon would give either, by its guess of the offset;
 * where clocks skipped midnight (America/Santiago, 2026-09-06: 00:00 becomes 01:00), the end of
 * the gap: luxon moves a local time that does not exist forward by the gap's length, and every
 * gap over a midnight in the tz database since 1970 begins or ends at it.
 */
function firstInstantOf(date: DateTime, zone: IANAZone): number {
  const midnight = DateTime.fromObject({ year: date.year, month: date.month, day: date.day }, { zone })
  return Math.min(...midnight.getPossibleOffsets().map((d) => d.toMillis()))
}
