import type { Nano } from '../money.ts'
import { MINUTE_MS, WINDOW_MINUTES } from '../rolling-day.ts'

/** What the hot state keeps of a window's spend that the projection reads: a few numbers, never the events. */
export interface Spend {
  totalNano: Nano
  /** Spent in the last 60 minutes: the current minute and the 59 before it. */
  lastHourNano: Nano
  /** The window's cost per UTC hour, oldest first, flat: [hour, costNano, hour, costNano, …]. */
  hours: ArrayLike<number>
}

/** The minutes of the tally the projection reads (Spend.lastHourNano). */
export const LAST_HOUR_MINUTES = 60

const HOUR_MS = 60 * MINUTE_MS
const WINDOW_MS = WINDOW_MINUTES * MINUTE_MS

/**
 * When the rolling 24 h total reaches `thresholdNano` if spending goes on at the rate of
 * the last 60 minutes: epoch ms, `now` when the total is there already, null
 * when it never would. The same rule for an agent and for a fleet, in both hot states.
 *
 * What leaves the window is taken into account per UTC hour: an hour's cost is taken to
 * leave when its last minute does (24 h after that minute ends). Costs really leave minute
 * by minute, earlier or at that time, so the projection is never later than one exact to
 * the minute: a warning may come early, never late. It reads at most 25 hours, whatever the
 * traffic.
 *
 * The total at time t is: total + rate × (t − now) − what left by t. Between two hours
 * leaving it grows linearly; the first time it reaches the threshold is found hour by hour.
 * From 24 h on, the projected spend itself leaves as it came and the total stays at
 * rate × 24 h: if the threshold is not reached by then, it never is.
 */
export function exhaustionAt(spend: Spend, thresholdNano: Nano, now: number): number | null {
  if (spend.totalNano >= thresholdNano) return now
  if (spend.lastHourNano <= 0) return null
  // Multiplied before dividing: whole hours and minutes come out exact.
  const at = (toGo: Nano) => now + (toGo * HOUR_MS) / spend.lastHourNano
  const horizon = now + WINDOW_MS
  // What leaves the window only puts the moment off: reached no sooner than this, it is never
  // reached within the horizon, and the hours need not be read (lua/state.lua exhaustion()).
  if (at(thresholdNano - spend.totalNano) >= horizon) return null
  let left = 0
  for (let i = 0; i < spend.hours.length; i += 2) {
    // The hour's last minute (60 h + 59) leaves as minute 60 h + 59 + 1440 begins (rolling-day.ts inWindow).
    const leaves = (spend.hours[i]! * 60 + 59 + WINDOW_MINUTES) * MINUTE_MS
    if (leaves <= now) continue
    const reached = at(thresholdNano - spend.totalNano + left)
    if (reached < leaves) return reached < horizon ? Math.ceil(reached) : null
    left += spend.hours[i + 1]!
  }
  const reached = at(thresholdNano - spend.totalNano + left)
  return reached < horizon ? Math.ceil(reached) : null
}

/**
 * When a period budget's spend reaches its limit if spending goes on at the rate of the last
 * 60 minutes: `now` when it is there already, null when not before the period ends (a
 * calendar period's end; a rolling window's length from now). What leaves a rolling window
 * meanwhile is not taken off: the moment may come early, never late.
 */
export function periodExhaustionAt(m: { limitNano: Nano; endsAt?: number; period?: { windowDays: number } | object }, spentNano: Nano, lastHourNano: Nano, now: number): number | null {
  if (spentNano >= m.limitNano) return now
  if (lastHourNano <= 0) return null
  const reached = now + ((m.limitNano - spentNano) * HOUR_MS) / lastHourNano
  const end = m.endsAt ?? now + (m.period && 'windowDays' in m.period ? m.period.windowDays * 24 * HOUR_MS : WINDOW_MS)
  return reached < end ? Math.ceil(reached) : null
}
