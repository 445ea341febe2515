import type { Nano } from '../money.ts'
import { inWindow } from '../window.ts'

/**
 * One agent's rolling 24 h window: a queue of 1-minute buckets, oldest first, holding only
 * minutes that had events. Adding is O(1); expiry drops buckets from the front, each once,
 * so it is amortised O(1); memory is bounded by 1440 buckets.
 */
export class RollingWindow {
  #minutes: number[] = []
  #costs: Nano[] = []
  #calls: number[] = []
  #head = 0
  totalNano: Nano = 0
  llmCalls = 0

  add(minute: number, costNano: Nano, llmCalls: number): void {
    const last = this.#minutes.length - 1
    if (last >= this.#head && this.#minutes[last] === minute) {
      this.#costs[last]! += costNano
      this.#calls[last]! += llmCalls
    } else if (last >= this.#head && this.#minutes[last]! > minute) {
      // Out of order (a rebuild or a clock step back): fold into the newest bucket, which
      // expires later than the event would have. Never earlier, so no spend is forgotten early.
      this.#costs[last]! += costNano
      this.#calls[last]! += llmCalls
    } else {
      this.#minutes.push(minute)
      this.#costs.push(costNano)
      this.#calls.push(llmCalls)
    }
    this.totalNano += costNano
    this.llmCalls += llmCalls
  }

  expire(nowMinute: number): void {
    while (this.#head < this.#minutes.length && !inWindow(this.#minutes[this.#head]!, nowMinute)) {
      this.totalNano -= this.#costs[this.#head]!
      this.llmCalls -= this.#calls[this.#head]!
      this.#head++
    }
    if (this.#head > 64 && this.#head * 2 > this.#minutes.length) {
      this.#minutes = this.#minutes.slice(this.#head)
      this.#costs = this.#costs.slice(this.#head)
      this.#calls = this.#calls.slice(this.#head)
      this.#head = 0
    }
  }

  get empty(): boolean {
    return this.#head === this.#minutes.length
  }
}
