import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { RollingWindow } from '../../src/hot-state/minute-buckets.ts'
import { WINDOW_MINUTES, inWindow } from '../../src/rolling-day.ts'

/**
 * The rolling window keeps its buckets in a ring that grows (src/hot-state/minute-buckets.ts). Over
 * any sequence of events and expiries, its totals must be those of the rule written plainly:
 * a list of minute buckets, an event folded into the newest bucket when it is not newer,
 * buckets dropped from the front once their minute leaves the window; the cost per UTC hour
 * and of the last 60 minutes (the projection's inputs) and since any minute (a meter's
 * window) are sums over that list.
 */
class PlainWindow {
  buckets: Array<{ minute: number; cost: number; calls: number }> = []

  add(minute: number, cost: number, calls: number): void {
    const last = this.buckets.at(-1)
    if (last && last.minute >= minute) {
      last.cost += cost
      last.calls += calls
    } else {
      this.buckets.push({ minute, cost, calls })
    }
  }

  expire(nowMinute: number): void {
    while (this.buckets.length > 0 && !inWindow(this.buckets[0]!.minute, nowMinute)) this.buckets.shift()
  }

  get totalNano(): number {
    return this.buckets.reduce((sum, b) => sum + b.cost, 0)
  }

  get llmCalls(): number {
    return this.buckets.reduce((sum, b) => sum + b.calls, 0)
  }

  /** [hour, cost, …] of the buckets grouped by UTC hour, oldest first. */
  get hours(): number[] {
    const out: number[] = []
    for (const b of this.buckets) {
      const hour = Math.floor(b.minute / 60)
      if (out.at(-2) === hour) out[out.length - 1]! += b.cost
      else out.push(hour, b.cost)
    }
    return out
  }

  spentSince(fromMinute: number): number {
    return this.buckets.filter((b) => b.minute >= fromMinute).reduce((sum, b) => sum + b.cost, 0)
  }
}

const T0 = 29_000_000 // a minute of 2025

type Step = { kind: 'add'; dMinute: number; cost: number; calls: number } | { kind: 'expire'; dNow: number }

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('add' as const),
      // Mostly forward by up to a few minutes, sometimes back (a rebuild, a clock step), sometimes a jump.
      dMinute: fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 0, max: 5 }) }, fc.integer({ min: -30, max: -1 }), fc.integer({ min: 100, max: 2 * WINDOW_MINUTES })),
      cost: fc.integer({ min: 0, max: 2 ** 40 }),
      calls: fc.integer({ min: 0, max: 3 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('expire' as const), dNow: fc.integer({ min: 0, max: 600 }) }) },
)

describe('RollingWindow', () => {
  it('keeps the totals, hourly costs, newest minute, last hour and spend since a minute of the plain rule over any events and expiries (property, 120 runs of up to 3,000 steps)', () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 3000, size: 'max' }), (steps) => {
        const ring = new RollingWindow()
        const plain = new PlainWindow()
        let minute = T0
        let now = T0
        for (const s of steps) {
          if (s.kind === 'add') {
            minute = Math.max(T0, minute + s.dMinute)
            now = Math.max(now, minute)
            ring.add(minute, s.cost, s.calls)
            plain.add(minute, s.cost, s.calls)
          } else {
            now += s.dNow
            ring.expire(now)
            plain.expire(now)
          }
          expect([ring.totalNano, ring.llmCalls, ring.empty]).toEqual([plain.totalNano, plain.llmCalls, plain.buckets.length === 0])
          expect([...ring.hours]).toEqual(plain.hours)
          expect(ring.lastMinute).toBe(plain.buckets.at(-1)?.minute ?? null)
          expect(ring.spentSince(now - 59)).toBe(plain.spentSince(now - 59))
          expect(ring.spentSince(minute - (s.kind === 'add' ? s.calls * 7 : 0))).toBe(plain.spentSince(minute - (s.kind === 'add' ? s.calls * 7 : 0)))
        }
      }),
      { numRuns: 120 },
    )
  })

  it('holds a full day of minutes, wrapped around its ring, and forgets them one by one', () => {
    const w = new RollingWindow()
    // Half a day, half of it expired (the ring's head moves on), then a full day on top.
    for (let m = 0; m < WINDOW_MINUTES / 2; m++) w.add(T0 + m, 1, 1)
    w.expire(T0 + WINDOW_MINUTES + WINDOW_MINUTES / 4 - 1)
    expect(w.llmCalls).toBe(WINDOW_MINUTES / 4)
    const from = T0 + WINDOW_MINUTES
    for (let m = 0; m < WINDOW_MINUTES; m++) w.add(from + m, 2, 1)
    w.expire(from + WINDOW_MINUTES - 1)
    expect([w.totalNano, w.llmCalls]).toEqual([2 * WINDOW_MINUTES, WINDOW_MINUTES])
    for (let m = 0; m < WINDOW_MINUTES; m++) {
      w.expire(from + WINDOW_MINUTES + m)
      expect(w.llmCalls).toBe(WINDOW_MINUTES - m - 1)
    }
    expect(w.empty).toBe(true)
  })
})
