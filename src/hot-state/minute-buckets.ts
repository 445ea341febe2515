import type { Nano } from '../money.ts'
import { inWindow } from '../rolling-day.ts'

/** Buckets a new window has room for; it grows by half again when full. */
const INITIAL_BUCKETS = 4

/**
 * One agent's rolling 24 h window: a queue of 1-minute buckets, oldest first, holding only
 * minutes that had events. Adding is O(1); expiry drops buckets from the front, each once,
 * so it is amortised O(1); at most 1440 buckets are held.
 *
 * The buckets live in one ArrayBuffer, used as a ring: a cost (Float64, exact nano-USD up
 * to 2^53) and a minute and a call count (Uint32 each), 16 bytes a bucket. Outside the V8
 * heap, a window of 1,000 buckets is three small objects to the garbage collector instead
 * of three arrays of 1,000 elements to scan and, each time one grows, to copy out of the
 * young generation: with 10,000 agents rebuilt from 10 M events, those arrays were 310 MB
 * of heap and the scavenges after start-up took 30-40 ms.
 */
export class RollingWindow {
  #costs: Float64Array
  /** [minute, llm calls] per bucket. */
  #meta: Uint32Array
  #head = 0
  #size = 0
  /**
   * The buckets' cost per UTC hour, oldest first, flat: [hour, costNano, …], 25 hours at
   * most once expired (the projection reads these, projection.ts). A small array of
   * doubles, which the garbage collector does not scan.
   */
  readonly #hours: number[] = []
  totalNano: Nano = 0
  llmCalls = 0
  // The oldest and newest buckets' minutes, kept beside the buffer: a listing asks every
  // window of a fleet whether anything left it and when its last event was, and reading
  // these fields touches the window object only, not its buffer (10,000 buffers a listing).
  #oldest = 0
  #newest = 0

  constructor() {
    ;[this.#costs, this.#meta] = buckets(INITIAL_BUCKETS)
  }

  add(minute: number, costNano: Nano, llmCalls: number): void {
    this.totalNano += costNano
    this.llmCalls += llmCalls
    if (this.#size > 0) {
      const last = this.#slot(this.#size - 1)
      // The same minute, or out of order (a rebuild or a clock step back): fold into the
      // newest bucket, which expires later than the event would have. Never earlier, so no
      // spend is forgotten early.
      if (this.#meta[2 * last]! >= minute) {
        this.#costs[last]! += costNano
        this.#meta[2 * last + 1]! += llmCalls
        // The newest bucket is in the newest hour.
        this.#hours[this.#hours.length - 1]! += costNano
        return
      }
    }
    if (this.#size === this.#costs.length) this.#grow()
    if (this.#size === 0) this.#oldest = minute
    this.#newest = minute
    const i = this.#slot(this.#size++)
    this.#costs[i] = costNano
    this.#meta[2 * i] = minute
    this.#meta[2 * i + 1] = llmCalls
    const hour = Math.floor(minute / 60)
    if (this.#hours.length > 0 && this.#hours[this.#hours.length - 2] === hour) this.#hours[this.#hours.length - 1]! += costNano
    else this.#hours.push(hour, costNano)
  }

  expire(nowMinute: number): void {
    if (this.#size === 0 || inWindow(this.#oldest, nowMinute)) return
    while (this.#size > 0 && !inWindow(this.#meta[2 * this.#head]!, nowMinute)) {
      const minute = this.#meta[2 * this.#head]!
      this.totalNano -= this.#costs[this.#head]!
      this.llmCalls -= this.#meta[2 * this.#head + 1]!
      this.#hours[1]! -= this.#costs[this.#head]!
      this.#head = this.#slot(1)
      this.#size--
      // The oldest hour goes with its last bucket.
      if (this.#size === 0 || Math.floor(this.#meta[2 * this.#head]! / 60) !== Math.floor(minute / 60)) this.#hours.splice(0, 2)
    }
    if (this.#size > 0) this.#oldest = this.#meta[2 * this.#head]!
  }

  /** The newest bucket's minute; null when there is none. */
  get lastMinute(): number | null {
    return this.#size === 0 ? null : this.#newest
  }

  get empty(): boolean {
    return this.#size === 0
  }

  /**
   * What the buckets of `fromMinute` and later hold: the whole total when the window starts
   * there or later, else the newest buckets, read back from the newest (a meter of a few
   * minutes reads at most that many).
   */
  spentSince(fromMinute: number): Nano {
    if (this.#size === 0 || this.#meta[2 * this.#head]! >= fromMinute) return this.totalNano
    let sum = 0
    for (let n = this.#size - 1; n >= 0; n--) {
      const i = this.#slot(n)
      if (this.#meta[2 * i]! < fromMinute) break
      sum += this.#costs[i]!
    }
    return sum
  }

  /** The cost per UTC hour of the buckets of `fromMinute` and later, oldest first, flat [hour, costNano, …]. */
  hoursSince(fromMinute: number): number[] {
    const out: number[] = []
    for (let n = 0; n < this.#size; n++) {
      const i = this.#slot(n)
      const minute = this.#meta[2 * i]!
      if (minute < fromMinute) continue
      const hour = Math.floor(minute / 60)
      if (out.length > 0 && out[out.length - 2] === hour) out[out.length - 1]! += this.#costs[i]!
      else out.push(hour, this.#costs[i]!)
    }
    return out
  }

  /** The cost per UTC hour, oldest first, flat [hour, costNano, …]: read it before the window changes again. */
  get hours(): readonly number[] {
    return this.#hours
  }

  /** The ring index of the `n`th bucket from the oldest. */
  #slot(n: number): number {
    const i = this.#head + n
    return i < this.#costs.length ? i : i - this.#costs.length
  }

  #grow(): void {
    const costs = this.#costs
    const meta = this.#meta
    const n = this.#size
    const head = this.#head
    ;[this.#costs, this.#meta] = buckets(Math.ceil(costs.length * 1.5))
    this.#head = 0
    // Oldest first from index 0: the part of the ring after the head, then the part before it.
    for (let k = 0; k < n; k++) {
      const from = head + k < costs.length ? head + k : head + k - costs.length
      this.#costs[k] = costs[from]!
      this.#meta[2 * k] = meta[2 * from]!
      this.#meta[2 * k + 1] = meta[2 * from + 1]!
    }
  }
}

/** Room for `n` buckets in one buffer: their costs, then their [minute, llm calls]. */
function buckets(n: number): [Float64Array, Uint32Array] {
  const buffer = new ArrayBuffer(n * 16)
  return [new Float64Array(buffer, 0, n), new Uint32Array(buffer, n * 8, n * 2)]
}
