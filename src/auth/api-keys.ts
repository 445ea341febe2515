import { hash, randomBytes, timingSafeEqual } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { ClickHouseClient } from '@clickhouse/client'
import { LRUCache } from 'lru-cache'
import type { Clock } from '../clock.ts'
import { StoreUnavailableError } from '../errors.ts'
import { findKeyByHash, findKeyById, listKeyIds, listKeys, saveKey, type ApiKeyRecord } from '../storage/keys.ts'

/** What a request is allowed to act as, once its key is verified. */
export interface Principal {
  keyId: string
  userId: string
  rateLimit: number | null
}

export interface CreatedKey {
  record: ApiKeyRecord
  /** The secret, shown once: only its hash is stored. */
  key: string
}

const KEY_PREFIX = 'br_'
/** What generateKey() makes: anything else is refused without a look-up. */
const KEY_SHAPE = /^br_([0-9a-f]{12})_[A-Za-z0-9_-]{43}$/

/**
 * A key is `br_<key id>_<secret>`: the id is public (listed, revoked by), the secret is
 * 32 random bytes. With that much entropy a plain SHA-256 is the right hash (no salt or
 * slow KDF needed: there is nothing to brute-force), and a lookup is one indexed read.
 */
export function generateKey(): { keyId: string; key: string } {
  const keyId = randomBytes(6).toString('hex')
  const secret = randomBytes(32).toString('base64url')
  return { keyId, key: `${KEY_PREFIX}${keyId}_${secret}` }
}

export function hashKey(key: string): string {
  return hash('sha256', key, 'hex')
}

/** Keys as a service: create, list and revoke go to ClickHouse; verify is cached. */
export class ApiKeys {
  readonly #client: ClickHouseClient
  readonly #clock: Clock
  readonly #ttlMs: number
  // hash → principal (null for a revoked key) and when it was read. The entry holds the
  // lookup's promise, so concurrent requests with a new key wait for one query instead of
  // sending one each (a fleet starting up presents one key many times at once). Bounded,
  // least recently used out first.
  readonly #cache = new LRUCache<string, CachedKey>({ max: 100_000 })
  // Keys no record has, remembered for a TTL in a cache of their own: a flood of
  // made-up keys evicts other made-up keys, never the keys of real users.
  readonly #unknown: LRUCache<string, true>

  // The ids of every key that exists, so that a key of any other id is refused without a
  // read of its own (a flood of made-up keys costs at most one read of the ids a second).
  readonly #ids: KeyIds

  readonly #onRevoked: ((keyHash: string) => void) | undefined

  /** `onRevoked` tells other instances (Redis pub/sub), which then call revoked(). */
  constructor(client: ClickHouseClient, opts: { clock: Clock; cacheTtlMs: number; onRevoked?: (keyHash: string) => void }) {
    this.#client = client
    this.#clock = opts.clock
    this.#ttlMs = opts.cacheTtlMs
    this.#ids = new KeyIds(() => listKeyIds(client))
    this.#onRevoked = opts.onRevoked
    this.#unknown = new LRUCache<string, true>({ max: 10_000, ttl: Math.max(1, opts.cacheTtlMs), ttlResolution: 0, perf: { now: () => this.#clock.now() } })
  }

  /**
   * A key revoked through another instance (Redis pub/sub): it stops working here at once,
   * without a read of ClickHouse (which may be the very thing that is away).
   */
  revoked(keyHash: string): void {
    this.#cache.set(keyHash, answered(null, this.#clock.now()))
  }

  async create(userId: string, opts: { name?: string; rateLimit?: number | null } = {}): Promise<CreatedKey> {
    const { keyId, key } = generateKey()
    const record: ApiKeyRecord = {
      keyId,
      userId,
      name: opts.name ?? '',
      keyHash: hashKey(key),
      rateLimit: opts.rateLimit ?? null,
      createdAt: new Date(this.#clock.now()).toISOString(),
      revokedAt: null,
    }
    await saveKey(this.#client, record, 1)
    this.#ids.add(keyId)
    this.#unknown.delete(record.keyHash)
    this.#cache.set(record.keyHash, answered(principalOf(record), this.#clock.now()))
    return { record, key }
  }

  list(): Promise<ApiKeyRecord[]> {
    return listKeys(this.#client)
  }

  /** Revokes a key; returns the revoked record, or null when no key has that id. */
  async revoke(keyId: string): Promise<ApiKeyRecord | null> {
    const current = await findKeyById(this.#client, keyId)
    if (!current) return null
    if (current.revokedAt === null) {
      current.revokedAt = new Date(this.#clock.now()).toISOString()
      await saveKey(this.#client, current, 2)
    }
    this.#cache.set(current.keyHash, answered(null, this.#clock.now()))
    this.#onRevoked?.(current.keyHash)
    return current
  }

  /**
   * The principal of a presented key, or null. Answers from a cache that is re-read
   * after `cacheTtlMs`, so a key revoked by a process without Redis (the CLI straight on
   * ClickHouse) stops working within that and the read; revocations through a server are
   * immediate. While a valid key is read again, its requests are answered as before the read,
   * never held behind it: POST /events never waits for ClickHouse for a key it has verified
   * before. When the re-read fails (ClickHouse away), the last answer holds and is read again
   * a TTL later.
   * A key never verified still needs one read; while ClickHouse is away that is a 503.
   * Refused without a read of its own: a key not shaped as generateKey() makes them, one
   * whose id no key has (KeyIds), and one that no record has, remembered for the TTL.
   */
  async verify(key: string): Promise<Principal | null> {
    // KEY_SHAPE's group: the key id.
    const shaped = KEY_SHAPE.exec(key)
    if (!shaped) return null
    const hash = hashKey(key)
    if (this.#unknown.has(hash)) return null
    const now = this.#clock.now()
    const hit = this.#cache.get(hash)
    if (hit && now - hit.at < this.#ttlMs) return hit.answer !== undefined ? hit.answer : hit.principal
    if (hit === undefined && !(await this.#ids.mayHave(shaped[1]!))) return null
    const known = hit?.principal
    // A read that answers nothing to keep leaves the cache, unless a newer read replaced it.
    const drop = (): void => {
      if (this.#cache.get(hash)?.principal === principal) this.#cache.delete(hash)
    }
    const principal = findKeyByHash(this.#client, hash).then(
      (record) => {
        if (record && safeEqual(record.keyHash, hash)) return principalOf(record)
        drop()
        this.#unknown.set(hash, true)
        return null
      },
      (err: unknown) => {
        // Only an outage is ridden out, on the last answer; a defect (a 500) is not hidden
        // behind it. Otherwise not remembered: the next request asks again.
        if (known !== undefined && err instanceof StoreUnavailableError) return known
        drop()
        throw err
      },
    )
    // Concurrent requests with this key share this one read.
    const entry: CachedKey = { principal, at: now }
    principal.then(
      (answer) => void (entry.answer = answer),
      () => undefined,
    )
    this.#cache.set(hash, entry)
    // A key valid at its last read is answered so until this read says otherwise.
    return hit?.answer ?? principal
  }
}

/** A key's principal as the cache holds it: its read's promise, its answer once it has one, and when the read began. */
interface CachedKey {
  principal: Promise<Principal | null>
  at: number
  answer?: Principal | null
}

/** An entry whose answer is known without a read (a key created or revoked here). */
function answered(principal: Principal | null, at: number): CachedKey {
  return { principal: Promise.resolve(principal), at, answer: principal }
}

/**
 * The ids of every key, read whole from ClickHouse. An id it does not have waits for a read
 * that begins after the question, at most one a second, shared by every question meanwhile:
 * a key created anywhere before it was presented is found (never refused), and a flood of
 * made-up keys costs one read a second in all, each of its requests answered within a
 * second. Keys created through this instance join at once.
 */
class KeyIds {
  static readonly MIN_READ_INTERVAL_MS = 1000
  readonly #read: () => Promise<string[]>
  // Key ids are never deleted (a revoked key keeps its record), so reads only add.
  readonly #ids = new Set<string>()
  // False until a read succeeds and after one fails: every id may exist then.
  #readable = false
  // The next read, until it begins; when the last one began (performance.now()).
  #next: Promise<void> | null = null
  #lastReadAt = -Infinity

  constructor(read: () => Promise<string[]>) {
    this.#read = read
  }

  add(keyId: string): void {
    this.#ids.add(keyId)
  }

  /** Whether a key of this id may exist: false only when a read of the ids begun since says not. */
  async mayHave(keyId: string): Promise<boolean> {
    if (this.#ids.has(keyId)) return true
    await this.#readAfterNow()
    return !this.#readable || this.#ids.has(keyId)
  }

  #readAfterNow(): Promise<void> {
    this.#next ??= sleep(Math.max(0, this.#lastReadAt + KeyIds.MIN_READ_INTERVAL_MS - performance.now())).then(() => {
      this.#next = null
      this.#lastReadAt = performance.now()
      return this.#read().then(
        (ids) => {
          for (const id of ids) this.#ids.add(id)
          this.#readable = true
        },
        () => {
          this.#readable = false
        },
      )
    })
    return this.#next
  }
}

function principalOf(record: ApiKeyRecord): Principal | null {
  return record.revokedAt === null ? { keyId: record.keyId, userId: record.userId, rateLimit: record.rateLimit } : null
}

function safeEqual(a: string, b: string): boolean {
  return a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b))
}
