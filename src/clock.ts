/** A clock passed in, so windows and expiry are tested without sleeping. */
export interface Clock {
  now(): number
}

export const systemClock: Clock = { now: () => Date.now() }

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  #ms: number
  constructor(start = Date.UTC(2026, 0, 1, 12, 0, 0)) {
    this.#ms = start
  }
  now(): number {
    return this.#ms
  }
  advance(ms: number): void {
    this.#ms += ms
  }
  set(ms: number): void {
    this.#ms = ms
  }
}

/** An instant as JSON shows it (ISO 8601 UTC), or null for none. */
export function isoOrNull(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString()
}
