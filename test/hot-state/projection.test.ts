import { describe, expect, it } from 'vitest'
import { exhaustionAt, type Spend } from '../../src/hot-state/projection.ts'

/**
 * Projected exhaustion against values worked out by hand. The clock: `now` is
 * 30 s into the UTC hour HN (an hour index: epoch ms / 3,600,000).
 */
const USD = 1_000_000_000
const MIN = 60_000
const HOUR = 60 * MIN
const HN = 490_000 // an hour of 2025
const now = HN * HOUR + 30_000

const spend = (totalUsd: number, lastHourUsd: number, hours: Array<[hour: number, usd: number]>): Spend => ({
  totalNano: totalUsd * USD,
  lastHourNano: lastHourUsd * USD,
  hours: hours.flatMap(([h, usd]) => [h, usd * USD]),
})

describe('exhaustionAt', () => {
  it('is null when nothing was spent in the last hour, whatever is left', () => {
    expect(exhaustionAt(spend(9.99, 0, [[HN - 5, 9.99]]), 10 * USD, now)).toBeNull()
  })

  it('is now when the total is at or over the threshold', () => {
    expect(exhaustionAt(spend(10, 0, [[HN, 10]]), 10 * USD, now)).toBe(now)
    expect(exhaustionAt(spend(12, 1, [[HN, 12]]), 10 * USD, now)).toBe(now)
  })

  it('goes on at the last hour\'s rate when nothing leaves the window first', () => {
    // 4 USD, all of it in the last hour: 1 USD/h more reaches 10 USD in 6 h.
    expect(exhaustionAt(spend(4, 1, [[HN - 1, 3], [HN, 1]]), 10 * USD, now)).toBe(now + 6 * HOUR)
  })

  it('is reached before an old hour leaves', () => {
    // 9 USD (5 of them 23 h old, leaving at HN + 1 h 59 min): 1 USD/h reaches 10 in 1 h.
    expect(exhaustionAt(spend(9, 1, [[HN - 23, 5], [HN - 1, 3], [HN, 1]]), 10 * USD, now)).toBe(now + HOUR)
  })

  it('waits for what leaves the window', () => {
    // 6 USD; 5 of them (hour HN - 23) leave at HN + 1 h 59 min, before 10 USD is reached (4 h
    // at 1 USD/h). From then on 10 - 1 = 9 USD to go: reached 9 h from now.
    const s = spend(6, 1, [[HN - 23, 5], [HN, 1]])
    expect(exhaustionAt(s, 10 * USD, now)).toBe(now + 9 * HOUR)
    // The hour is taken to leave at its last minute: 24 h after minute 59 of hour HN - 23.
    const leaves = ((HN - 23) * 60 + 59 + 1440) * MIN
    expect(leaves).toBe(HN * HOUR + HOUR + 59 * MIN)
  })

  it('is null when the rate would never reach the threshold within a day', () => {
    // 0.1 USD/h is 2.4 USD a day: under 10 USD even with the 1 USD already spent.
    expect(exhaustionAt(spend(1, 0.1, [[HN, 1]]), 10 * USD, now)).toBeNull()
    // 0.4 USD/h reaches 10 - 1 = 9 more USD in 22.5 h, within the day.
    expect(exhaustionAt(spend(1, 0.4, [[HN, 1]]), 10 * USD, now)).toBe(now + 22.5 * HOUR)
  })

  it('is null when what leaves keeps the total from ever getting there', () => {
    // 9.5 USD, 9 of them leaving within two hours, 0.3 USD/h: 0.5 USD to go takes 1 h 40 min,
    // but the 9 USD leave at 1 h 59 min... reached first. With 0.2 USD/h (2 h 30 min) it is not,
    // and afterwards 9 USD more to go at 0.2 USD/h is 45 h: never within the day.
    expect(exhaustionAt(spend(9.5, 0.3, [[HN - 23, 9], [HN, 0.5]]), 10 * USD, now)).toBe(now + 100 * MIN)
    expect(exhaustionAt(spend(9.5, 0.2, [[HN - 23, 9], [HN, 0.5]]), 10 * USD, now)).toBeNull()
  })
})
