/**
 * The rolling 24 h window, kept in 1-minute buckets (its edge exact to the minute): an event
 * counts while it is in the current minute or one of the 1439 minutes before it. The hot
 * state and every ClickHouse read use these same edges, so their totals agree.
 */
export const MINUTE_MS = 60_000
export const WINDOW_MINUTES = 24 * 60

export function minuteOf(ms: number): number {
  return Math.floor(ms / MINUTE_MS)
}

/** First millisecond inside the window that ends at `now`. */
export function windowStartMs(now: number): number {
  return (minuteOf(now) - WINDOW_MINUTES + 1) * MINUTE_MS
}

/** Whether an event of minute `minute` still counts at minute `nowMinute`. */
export function inWindow(minute: number, nowMinute: number): boolean {
  return minute > nowMinute - WINDOW_MINUTES
}
