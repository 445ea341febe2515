import type { Nano } from '../money.ts'
import { periodKey, type ResolvedMeter } from './meters.ts'
import type { RollingWindow } from './minute-buckets.ts'
import type { PeriodSpend } from './types.ts'

/**
 * What the stored events say a state spent before minute `cut`, for the period budgets it
 * starts counting: the spend per quarter of an hour (every zone in use is offset from UTC by
 * whole quarters, so a calendar period starts on one), flat [quarter, costNano, …], where a
 * quarter is floor(minute / 15). From `cut` on, the hot state's own window has the spend.
 */
export interface PeriodHistory {
  cut: number
  quarters: ArrayLike<number>
}

/** No stored spend: what the hot state's window holds is all there is. */
export const NO_HISTORY: PeriodHistory = Object.freeze({ cut: 0, quarters: Object.freeze([]) as readonly number[] })

interface Tally {
  /** The first minute it counts (its meter's `from` when it last moved). */
  from: number
  spent: Nano
  rolling: boolean
}

/**
 * A state's spend over the periods of its period budgets (meters.ts, the meters with a
 * `period`): per period a running sum since its start, moved when the period moves on; for
 * the rolling windows of days, the spend per UTC hour they still hold, which leaves them an
 * hour at a time. Only a state whose policy has a period budget has one, so a state without
 * costs nothing more.
 *
 * A calendar period that begins anew starts from what the state's 24 h window holds of it:
 * exact, as every event since the period began was counted after its tally last moved, that
 * is, within the window (events are stamped on arrival). A period never moves back: a clock
 * stepped back keeps the sum it has.
 */
export class PeriodTallies {
  // By periodKey(meter): a tally belongs to its spec, not to the meter's name.
  readonly #tallies = new Map<string, Tally>()
  /** Spend per UTC hour since the first hour of the widest rolling window, oldest first, flat [hour, costNano, …]. */
  readonly #hours: number[] = []

  /**
   * Starts the tallies of `meters` that have none: the stored spend before the history's cut
   * and the window's from there on (the window must hold every minute from the cut on).
   * Tallies of periods no longer among the meters go.
   */
  begin(meters: readonly ResolvedMeter[], window: RollingWindow, history: PeriodHistory): void {
    this.#start(meters, window, history, true)
  }

  #start(meters: readonly ResolvedMeter[], window: RollingWindow, history: PeriodHistory, dropOthers: boolean): void {
    const keys = new Set<string>()
    let rollingFrom = Infinity
    let newRolling = false
    for (const m of meters) {
      if (!m.period) continue
      const key = periodKey(m)
      keys.add(key)
      const rolling = 'windowDays' in m.period
      if (rolling) rollingFrom = Math.min(rollingFrom, this.#tallies.get(key)?.from ?? m.from)
      if (this.#tallies.has(key)) continue
      newRolling ||= rolling
      this.#tallies.set(key, { from: m.from, spent: storedSince(history, m.from) + window.spentSince(Math.max(m.from, history.cut)), rolling })
    }
    if (dropOthers) for (const key of this.#tallies.keys()) if (!keys.has(key)) this.#tallies.delete(key)
    if (newRolling) this.#rebuildHours(rollingFrom, window, history)
    this.#dropHoursBefore(rollingFrom)
  }

  /**
   * What `m`'s period holds at the moment `m` was resolved for (its tally moved on there
   * first); `window` is the state's 24 h window, moved on to that moment.
   */
  spent(m: ResolvedMeter, window: RollingWindow): Nano {
    const key = periodKey(m)
    let t = this.#tallies.get(key)
    if (!t) {
      // Not begun with a history (a state that met its policy without one): the window is all it has.
      this.#start([m], window, NO_HISTORY, false)
      t = this.#tallies.get(key)!
    }
    if (t.from < m.from) {
      if (t.rolling) t.spent -= this.#spentBetweenHours(t.from / 60, m.from / 60)
      else t.spent = window.spentSince(m.from)
      t.from = m.from
      if (t.rolling) this.#dropHoursBefore(this.#rollingFrom())
    }
    return t.spent
  }

  /** An event's cost, of `minute` (never older than a period it counts in: events are stamped on arrival). */
  add(minute: number, costNano: Nano): void {
    if (costNano === 0) return
    for (const t of this.#tallies.values()) if (minute >= t.from) t.spent += costNano
    if (!this.#hasRolling()) return
    const hour = Math.floor(minute / 60)
    const n = this.#hours.length
    if (n > 0 && this.#hours[n - 2]! >= hour) this.#hours[n - 1]! += costNano
    else this.#hours.push(hour, costNano)
  }

  /** The spend of the hours in [first, end). */
  #spentBetweenHours(first: number, end: number): Nano {
    let sum = 0
    for (let i = 0; i < this.#hours.length && this.#hours[i]! < end; i += 2) if (this.#hours[i]! >= first) sum += this.#hours[i + 1]!
    return sum
  }

  #hasRolling(): boolean {
    for (const t of this.#tallies.values()) if (t.rolling) return true
    return false
  }

  #rollingFrom(): number {
    let from = Infinity
    for (const t of this.#tallies.values()) if (t.rolling) from = Math.min(from, t.from)
    return from
  }

  #dropHoursBefore(fromMinute: number): void {
    const hour = fromMinute === Infinity ? Infinity : Math.floor(fromMinute / 60)
    let i = 0
    while (i < this.#hours.length && this.#hours[i]! < hour) i += 2
    if (i > 0) this.#hours.splice(0, i)
  }

  /** The hours from `fromMinute` on, from the stored spend before the cut and the window's after it. */
  #rebuildHours(fromMinute: number, window: RollingWindow, history: PeriodHistory): void {
    const byHour = storedHours(history, fromMinute)
    const h = window.hoursSince(Math.max(fromMinute, history.cut))
    for (let i = 0; i < h.length; i += 2) byHour.set(h[i]!, (byHour.get(h[i]!) ?? 0) + h[i + 1]!)
    this.#hours.length = 0
    for (const hour of [...byHour.keys()].sort((a, b) => a - b)) this.#hours.push(hour, byHour.get(hour)!)
  }
}

/** The stored spend (before the history's cut) per UTC hour from minute `from` on (a multiple of 15). */
export function storedHours(history: PeriodHistory, from: number): Map<number, Nano> {
  const byHour = new Map<number, Nano>()
  const q = history.quarters
  for (let i = 0; i < q.length; i += 2) {
    if (q[i]! * 15 < from || q[i]! * 15 >= history.cut) continue
    const hour = Math.floor(q[i]! / 4)
    byHour.set(hour, (byHour.get(hour) ?? 0) + q[i + 1]!)
  }
  return byHour
}

/** Each period of a state without period budgets: none, one list shared by every snapshot. */
export const NO_PERIODS: readonly PeriodSpend[] = Object.freeze([])

/** The stored spend (before the history's cut) from minute `from` on. */
export function storedSince(history: PeriodHistory, from: number): Nano {
  let sum = 0
  const q = history.quarters
  for (let i = 0; i < q.length; i += 2) if (q[i]! * 15 >= from && q[i]! * 15 < history.cut) sum += q[i + 1]!
  return sum
}
