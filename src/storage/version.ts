let last = 0

/**
 * A row version for "newest wins" tables: the time in microsecond units, bumped so that it
 * grows within this process even for two writes in one millisecond (or a clock that
 * steps back). Across instances, writes of the same key a millisecond apart still order.
 */
export function nextVersion(nowMs: number): number {
  last = Math.max(nowMs * 1000, last + 1)
  return last
}
