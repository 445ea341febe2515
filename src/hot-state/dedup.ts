import { hash } from 'node:crypto'
import type { Nano } from '../money.ts'
import { inWindow } from '../rolling-day.ts'
import { agentKey } from './agent-ref.ts'

/**
 * The event ids of the window, with the cost each was counted at, in at most 64 bytes per
 * id (a Map of string keys cost over 100 bytes each, gigabytes a day for a fleet
 * sending 1,000 events a second).
 *
 * An id is kept as a 128-bit fingerprint of (user, agent, event id): the first 16 bytes of
 * SHA-256, so two ids share one by chance with probability ~n²/2¹²⁹ (none in practice) and
 * no user can choose an id that collides with another user's. Fingerprints live in
 * open-addressing tables of typed arrays, one per UTC hour of the event's minute: a whole
 * table is dropped once its last minute has left the window, and until then an entry whose
 * own minute has left it is not found, so the window's edge is exact to the minute.
 */
export class EventIdSet {
  readonly #tables = new Map<number, FingerprintTable>()

  /** The cost `fp` was counted at, if its minute is still in the window at `nowMinute`. */
  get(fp: Fingerprint, nowMinute: number): Nano | undefined {
    for (const [hour, table] of this.#tables) {
      const i = table.find(fp)
      if (i < 0) continue
      return inWindow(hour * 60 + table.minuteOffset(i), nowMinute) ? table.cost(i) : undefined
    }
    return undefined
  }

  /** Remembers `fp` (a new id: the caller looked it up first) as counted at `costNano` in `minute`. */
  add(fp: Fingerprint, costNano: Nano, minute: number): void {
    const hour = Math.floor(minute / 60)
    let table = this.#tables.get(hour)
    if (!table) this.#tables.set(hour, (table = new FingerprintTable()))
    table.add(fp, costNano, minute - hour * 60)
  }

  /** Drops the tables whose every minute has left the window. */
  expire(nowMinute: number): void {
    for (const hour of this.#tables.keys()) if (!inWindow(hour * 60 + 59, nowMinute)) this.#tables.delete(hour)
  }

  clear(): void {
    this.#tables.clear()
  }

  get size(): number {
    let n = 0
    for (const t of this.#tables.values()) n += t.size
    return n
  }

  /** Bytes held by the tables (their typed arrays), for the memory bound and metrics. */
  get bytes(): number {
    let n = 0
    for (const t of this.#tables.values()) n += t.bytes
    return n
  }
}

/** 128 bits as four 32-bit words; never all zero (an empty slot is). */
export type Fingerprint = readonly [number, number, number, number]

export function fingerprint(userId: string, agentId: string, eventId: string): Fingerprint {
  return fingerprintOf(hash('sha256', `${agentKey({ userId, agentId })}\0${eventId}`, 'buffer'))
}

/**
 * The fingerprint in the first 16 bytes of a SHA-256 of `user\0agent\0event id` at `at`,
 * computed here or by ClickHouse (storage/events.ts, for a rebuild).
 */
export function fingerprintOf(digest: Buffer, at = 0): Fingerprint {
  // The low bit of the first word is set, so no fingerprint is the empty slot's zero.
  return [(digest.readUInt32LE(at) | 1) >>> 0, digest.readUInt32LE(at + 4), digest.readUInt32LE(at + 8), digest.readUInt32LE(at + 12)]
}

const INITIAL_SLOTS = 64
/** Linear probing stays short up to here with uniformly random keys. */
const MAX_LOAD = 0.8

/** One hour's ids: 16 bytes of fingerprint, 8 of cost and 1 of minute per slot. */
export class FingerprintTable {
  #words = new Uint32Array(INITIAL_SLOTS * 4)
  #costs = new Float64Array(INITIAL_SLOTS)
  #minutes = new Uint8Array(INITIAL_SLOTS)
  #mask = INITIAL_SLOTS - 1
  size = 0

  get bytes(): number {
    return this.#words.byteLength + this.#costs.byteLength + this.#minutes.byteLength
  }

  find(fp: Fingerprint): number {
    const w = this.#words
    for (let i = fp[1] & this.#mask; ; i = (i + 1) & this.#mask) {
      const at = i * 4
      if (w[at] === 0) return -1
      if (w[at] === fp[0] && w[at + 1] === fp[1] && w[at + 2] === fp[2] && w[at + 3] === fp[3]) return i
    }
  }

  cost(i: number): Nano {
    return this.#costs[i]!
  }

  minuteOffset(i: number): number {
    return this.#minutes[i]!
  }

  add(fp: Fingerprint, costNano: Nano, minuteOffset: number): void {
    if ((this.size + 1) / (this.#mask + 1) > MAX_LOAD) this.#grow()
    this.#put(fp[0], fp[1], fp[2], fp[3], costNano, minuteOffset)
    this.size++
  }

  #put(a: number, b: number, c: number, d: number, costNano: Nano, minuteOffset: number): void {
    const w = this.#words
    let i = b & this.#mask
    while (w[i * 4] !== 0) i = (i + 1) & this.#mask
    const at = i * 4
    w[at] = a
    w[at + 1] = b
    w[at + 2] = c
    w[at + 3] = d
    this.#costs[i] = costNano
    this.#minutes[i] = minuteOffset
  }

  #grow(): void {
    const [words, costs, minutes] = [this.#words, this.#costs, this.#minutes]
    const slots = (this.#mask + 1) * 2
    this.#words = new Uint32Array(slots * 4)
    this.#costs = new Float64Array(slots)
    this.#minutes = new Uint8Array(slots)
    this.#mask = slots - 1
    for (let i = 0; i < costs.length; i++) {
      const at = i * 4
      if (words[at] !== 0) this.#put(words[at]!, words[at + 1]!, words[at + 2]!, words[at + 3]!, costs[i]!, minutes[i]!)
    }
  }
}
