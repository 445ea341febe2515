import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { Cluster, Redis } from 'ioredis'
import { NO_REPLICA_WAIT, durably, whileSlotMoves, type ReplicaWait } from '../storage/redis.ts'
import { partitionOf, partitionTag } from '../storage/redis-keys.ts'
import { STREAM_LUA } from './stream-lua.ts'
import { JOURNAL_TABLES, JournalFullError, rowOfUser, type ErasableJournal, type JournalBacklog, type JournalBatch, type JournalEntry, type JournalRow, type JournalSeal, type JournalSource, type JournalTable, type ShippedEntry } from './types.ts'

/**
 * The journal with REDIS_URL: Redis Streams, partitioned by user, so that a
 * user's agents, the user's own state and the partition's stream share one hash tag and the
 * hot state's record script can append in the same atomic step (one slot, Redis Cluster too).
 *
 * Each instance appends to streams of its own, one per partition ({p<n>}:j:<instance>), and
 * ships only those: its batch spans partitions (about one INSERT a second per instance, not
 * one per partition), and its idempotency lives in one key of its own, ship:<instance>: the
 * cursors, the batch under way (its ranges and token, recorded before its INSERT) and its
 * owner. Another instance takes a dead one's journal over by becoming its owner, which
 * fences the dead one out of begin and commit, and by adding it to every partition's fenced
 * set, which keeps a late append of it out; it then ships the batch under way again with its
 * token, and the rest. No timeout has to agree with another for this to hold: a zombie's
 * INSERT carries the token the new owner ships again, or never happens.
 */
export interface RedisJournalOptions {
  redis: Redis | Cluster
  /** The instance whose journal this is: its streams and its ship key are named by it. */
  instance: string
  /** Who works on it: the instance itself, or the one that took it over (default: the instance). */
  caller?: string
  partitions: number
  /** Unshipped rows at most, over all partitions (each stream holds its share). */
  maxRows: number
  prefix?: string
  /**
   * Replicas that must hold a batch's intent before its INSERT: an intent a failover
   * lost would let the batch be shipped again under another token, stored twice.
   */
  replicaWait?: ReplicaWait
  /** How long ownership holds without a renew() (default 10 s). */
  leaseMs?: number
}

/** The journal's owner changed: this instance was taken for dead and must rejoin under a new id. */
export class JournalFencedError extends Error {
  constructor(instance: string) {
    super(`journal of instance ${instance} was taken over by another instance`)
    this.name = 'JournalFencedError'
  }
}

/** An instance started with another partition count than Redis's data was written with. */
export class PartitionCountError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'PartitionCountError'
  }
}

export class RedisJournal implements JournalSource, ErasableJournal {
  readonly #o: Required<RedisJournalOptions>
  readonly #scripts: Scripts
  #backlog: JournalBacklog = { rows: 0, bytes: 0, oldestAt: null }
  #rejoining: Promise<void> | null = null

  constructor(o: RedisJournalOptions) {
    this.#o = { ...o, prefix: o.prefix ?? 'br:', caller: o.caller ?? o.instance, leaseMs: o.leaseMs ?? 10_000, replicaWait: o.replicaWait ?? NO_REPLICA_WAIT }
    if (/[{}]/.test(this.#o.prefix)) throw new Error(`journal prefix must not contain braces: ${this.#o.prefix}`)
    for (const [name, { lua, keys }] of Object.entries(SCRIPTS)) this.#o.redis.defineCommand(name, { lua, numberOfKeys: keys })
    this.#scripts = this.#o.redis as unknown as Scripts
  }

  /** The instance whose journal this is (a new id after rejoin()). */
  get instance(): string {
    return this.#o.instance
  }

  /** How long an owner holds its journal without renewing (ms). */
  get leaseMs(): number {
    return this.#o.leaseMs
  }

  /** Rows one stream (one partition) may hold unshipped: the bound, spread over the partitions. */
  get streamRows(): number {
    return Math.ceil(this.#o.maxRows / this.#o.partitions)
  }

  /**
   * Makes this instance the owner of its journal (at start-up, under a new id). The first
   * instance records the partition count in Redis; one started with another count refuses
   * to run: it would put a user's keys and rows in other slots than the rest.
   */
  async register(): Promise<void> {
    const key = `${this.#o.prefix}partitions`
    await this.#o.redis.set(key, this.#o.partitions, 'NX')
    const recorded = Number(await this.#o.redis.get(key))
    if (recorded !== this.#o.partitions) {
      throw new PartitionCountError(`REDIS_PARTITIONS is ${this.#o.partitions}, and the hot state in Redis was written with ${recorded}: every instance must run with ${recorded} (docs/operations.md, Redis Cluster, says how to change it)`)
    }
    await this.renew()
  }

  /**
   * Keeps the ownership for another lease (and the instance in the registry other instances
   * look at: Redis may have lost both); throws JournalFencedError when it was taken over.
   */
  async renew(): Promise<void> {
    if ((await this.#scripts.burnrateJournalLease(this.#shipKey, this.#o.caller, this.#o.leaseMs, 'renew')) === 'FENCED') {
      throw new JournalFencedError(this.#o.instance)
    }
    await this.#o.redis.sadd(this.#instancesKey, this.#o.instance)
  }

  /**
   * This instance was taken for dead (a pause longer than the lease) and its journal taken
   * over: go on under a new id, with new streams. `fenced` is the id that was refused;
   * callers that meet the same fence at once share one rejoin, and a caller that meets it
   * after the rejoin finds the id changed already.
   */
  async rejoin(fenced: string): Promise<void> {
    if (this.#o.caller !== this.#o.instance) throw new Error('only an instance\'s own journal rejoins')
    if (fenced !== this.#o.instance) return this.#rejoining ?? undefined
    this.#rejoining ??= (async () => {
      const instance = randomUUID()
      this.#o.instance = instance
      this.#o.caller = instance
      this.#backlog = { rows: 0, bytes: 0, oldestAt: null }
      await this.register()
    })().finally(() => (this.#rejoining = null))
    return this.#rejoining
  }

  /**
   * The journals of instances whose lease has run out, taken over by `caller`: each is owned
   * by the caller from now on (which fences the dead one out of its batches) and fenced out
   * of its partitions (no late append), ready to be drained by a shipper like any journal.
   */
  async takeOverDead(): Promise<RedisJournal[]> {
    const taken: RedisJournal[] = []
    for (const instance of await this.#o.redis.smembers(this.#instancesKey)) {
      if (instance === this.#o.instance) continue
      const other = new RedisJournal({ ...this.#o, instance, caller: this.#o.caller })
      if ((await this.#scripts.burnrateJournalLease(other.#shipKey, this.#o.caller, this.#o.leaseMs, 'take')) !== 'HELD') continue
      await Promise.all(Array.from({ length: this.#o.partitions }, (_, p) => this.#o.redis.sadd(other.fencedKey(p), instance)))
      taken.push(other)
    }
    return taken
  }

  /** Removes a drained journal that was taken over (its streams, its ship key). */
  async forget(): Promise<void> {
    if (this.#o.caller === this.#o.instance) throw new Error('an instance forgets only journals it took over')
    await Promise.all(Array.from({ length: this.#o.partitions }, (_, p) => this.#o.redis.unlink(this.streamKey(p))))
    await this.#o.redis.unlink(this.#shipKey)
    await this.#o.redis.srem(this.#instancesKey, this.#o.instance)
  }

  /**
   * The rows of every instance's streams of these users' partitions (other users' rows of a
   * partition included: the caller picks): those not shipped yet, and those of a batch
   * shipped but not yet trimmed, which the caller tells apart by what ClickHouse holds.
   */
  async *rowsOf(userIds: readonly string[]): AsyncGenerator<JournalEntry> {
    const partitions = [...new Set(userIds.map((u) => this.partitionOf(u)))]
    for (const instance of await this.#o.redis.smembers(this.#instancesKey)) {
      const journal = instance === this.#o.instance ? this : new RedisJournal({ ...this.#o, instance, caller: this.#o.caller })
      for (const p of partitions) {
        for (const e of await journal.#range(p, '-', '+')) yield { table: e.table, at: e.at, row: JSON.parse(e.json.toString('utf8')) } as JournalEntry
      }
    }
  }

  /** The partition of a user: its keys and its rows' stream share the tag {p<n>}. */
  partitionOf(userId: string): number {
    return partitionOf(userId, this.#o.partitions)
  }

  streamKey(partition: number): string {
    return `${this.#o.prefix}${partitionTag(partition)}:j:${this.#o.instance}`
  }

  fencedKey(partition: number): string {
    return `${this.#o.prefix}${partitionTag(partition)}:fenced`
  }

  /** As of the shipper's last look (every batch): the streams are appended to by scripts. */
  backlog(): JournalBacklog {
    return this.#backlog
  }

  get backlogFull(): boolean {
    return this.#backlog.rows >= this.#o.maxRows
  }

  /** Appends rows (each to its user's partition); resolves once Redis has them. */
  async append(rows: readonly JournalRow[], now: number): Promise<void> {
    const byPartition = new Map<number, string[]>()
    for (const r of rows) {
      const p = this.partitionOf(r.row.user_id)
      let args = byPartition.get(p)
      if (!args) byPartition.set(p, (args = []))
      args.push(r.table, JSON.stringify(r.row))
    }
    const perStream = Math.ceil(this.#o.maxRows / this.#o.partitions)
    const answers = await Promise.all(
      [...byPartition].map(([p, args]) => whileSlotMoves(() => this.#scripts.burnrateJournalAppend(this.streamKey(p), this.fencedKey(p), this.#o.instance, now, perStream, ...args))),
    )
    if (answers.includes('FENCED')) throw new JournalFencedError(this.#o.instance)
    if (answers.includes('FULL')) throw new JournalFullError({ ...this.#backlog, rows: Math.max(this.#backlog.rows, this.#o.maxRows) })
    this.#backlog = { ...this.#backlog, rows: this.#backlog.rows + rows.length, oldestAt: this.#backlog.oldestAt ?? now }
  }

  async next(maxRows: number): Promise<JournalBatch | null> {
    const ship = await this.#o.redis.hgetall(this.#shipKey)
    if (ship.owner !== undefined && ship.owner !== this.#o.caller) throw new JournalFencedError(this.#o.instance)
    if (ship.intent) {
      const { token, ranges } = JSON.parse(ship.intent) as Intent
      const entries = (await Promise.all(Object.entries(ranges).map(([p, [from, to]]) => this.#range(Number(p), from, to)))).flat()
      await this.#refreshBacklog(entries.reduce<number | null>((min, e) => Math.min(min ?? Infinity, e.at), null))
      return { token, entries }
    }
    const ranges: Ranges = {}
    const entries: ShippedEntry[] = []
    let oldestAt: number | null = null
    for (let p = 0; p < this.#o.partitions && entries.length < maxRows; p++) {
      const got = await this.#read(p, `(${ship[`c${p}`] ?? '0-0'}`, '+', maxRows - entries.length)
      if (got.ids.length === 0) continue
      ranges[p] = [got.ids[0]!, got.ids.at(-1)!]
      oldestAt = Math.min(oldestAt ?? Infinity, got.entries[0]!.at)
      for (const e of got.entries) entries.push(e)
    }
    await this.#refreshBacklog(oldestAt)
    if (entries.length === 0) return null
    const [state, token] = (await durably(this.#o.redis, this.#o.replicaWait, (c) =>
      (c as unknown as Scripts).burnrateJournalBegin(this.#shipKey, this.#o.caller, JSON.stringify(ranges)),
      (reply) => (reply as string[])[0] === 'OK',
    )) as [string, string?]
    if (state === 'FENCED') throw new JournalFencedError(this.#o.instance)
    if (state !== 'OK') throw new Error(`journal ${this.#o.instance}: begin answered ${state}`)
    return { token: token!, entries }
  }

  async commit(batch: JournalBatch): Promise<void> {
    const [state, raw] = (await this.#scripts.burnrateJournalCommit(this.#shipKey, this.#o.caller, batch.token)) as [string, string?]
    if (state === 'FENCED') throw new JournalFencedError(this.#o.instance)
    if (state !== 'OK') throw new Error(`journal ${this.#o.instance}: no batch ${batch.token} under way`)
    // What is shipped goes; a trim lost to a crash is done by the next commit's.
    const ranges = JSON.parse(raw!) as Ranges
    await Promise.all(Object.entries(ranges).map(([p, [, to]]) => this.#o.redis.xtrim(this.streamKey(Number(p)), 'MINID', after(to))))
    const rows = Math.max(0, this.#backlog.rows - batch.entries.length)
    this.#backlog = { rows, bytes: 0, oldestAt: rows === 0 ? null : this.#backlog.oldestAt }
  }

  /**
   * For an erasure: the user's entries not yet shipped in every instance's stream of the
   * user's partition, and whether each instance has shipped its stream past the newest of
   * them since (each instance ships its own; a dead one's, whoever took it over).
   */
  async seal(userId: string): Promise<JournalSeal> {
    const p = this.partitionOf(userId)
    const newest = new Map<RedisJournal, string>()
    let rows = 0
    for (const journal of await this.#journals()) {
      const { ids, entries } = await journal.#read(p, `(${await journal.#cursor(p)}`, '+', Infinity)
      entries.forEach((e, i) => {
        if (!rowOfUser(e.json, userId)) return
        rows++
        newest.set(journal, ids[i]!)
      })
    }
    const shipped = async () => {
      for (const [journal, id] of newest) if (compareIds(await journal.#cursor(p), id) < 0) return false
      return true
    }
    return { rows, shipped }
  }

  /** Writes every instance's stream of the user's partition again without what it has shipped (lua/rewrite.lua). */
  async scrub(userId: string): Promise<void> {
    const p = this.partitionOf(userId)
    for (const journal of await this.#journals()) {
      const cursor = await journal.#cursor(p)
      await whileSlotMoves(() => this.#scripts.burnrateJournalRewrite(journal.streamKey(p), cursor))
    }
  }

  /** The journal of every registered instance, this one's included. */
  async #journals(): Promise<RedisJournal[]> {
    const instances = await this.#o.redis.smembers(this.#instancesKey)
    return instances.map((instance) => (instance === this.#o.instance ? this : new RedisJournal({ ...this.#o, instance, caller: this.#o.caller })))
  }

  /** The id this journal has shipped its stream of a partition up to ('0-0': nothing yet). */
  async #cursor(partition: number): Promise<string> {
    return (await this.#o.redis.hget(this.#shipKey, `c${partition}`)) ?? '0-0'
  }

  get #shipKey(): string {
    return `${this.#o.prefix}ship:${this.#o.instance}`
  }

  get #instancesKey(): string {
    return `${this.#o.prefix}ship:instances`
  }

  async #range(partition: number, from: string, to: string): Promise<ShippedEntry[]> {
    return (await this.#read(partition, from, to, Infinity)).entries
  }

  /**
   * Up to `max` entries of a partition's stream between two ids, read READ_CHUNK at a time:
   * one reply of a whole second's rows (megabytes) held Redis for 16 ms and the event loop
   * for longer while it was parsed (the p99 of POST /events, bench/).
   */
  async #read(partition: number, from: string, to: string, max: number): Promise<{ ids: string[]; entries: ShippedEntry[] }> {
    const ids: string[] = []
    const entries: ShippedEntry[] = []
    for (let start = from; ids.length < max; ) {
      const count = Math.min(READ_CHUNK, max - ids.length)
      const got = await this.#o.redis.xrangeBuffer(this.streamKey(partition), start, to, 'COUNT', count)
      for (const [id, fields] of got) {
        ids.push(id.toString())
        entries.push(entryOf(fields))
      }
      if (got.length < count) break
      start = `(${ids.at(-1)!}`
    }
    return { ids, entries }
  }

  async #refreshBacklog(oldestAt: number | null): Promise<void> {
    const lengths = await Promise.all(Array.from({ length: this.#o.partitions }, (_, p) => this.#o.redis.xlen(this.streamKey(p))))
    const rows = lengths.reduce((s, n) => s + n, 0)
    this.#backlog = { rows, bytes: 0, oldestAt: rows === 0 ? null : oldestAt }
  }
}

const READ_CHUNK = 500

type Ranges = Record<string, [string, string]>
interface Intent {
  token: string
  ranges: Ranges
}

/** A stream entry's fields (t, a, j) as shipped: the JSON bytes as appended. */
function entryOf(fields: Buffer[]): ShippedEntry {
  let table: JournalTable = 'events'
  let at = 0
  let json: Buffer = Buffer.alloc(0)
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i]!.toString()
    if (name === 't') table = fields[i + 1]!.toString() as JournalTable
    else if (name === 'a') at = Number(fields[i + 1]!.toString())
    else if (name === 'j') json = fields[i + 1]!
  }
  if (!JOURNAL_TABLES.includes(table)) throw new Error(`journal entry for an unknown table ${table}`)
  return { table, at, json }
}

/** Orders two stream ids (ms-seq). */
function compareIds(a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt) as [bigint, bigint]
  const [bm, bs] = b.split('-').map(BigInt) as [bigint, bigint]
  return am !== bm ? (am < bm ? -1 : 1) : as === bs ? 0 : as < bs ? -1 : 1
}

/** The stream id right after `id` (XTRIM MINID keeps ids at or above it). */
function after(id: string): string {
  const [ms, seq] = id.split('-')
  return `${ms}-${Number(seq) + 1}`
}

const lua = (name: string): string => readFileSync(new URL(`./lua/${name}.lua`, import.meta.url), 'utf8')
const SCRIPTS = {
  burnrateJournalAppend: { lua: `${STREAM_LUA}\n${lua('append')}`, keys: 2 },
  burnrateJournalBegin: { lua: lua('begin'), keys: 1 },
  burnrateJournalCommit: { lua: lua('commit'), keys: 1 },
  burnrateJournalLease: { lua: lua('lease'), keys: 1 },
  burnrateJournalRewrite: { lua: lua('rewrite'), keys: 1 },
}
type Scripts = Record<keyof typeof SCRIPTS, (...args: Array<string | number>) => Promise<unknown>>
