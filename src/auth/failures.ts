import { LRUCache } from 'lru-cache'
import type { Clock } from '../clock.ts'

const WINDOW_MS = 60_000

/**
 * Failed authentications per client address: past `perMinute` in a fixed minute,
 * the address is answered 429 for the rest of that minute, before any key look-up, so a
 * flood of made-up keys costs no ClickHouse read. Per instance, in a bounded LRU (the
 * addresses seen last are kept); a key already verified is never refused by it (app.ts).
 */
export class AuthFailures {
  readonly #perMinute: number
  readonly #clock: Clock
  readonly #byAddress = new LRUCache<string, { count: number; resetAt: number }>({ max: 100_000 })

  constructor(perMinute: number, clock: Clock) {
    this.#perMinute = perMinute
    this.#clock = clock
  }

  /** Seconds until the address may try again, or null when it may now. */
  retryAfterSeconds(address: string): number | null {
    const entry = this.#byAddress.get(address)
    const now = this.#clock.now()
    if (!entry || entry.resetAt <= now || entry.count < this.#perMinute) return null
    return Math.max(1, Math.ceil((entry.resetAt - now) / 1000))
  }

  record(address: string): void {
    const now = this.#clock.now()
    const entry = this.#byAddress.get(address)
    if (!entry || entry.resetAt <= now) this.#byAddress.set(address, { count: 1, resetAt: now + WINDOW_MS })
    else entry.count++
  }
}
