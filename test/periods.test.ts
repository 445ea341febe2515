import fc from 'fast-check'
import { DateTime } from 'luxon'
import { describe, expect, it } from 'vitest'
import { calendarBounds, isCalendar, isTimeZone, periodName, rollingFromHour, type CalendarPeriod, type CalendarUnit } from '../src/periods.ts'

/**
 * Period arithmetic (src/periods.ts). Expected instants are written as ISO strings with the
 * offset in force, so each one states its local time; results are compared as UTC ISO strings,
 * so that a failure shows which instant differs.
 */

const HOUR_MS = 3_600_000

function cal(period: CalendarUnit, timeZone: string, more: Partial<CalendarPeriod> = {}): CalendarPeriod {
  return { period, timeZone, weekStarts: 'monday', monthStartsOn: 1, ...more }
}

const utc = (ms: number): string => new Date(ms).toISOString()

/** The period holding `now`, as [start, end] in UTC ISO. */
function boundsAt(p: CalendarPeriod, now: string | number): [string, string] {
  const { startMs, endMs } = calendarBounds(p, typeof now === 'number' ? now : Date.parse(now))
  return [utc(startMs), utc(endMs)]
}

function span(start: string, end: string): [string, string] {
  return [utc(Date.parse(start)), utc(Date.parse(end))]
}

function hours(p: CalendarPeriod, now: string): number {
  const { startMs, endMs } = calendarBounds(p, Date.parse(now))
  return (endMs - startMs) / HOUR_MS
}

describe('calendarBounds in UTC', () => {
  it('a day runs from midnight to the next midnight', () => {
    expect(boundsAt(cal('day', 'UTC'), '2026-03-10T13:45:12.345Z')).toEqual(span('2026-03-10T00:00:00Z', '2026-03-11T00:00:00Z'))
  })

  it('a week starts on Monday or on Sunday, as the period says', () => {
    // 2026-03-11 is a Wednesday, 2026-03-15 a Sunday.
    expect(boundsAt(cal('week', 'UTC'), '2026-03-11T12:00:00Z')).toEqual(span('2026-03-09T00:00:00Z', '2026-03-16T00:00:00Z'))
    expect(boundsAt(cal('week', 'UTC', { weekStarts: 'sunday' }), '2026-03-11T12:00:00Z')).toEqual(span('2026-03-08T00:00:00Z', '2026-03-15T00:00:00Z'))
    expect(boundsAt(cal('week', 'UTC'), '2026-03-15T12:00:00Z')).toEqual(span('2026-03-09T00:00:00Z', '2026-03-16T00:00:00Z'))
    expect(boundsAt(cal('week', 'UTC', { weekStarts: 'sunday' }), '2026-03-15T12:00:00Z')).toEqual(span('2026-03-15T00:00:00Z', '2026-03-22T00:00:00Z'))
  })

  it('a month starting on the 1st: January ends at February 1, December at January 1 of the next year', () => {
    const month = cal('month', 'UTC')
    expect(boundsAt(month, '2026-01-31T23:59:59.999Z')).toEqual(span('2026-01-01T00:00:00Z', '2026-02-01T00:00:00Z'))
    expect(boundsAt(month, '2026-02-01T00:00:00Z')).toEqual(span('2026-02-01T00:00:00Z', '2026-03-01T00:00:00Z'))
    expect(boundsAt(month, '2026-12-31T23:59:59.999Z')).toEqual(span('2026-12-01T00:00:00Z', '2027-01-01T00:00:00Z'))
  })
})

describe('calendarBounds in zones whose offset is not whole hours', () => {
  it('Asia/Kolkata (+05:30): a day starts at local midnight, 18:30 UTC the day before', () => {
    expect(boundsAt(cal('day', 'Asia/Kolkata'), '2026-03-10T20:00:00Z')).toEqual(span('2026-03-11T00:00:00+05:30', '2026-03-12T00:00:00+05:30'))
  })

  it('Asia/Kathmandu (+05:45): a Monday week starts at 00:00 local on Monday, 18:15 UTC on Sunday', () => {
    const week = cal('week', 'Asia/Kathmandu')
    expect(boundsAt(week, '2026-03-16T00:05:00+05:45')).toEqual(span('2026-03-16T00:00:00+05:45', '2026-03-23T00:00:00+05:45'))
    expect(boundsAt(week, '2026-03-15T23:59:00+05:45')).toEqual(span('2026-03-09T00:00:00+05:45', '2026-03-16T00:00:00+05:45'))
  })

  it('Australia/Adelaide (+10:30 / +09:30): the day summer time ends lasts 25 h, the day it begins 23 h', () => {
    // 2026-04-05 03:00 +10:30 becomes 02:00 +09:30; 2026-10-04 02:00 +09:30 becomes 03:00 +10:30.
    const day = cal('day', 'Australia/Adelaide')
    expect(boundsAt(day, '2026-04-05T12:00:00+09:30')).toEqual(span('2026-04-05T00:00:00+10:30', '2026-04-06T00:00:00+09:30'))
    expect(hours(day, '2026-04-05T12:00:00+09:30')).toBe(25)
    expect(boundsAt(day, '2026-10-04T12:00:00+10:30')).toEqual(span('2026-10-04T00:00:00+09:30', '2026-10-05T00:00:00+10:30'))
    expect(hours(day, '2026-10-04T12:00:00+10:30')).toBe(23)
    expect(boundsAt(cal('month', 'Australia/Adelaide'), '2026-10-20T12:00:00+10:30')).toEqual(span('2026-10-01T00:00:00+09:30', '2026-11-01T00:00:00+10:30'))
  })
})

describe('calendarBounds in America/New_York across a change of offset', () => {
  const day = cal('day', 'America/New_York')

  it('2026-03-08, clocks spring forward at 02:00: the day lasts 23 h', () => {
    expect(boundsAt(day, '2026-03-08T12:00:00-04:00')).toEqual(span('2026-03-08T00:00:00-05:00', '2026-03-09T00:00:00-04:00'))
    expect(hours(day, '2026-03-08T12:00:00-04:00')).toBe(23)
    expect(hours(cal('week', 'America/New_York', { weekStarts: 'sunday' }), '2026-03-10T12:00:00-04:00')).toBe(7 * 24 - 1)
  })

  it('2026-11-01, clocks fall back at 02:00: the day lasts 25 h, and 01:30 read twice is in it both times', () => {
    expect(boundsAt(day, '2026-11-01T12:00:00-05:00')).toEqual(span('2026-11-01T00:00:00-04:00', '2026-11-02T00:00:00-05:00'))
    expect(hours(day, '2026-11-01T12:00:00-05:00')).toBe(25)
    expect(boundsAt(day, '2026-11-01T01:30:00-04:00')).toEqual(boundsAt(day, '2026-11-01T12:00:00-05:00'))
    expect(boundsAt(day, '2026-11-01T01:30:00-05:00')).toEqual(boundsAt(day, '2026-11-01T12:00:00-05:00'))
  })
})

describe('calendarBounds at the reset', () => {
  it('the last millisecond before local midnight is in the old period, midnight in the new one', () => {
    for (const p of [cal('day', 'Asia/Kolkata'), cal('week', 'America/New_York', { weekStarts: 'sunday' }), cal('month', 'Asia/Kathmandu', { monthStartsOn: 15 })]) {
      const { startMs, endMs } = calendarBounds(p, Date.parse('2026-03-20T12:00:00Z'))
      expect(calendarBounds(p, endMs - 1)).toEqual({ startMs, endMs })
      expect(calendarBounds(p, endMs).startMs).toBe(endMs)
    }
    const day = cal('day', 'Asia/Kolkata')
    expect(boundsAt(day, '2026-03-11T23:59:59.999+05:30')).toEqual(span('2026-03-11T00:00:00+05:30', '2026-03-12T00:00:00+05:30'))
    expect(boundsAt(day, '2026-03-12T00:00:00+05:30')).toEqual(span('2026-03-12T00:00:00+05:30', '2026-03-13T00:00:00+05:30'))
  })
})

describe('calendarBounds of months and leap days', () => {
  const from28 = cal('month', 'UTC', { monthStartsOn: 28 })

  it('a month starting on the 28th: a date before the 28th is in the period that began the month before', () => {
    expect(boundsAt(from28, '2026-03-10T12:00:00Z')).toEqual(span('2026-02-28T00:00:00Z', '2026-03-28T00:00:00Z'))
    expect(boundsAt(from28, '2027-02-27T23:59:59.999Z')).toEqual(span('2027-01-28T00:00:00Z', '2027-02-28T00:00:00Z'))
  })

  it('a month starting on the 28th: 28 days from February 28 in 2027, 29 in the leap year 2028', () => {
    expect(boundsAt(from28, '2027-02-28T00:00:00Z')).toEqual(span('2027-02-28T00:00:00Z', '2027-03-28T00:00:00Z'))
    expect(boundsAt(from28, '2028-02-29T12:00:00Z')).toEqual(span('2028-02-28T00:00:00Z', '2028-03-28T00:00:00Z'))
    expect(hours(from28, '2028-02-29T12:00:00Z')).toBe(29 * 24)
  })

  it('a month starting on the 28th in Europe/Paris: the one that ends as summer time begins, and the next', () => {
    // 2027-03-28 is the last Sunday of March: 02:00 +01:00 becomes 03:00 +02:00.
    const paris = cal('month', 'Europe/Paris', { monthStartsOn: 28 })
    expect(boundsAt(paris, '2027-03-27T23:59:59.999+01:00')).toEqual(span('2027-02-28T00:00:00+01:00', '2027-03-28T00:00:00+01:00'))
    expect(boundsAt(paris, '2027-03-28T00:00:00+01:00')).toEqual(span('2027-03-28T00:00:00+01:00', '2027-04-28T00:00:00+02:00'))
  })

  it('the leap day 2028-02-29 is a day of its own, and inside the month periods around it', () => {
    expect(boundsAt(cal('day', 'UTC'), '2028-02-29T23:59:59.999Z')).toEqual(span('2028-02-29T00:00:00Z', '2028-03-01T00:00:00Z'))
    expect(boundsAt(cal('day', 'Asia/Kolkata'), '2028-02-29T12:00:00+05:30')).toEqual(span('2028-02-29T00:00:00+05:30', '2028-03-01T00:00:00+05:30'))
    expect(boundsAt(cal('month', 'UTC'), '2028-02-29T12:00:00Z')).toEqual(span('2028-02-01T00:00:00Z', '2028-03-01T00:00:00Z'))
    expect(boundsAt(cal('month', 'UTC', { monthStartsOn: 15 }), '2028-02-29T12:00:00Z')).toEqual(span('2028-02-15T00:00:00Z', '2028-03-15T00:00:00Z'))
  })
})

describe('calendarBounds where local midnight does not exist or reads twice', () => {
  it('America/Santiago, 2026-09-06: 00:00 -04:00 became 01:00 -03:00, so the day, its week and its month begin at 01:00', () => {
    expect(boundsAt(cal('day', 'America/Santiago'), '2026-09-06T12:00:00-03:00')).toEqual(span('2026-09-06T01:00:00-03:00', '2026-09-07T00:00:00-03:00'))
    expect(boundsAt(cal('day', 'America/Santiago'), '2026-09-05T23:59:59.999-04:00')).toEqual(span('2026-09-05T00:00:00-04:00', '2026-09-06T01:00:00-03:00'))
    expect(boundsAt(cal('week', 'America/Santiago', { weekStarts: 'sunday' }), '2026-09-08T12:00:00-03:00')).toEqual(span('2026-09-06T01:00:00-03:00', '2026-09-13T00:00:00-03:00'))
    expect(boundsAt(cal('month', 'America/Santiago', { monthStartsOn: 6 }), '2026-09-20T12:00:00-03:00')).toEqual(span('2026-09-06T01:00:00-03:00', '2026-10-06T00:00:00-03:00'))
  })

  it('America/Sao_Paulo, 2018-11-04 (the rules of the time): the day begins at 01:00 -02:00', () => {
    expect(boundsAt(cal('day', 'America/Sao_Paulo'), '2018-11-04T12:00:00-02:00')).toEqual(span('2018-11-04T01:00:00-02:00', '2018-11-05T00:00:00-02:00'))
  })

  it('America/Havana, 2026-11-01: 01:00 -04:00 became 00:00 -05:00, so the day begins at the first midnight and lasts 25 h', () => {
    const day = cal('day', 'America/Havana')
    const first = span('2026-11-01T00:00:00-04:00', '2026-11-02T00:00:00-05:00')
    expect(boundsAt(day, '2026-11-01T00:30:00-04:00')).toEqual(first)
    expect(boundsAt(day, '2026-11-01T00:30:00-05:00')).toEqual(first)
    expect(boundsAt(day, '2026-11-01T12:00:00-05:00')).toEqual(first)
    expect(boundsAt(day, '2026-10-31T23:59:59.999-04:00')).toEqual(span('2026-10-31T00:00:00-04:00', '2026-11-01T00:00:00-04:00'))
  })

  it('America/St_Johns, 2010-11-07: 00:01 -02:30 became 23:01 -03:30 the day before, and that repeated hour belongs to the Sunday', () => {
    const day = cal('day', 'America/St_Johns')
    const sunday = span('2010-11-07T00:00:00-02:30', '2010-11-08T00:00:00-03:30')
    expect(boundsAt(day, '2010-11-06T23:30:00-02:30')).toEqual(span('2010-11-06T00:00:00-02:30', '2010-11-07T00:00:00-02:30'))
    expect(boundsAt(day, '2010-11-06T23:30:00-03:30')).toEqual(sunday)
    expect(boundsAt(day, '2010-11-07T12:00:00-03:30')).toEqual(sunday)
  })
})

describe('calendarBounds refuses a spec it cannot place', () => {
  it('throws a RangeError for an unknown zone or a month start past the 28th', () => {
    expect(() => calendarBounds(cal('day', 'Nowhere/Land'), 0)).toThrow(RangeError)
    expect(() => calendarBounds(cal('month', 'UTC', { monthStartsOn: 29 }), 0)).toThrow(RangeError)
    expect(() => calendarBounds(cal('month', 'UTC', { monthStartsOn: 0 }), 0)).toThrow(RangeError)
  })
})

/** Zones with whole-hour, half-hour and 45-minute offsets, with and without summer time, and midnights skipped or read twice. */
const ZONES = ['UTC', 'Asia/Kolkata', 'Asia/Kathmandu', 'America/New_York', 'Australia/Adelaide', 'America/Santiago', 'America/Havana', 'Asia/Beirut', 'Pacific/Chatham', 'Europe/Paris']

const START_2020 = Date.parse('2020-01-01T00:00:00Z')
const END_2035 = Date.parse('2036-01-01T00:00:00Z')

/** The local date of instant `ms` in `zone`, as yyyy-MM-dd. */
function dateIn(ms: number, zone: string): string {
  return DateTime.fromMillis(ms, { zone }).toISODate()!
}

/** The date one period after yyyy-MM-dd `date`, by plain UTC date arithmetic. */
function datePlus(date: string, unit: CalendarUnit): string {
  const [y, m, d] = date.split('-').map(Number) as [number, number, number]
  const next = unit === 'month' ? Date.UTC(y, m, d) : Date.UTC(y, m - 1, d + (unit === 'week' ? 7 : 1))
  return new Date(next).toISOString().slice(0, 10)
}

/**
 * Whether `ms` is the first instant of its local day in `zone`: the instant before it reads an
 * earlier date, and it reads 00:00, or, where clocks skipped midnight, 00:00 plus the gap.
 */
function isFirstInstantOfDay(ms: number, zone: string): boolean {
  const at = DateTime.fromMillis(ms, { zone })
  const before = DateTime.fromMillis(ms - 1, { zone })
  if (before.toISODate()! >= at.toISODate()!) return false
  const sinceMidnight = at.hour * HOUR_MS + at.minute * 60_000 + at.second * 1000 + at.millisecond
  const gapMs = (at.offset - before.offset) * 60_000
  return sinceMidnight === 0 || (gapMs > 0 && sinceMidnight === gapMs)
}

/** What every period must satisfy: it holds `now`, begins and ends on the right local days at their first instants, and the periods beside it meet it. */
function checkPeriod(p: CalendarPeriod, now: number): void {
  const { startMs, endMs } = calendarBounds(p, now)
  expect(startMs).toBeLessThanOrEqual(now)
  expect(endMs).toBeGreaterThan(now)
  expect(startMs % 60_000).toBe(0)
  expect(endMs % 60_000).toBe(0)
  expect(isFirstInstantOfDay(startMs, p.timeZone)).toBe(true)
  expect(isFirstInstantOfDay(endMs, p.timeZone)).toBe(true)
  const first = dateIn(startMs, p.timeZone)
  expect(dateIn(endMs, p.timeZone)).toBe(datePlus(first, p.period))
  const start = DateTime.fromMillis(startMs, { zone: p.timeZone })
  if (p.period === 'week') expect(start.weekday).toBe(p.weekStarts === 'monday' ? 1 : 7)
  if (p.period === 'month') expect(start.day).toBe(p.monthStartsOn)
  expect(calendarBounds(p, startMs).startMs).toBe(startMs)
  expect(calendarBounds(p, startMs - 1).endMs).toBe(startMs)
  expect(calendarBounds(p, endMs - 1).endMs).toBe(endMs)
}

const calendarSpec: fc.Arbitrary<CalendarPeriod> = fc.record({
  period: fc.constantFrom('day' as const, 'week' as const, 'month' as const),
  timeZone: fc.constantFrom(...ZONES),
  weekStarts: fc.constantFrom('monday' as const, 'sunday' as const),
  monthStartsOn: fc.integer({ min: 1, max: 28 }),
})

describe('calendarBounds over 2020–2035', () => {
  it('holds now, and begins and ends at the first instants of the right local days, for any instant and spec (property, 1,500 runs)', () => {
    fc.assert(
      fc.property(calendarSpec, fc.integer({ min: START_2020, max: END_2035 - 1 }), (p, now) => checkPeriod(p, now)),
      { numRuns: 1500 },
    )
  })

  it('day after day from 2025 to 2027 in every zone that changes offset, each day begins where the one before ended, on the next local date', () => {
    const changing = ZONES.filter((z) => !['UTC', 'Asia/Kolkata', 'Asia/Kathmandu'].includes(z))
    const until = Date.parse('2028-01-01T00:00:00Z')
    for (const zone of changing) {
      const day = cal('day', zone)
      let period = calendarBounds(day, Date.parse('2025-01-01T12:00:00Z'))
      while (period.endMs < until) {
        const next = calendarBounds(day, period.endMs)
        const where = `${zone}, ${utc(next.startMs)}`
        expect(next.startMs, where).toBe(period.endMs)
        expect(dateIn(next.startMs, zone), where).toBe(datePlus(dateIn(period.startMs, zone), 'day'))
        expect(isFirstInstantOfDay(next.startMs, zone), where).toBe(true)
        period = next
      }
    }
  })
})

describe('rollingFromHour', () => {
  const hourOf = (iso: string): number => Date.parse(iso) / HOUR_MS

  it('holds the current UTC hour and the 24 × days − 1 before it, on the hour and within it', () => {
    for (const now of ['2026-03-10T05:00:00Z', '2026-03-10T05:30:00Z', '2026-03-10T05:59:59.999Z']) {
      const at = Date.parse(now)
      expect(rollingFromHour({ windowDays: 1 }, at)).toBe(hourOf('2026-03-09T06:00:00Z'))
      expect(rollingFromHour({ windowDays: 7 }, at)).toBe(hourOf('2026-03-03T06:00:00Z'))
      expect(rollingFromHour({ windowDays: 30 }, at)).toBe(hourOf('2026-02-08T06:00:00Z'))
      expect(rollingFromHour({ windowDays: 31 }, at)).toBe(hourOf('2026-02-07T06:00:00Z'))
    }
    expect(rollingFromHour({ windowDays: 1 }, Date.parse('2026-03-10T06:00:00Z'))).toBe(hourOf('2026-03-09T07:00:00Z'))
  })

  it('throws a RangeError for a window outside 1 to 31 days', () => {
    expect(() => rollingFromHour({ windowDays: 0 }, 0)).toThrow(RangeError)
    expect(() => rollingFromHour({ windowDays: 32 }, 0)).toThrow(RangeError)
    expect(() => rollingFromHour({ windowDays: 1.5 }, 0)).toThrow(RangeError)
  })
})

describe('periodName and isCalendar', () => {
  it('names a calendar period by its unit and a rolling window by its days', () => {
    expect(periodName(cal('day', 'UTC'))).toBe('day')
    expect(periodName(cal('week', 'UTC'))).toBe('week')
    expect(periodName(cal('month', 'UTC'))).toBe('month')
    expect(periodName({ windowDays: 7 })).toBe('window_7d')
    expect(isCalendar(cal('month', 'UTC'))).toBe(true)
    expect(isCalendar({ windowDays: 30 })).toBe(false)
  })
})

describe('isTimeZone', () => {
  it('accepts tz database names, in any case as Intl does', () => {
    for (const zone of ['UTC', 'Europe/Paris', 'Asia/Kolkata', 'Asia/Calcutta', 'America/Argentina/Buenos_Aires', 'Etc/GMT+5', 'utc', 'europe/paris']) expect(isTimeZone(zone), zone).toBe(true)
  })

  it('refuses the empty string, unknown names and offsets', () => {
    for (const zone of ['', 'Nowhere/Land', 'Mars/Base', 'utc+5', 'UTC+05:00', '+05:00', '-0500', 'Europe/', ' Europe/Paris']) expect(isTimeZone(zone), zone).toBe(false)
  })
})
