/**
 * A counter that follows the clock in microseconds and still grows when two calls fall in
 * one millisecond (or the clock steps back): ms * 1000, bumped past the last value.
 * Numbers stay below 2^53 until the year 2255.
 */
export function monotonicMicros(): (nowMs: number) => number {
  let last = 0
  return (nowMs) => (last = Math.max(nowMs * 1000, last + 1))
}

/** Row versions for "newest wins" tables (configs, pause transitions). */
export const nextVersion = monotonicMicros()
