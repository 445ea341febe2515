import { readFileSync } from 'node:fs'
import type { Cluster, Redis } from 'ioredis'
import { StoreUnavailableError } from '../errors.ts'
import { redisFailure } from '../storage/failures.ts'
import { agentKeyId, DEFAULT_PARTITIONS, partitionOf, partitionTag } from '../storage/redis-keys.ts'
import { nextVersion } from '../storage/version.ts'
import { minuteOf } from '../window.ts'
import {
  DEFAULT_POLICY,
  type AgentLoad,
  type AgentPolicy,
  type AgentLoader,
  type AgentRef,
  type AgentSnapshot,
  type Claim,
  type EventRef,
  type HotState,
  type PauseReason,
  type RecordInput,
  type RecordResult,
  type Reservation,
  type RestoreData,
  type Transition,
  type TransitionReason,
} from './types.ts'

/**
 * The hot state in Redis, shared by every burnrate instance (DECISIONS.md "Architecture").
 * Each operation is one Lua script over one agent's keys, atomic, constant time per event
 * and in one Redis Cluster slot: the keys of an agent carry its user's partition tag {p<n>}
 * (storage/redis-keys.ts), which the journal streams of that user's rows carry too.
 * Redis is derived state: a script finding the agent not loaded answers NEEDS_LOAD, and the
 * agent is installed from ClickHouse (the loader) by a script that installs only once.
 * The rules are memory.ts's, branch for branch (lua/lib.lua mirrors policy.ts).
 */
export class RedisHotState implements HotState {
  readonly #redis: Redis | Cluster
  readonly #scripts: Scripts
  readonly #prefix: string
  readonly #loader: AgentLoader
  // One loader call in flight per agent in this process; other instances are kept from
  // double counting by load.lua, which installs only into an agent that is not loaded.
  readonly #loading = new Map<string, Promise<void>>()

  readonly #staleMs: number
  // A sorted set of the claims not yet recorded, by time (one key: it is small, entries
  // live from claim to record, normally milliseconds).
  readonly #claims: string

  readonly #partitions: number

  /** reserveStaleMs: how long another instance's claim on an event id holds (reserve()). */
  constructor(opts: { redis: Redis | Cluster; prefix?: string; loader: AgentLoader; reserveStaleMs?: number; partitions?: number }) {
    const prefix = opts.prefix ?? 'br:'
    this.#staleMs = opts.reserveStaleMs ?? RESERVE_STALE_MS
    this.#partitions = opts.partitions ?? DEFAULT_PARTITIONS
    // Redis Cluster hashes the first {…} of a key: the prefix must not hold one.
    if (/[{}]/.test(prefix)) throw new Error(`hot-state prefix must not contain braces: ${prefix}`)
    this.#redis = opts.redis
    this.#prefix = prefix
    this.#claims = `${prefix}claims`
    this.#loader = opts.loader
    for (const [name, { lua, keys }] of Object.entries(SCRIPTS)) {
      // load.lua takes a variable number of keys (one per seen event): the caller passes the count.
      opts.redis.defineCommand(name, { lua, ...(keys === null ? {} : { numberOfKeys: keys }) })
    }
    this.#scripts = opts.redis as unknown as Scripts
  }

  async reserve(events: readonly EventRef[], token: string, now: number): Promise<Reservation[]> {
    return Promise.all(
      events.map(async (e) => {
        const k = this.#keys(e)
        // The claim is indexed by time, so a sweeper finds the claims of an instance that
        // died. Sent with the claim, in the same round trip: an entry for an event that turns
        // out done, or busy elsewhere, only costs the sweeper a look (it counts nothing twice).
        const [[state, cost]] = (await Promise.all([
          this.#run(e, now, () => this.#scripts.burnrateReserve(k.a, k.w, k.m, k.e(e.eventId), now, token, this.#staleMs)),
          unavailableOnError(() => this.#redis.zadd(this.#claims, now, claimMember(e))),
        ])) as [[Reservation['state'], string?], unknown]
        return state === 'done' ? { state, costNano: Number(cost) } : { state }
      }),
    )
  }

  async record(events: readonly RecordInput[], now: number): Promise<RecordResult[]> {
    // Issued together, so a batch costs one round trip; one connection answers in order.
    return Promise.all(
      events.map(async (e) => {
        const k = this.#keys(e)
        const args = [now, AGENT_TTL_MS, String(e.costNano), e.llmCall ? 1 : 0, minuteOf(e.at)] as const
        const reply = (await this.#run(e, now, () => this.#scripts.burnrateRecord(k.a, k.w, k.m, k.e(e.eventId), ...args))) as RecordReply
        // Not waited for: an entry left behind is settled by the sweeper as already counted.
        this.#redis.zrem(this.#claims, claimMember(e)).catch(() => {})
        const [counted, total, paused, ...transitions] = reply
        return {
          counted: counted === 1,
          // This path records only events it stored (a repeat was answered by reserve()).
          costNano: e.costNano,
          totalNano: Number(total),
          paused: paused === 1,
          transitions: transitions.map((t) => transitionOf(e, now, t)),
        }
      }),
    )
  }

  async staleClaims(before: number, limit: number): Promise<Claim[]> {
    const flat = await unavailableOnError(() => this.#redis.zrangebyscore(this.#claims, '-inf', `(${before}`, 'WITHSCORES', 'LIMIT', 0, limit))
    const claims: Claim[] = []
    for (let i = 0; i < flat.length; i += 2) {
      const [userId, agentId, eventId] = JSON.parse(flat[i]!) as [string, string, string]
      claims.push({ userId, agentId, eventId, at: Number(flat[i + 1]) })
    }
    return claims
  }

  async dropClaim(claim: Claim): Promise<void> {
    await unavailableOnError(async () => {
      await this.#scripts.burnrateDropClaim(this.#keys(claim).e(claim.eventId), claim.at)
      await this.#redis.zrem(this.#claims, claimMember(claim))
    })
  }

  async get(ref: AgentRef, now: number): Promise<{ snapshot: AgentSnapshot; transition: Transition | null }> {
    const k = this.#keys(ref)
    const [s, t] = (await this.#run(ref, now, () => this.#scripts.burnrateGet(k.a, k.w, k.m, now))) as GetReply
    const [total, calls, paused, reason, override, threshold, autoResume, webhook, configured, active] = s
    return {
      snapshot: {
        active: active === 1,
        totalNano: Number(total),
        llmCalls: Number(calls),
        pause: { paused: paused === 1, reason: reason === '' ? null : (reason as PauseReason), override: override === 1 },
        policy: { thresholdNano: Number(threshold), autoResume: autoResume === 1, webhookUrl: webhook },
        configured: configured === 1,
      },
      transition: t ? transitionOf(ref, now, t) : null,
    }
  }

  async activeAgents(): Promise<null> {
    return null
  }

  async getMany(userId: string, agentIds: readonly string[], now: number) {
    // Issued together: one round trip for the listing.
    const results = await Promise.all(agentIds.map((agentId) => this.get({ userId, agentId }, now)))
    return {
      snapshots: results.map((r) => r.snapshot),
      transitions: results.flatMap((r) => (r.transition ? [r.transition] : [])),
    }
  }

  async setPolicy(ref: AgentRef, policy: AgentPolicy, now: number): Promise<Transition | null> {
    const k = this.#keys(ref)
    const args = [now, AGENT_TTL_MS, String(policy.thresholdNano), policy.autoResume ? 1 : 0, policy.webhookUrl ?? ''] as const
    const [t] = (await this.#run(ref, now, () => this.#scripts.burnrateSetPolicy(k.a, k.w, k.m, ...args))) as [TransitionReply | null]
    return t ? transitionOf(ref, now, t) : null
  }

  async setPaused(ref: AgentRef, paused: boolean, now: number): Promise<Transition | null> {
    const k = this.#keys(ref)
    const [t] = (await this.#run(ref, now, () => this.#scripts.burnrateSetPaused(k.a, k.w, k.m, now, AGENT_TTL_MS, paused ? 1 : 0))) as [
      TransitionReply | null,
    ]
    return t ? transitionOf(ref, now, t) : null
  }

  /**
   * Replaces the hot state with a rebuild (memory.ts restore()): every hot-state key under
   * the prefix goes, then each agent of `data` is installed and the rules run with mayPause.
   * Agents absent from `data` are loaded again on demand, from ClickHouse.
   */
  async restore(data: RestoreData, now: number): Promise<Transition[]> {
    await this.#deleteAll()
    const loads = new Map<string, { ref: AgentRef; load: AgentLoad }>()
    const entry = (r: AgentRef): AgentLoad => {
      const id = agentId(r)
      let e = loads.get(id)
      if (!e) {
        e = { ref: { userId: r.userId, agentId: r.agentId }, load: { minutes: [], seen: [], policy: null, pause: null } }
        loads.set(id, e)
      }
      return e.load
    }
    for (const p of data.policies) entry(p).policy = p.policy
    for (const p of data.pauses) entry(p).pause = p.pause
    for (const m of data.minutes) entry(m).minutes.push(m)
    for (const s of data.seen) entry(s).seen.push(s)
    const transitions = await Promise.all([...loads.values()].map(({ ref, load }) => this.#install(ref, load, now, true)))
    return transitions.filter((t): t is Transition => t !== null)
  }

  async ping(): Promise<void> {
    await this.#redis.ping()
  }

  /** The client belongs to the caller, who quits it. */
  async close(): Promise<void> {}

  /** Runs an agent's script; if the agent is not loaded, loads it and runs the script once more. */
  async #run(ref: AgentRef, now: number, call: () => Promise<unknown>): Promise<unknown> {
    const first = await unavailableOnError(call)
    if (first !== NEEDS_LOAD) return first
    await this.#ensureLoaded(ref, now) // ClickHouse's failures are classified as ClickHouse's
    const second = await unavailableOnError(call)
    // Only an agent expiring or flushed between the load and the retry gets here.
    if (second === NEEDS_LOAD) throw new StoreUnavailableError('Redis', `hot state for agent ${ref.agentId} was lost while loading it`)
    return second
  }

  /**
   * One load per agent in flight. Every script that answered NEEDS_LOAD was sent before the
   * load's install on the same connection (one node per slot), which Redis answers in
   * order: they all find the load still in flight and wait for it, never start another.
   */
  #ensureLoaded(ref: AgentRef, now: number): Promise<void> {
    const id = agentId(ref)
    let loading = this.#loading.get(id)
    if (!loading) {
      loading = this.#loader(ref, now)
        .then(async (load) => {
          await unavailableOnError(() => this.#install(ref, load, now, false))
        })
        .finally(() => this.#loading.delete(id))
      this.#loading.set(id, loading)
    }
    return loading
  }

  async #install(ref: AgentRef, load: AgentLoad, now: number, rebuild: boolean): Promise<Transition | null> {
    const k = this.#keys(ref)
    const policy = load.policy ?? DEFAULT_POLICY
    const pause = load.pause ?? { paused: false, reason: null, override: false }
    const payload = {
      minutes: [...load.minutes].sort((x, y) => x.minute - y.minute).map((m) => [String(m.minute), String(m.costNano), String(m.llmCalls)]),
      seen: load.seen.map((s) => [String(s.costNano), String(s.minute)]),
      policy: {
        threshold: String(policy.thresholdNano),
        auto_resume: policy.autoResume ? '1' : '0',
        webhook: policy.webhookUrl ?? false,
        configured: load.policy ? '1' : '0',
      },
      pause: { paused: pause.paused ? '1' : '0', reason: pause.reason ?? '', override: pause.override ? '1' : '0' },
    }
    const keys = [k.a, k.w, k.m, ...load.seen.map((s) => k.e(s.eventId))]
    // An array, not spread: ioredis flattens it, and a busy agent's seen ids can be many.
    const [, t] = (await this.#scripts.burnrateLoad(keys.length, keys, now, AGENT_TTL_MS, rebuild ? 1 : 0, JSON.stringify(payload))) as [
      number,
      TransitionReply | null,
    ]
    return t ? transitionOf(ref, now, t) : null
  }

  #keys(ref: AgentRef) {
    // The user's partition tag: the agent's keys share a slot with every key of its user,
    // the journal streams its rows go to included (redis-keys.ts).
    const base = `${this.#prefix}${partitionTag(partitionOf(ref.userId, this.#partitions))}:hs:${agentKeyId(ref.userId, ref.agentId)}`
    return { a: `${base}:a`, w: `${base}:w`, m: `${base}:m`, e: (eventId: string) => `${base}:e:${eventId}` }
  }

  /** Deletes every hot-state key under the prefix, on every master of a cluster. */
  async #deleteAll(): Promise<void> {
    const nodes = this.#redis.isCluster ? (this.#redis as Cluster).nodes('master') : [this.#redis as Redis]
    // SCAN sees keys with the client's own keyPrefix, which UNLINK adds again.
    const clientPrefix = this.#redis.options.keyPrefix ?? ''
    const match = `${(clientPrefix + this.#prefix).replace(/[*?[\]\\]/g, '\\$&')}{p*}:hs:*`
    for (const node of nodes) {
      let cursor = '0'
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', match, 'COUNT', 1000)
        cursor = next
        // One key per command: keys of different agents may live in different slots.
        await Promise.all(keys.map((key) => this.#redis.unlink(key.slice(clientPrefix.length))))
      } while (cursor !== '0')
    }
  }
}

/** Keys live 25 h after an agent's last write: longer than the window, so only idle agents expire. */
const AGENT_TTL_MS = 25 * 60 * 60 * 1000

/**
 * A claim on an event id older than this is taken over. Longer than an insert normally
 * takes (or the event would be stored twice), short enough that a client retrying after an
 * instance crashed gets through soon.
 */
const RESERVE_STALE_MS = 5000

const NEEDS_LOAD = 'NEEDS_LOAD'

// Read once at start-up; lib.lua holds the helpers every script shares (Redis 7 scripts
// cannot import), so the rules exist once in Lua.
const lua = (name: string): string => readFileSync(new URL(`./lua/${name}.lua`, import.meta.url), 'utf8')
const LIB = lua('lib')
const script = (name: string, keys: number | null) => ({ lua: `${LIB}\n${lua(name)}`, keys })
const standalone = (name: string, keys: number) => ({ lua: lua(name), keys })
const SCRIPTS = {
  burnrateRecord: script('record', 4),
  burnrateGet: script('get', 3),
  burnrateSetPolicy: script('set_policy', 3),
  burnrateSetPaused: script('set_paused', 3),
  burnrateReserve: script('reserve', 4),
  burnrateLoad: script('load', null),
  burnrateDropClaim: standalone('drop_claim', 1),
}

type Arg = string | number | string[]
/** The commands defineCommand adds to the client (ioredis calls them by EVALSHA, EVAL on NOSCRIPT). */
type Scripts = Record<keyof typeof SCRIPTS, (...args: Arg[]) => Promise<unknown>>

/** {reason, paused, override, total, threshold, webhook} from lib.lua transition(). */
type TransitionReply = [TransitionReason, number, number, string, string, string | null]
type RecordReply = [number, string, number, ...TransitionReply[]]
type GetReply = [[string, string, number, string, number, string, number, string | null, number, number], TransitionReply | null]

function claimMember(e: EventRef): string {
  return JSON.stringify([e.userId, e.agentId, e.eventId])
}

function agentId(ref: AgentRef): string {
  return `${ref.userId}\0${ref.agentId}`
}

function transitionOf(ref: AgentRef, now: number, t: TransitionReply): Transition {
  const [reason, paused, override, total, threshold, webhook] = t
  return {
    userId: ref.userId,
    agentId: ref.agentId,
    at: now,
    version: nextVersion(now),
    paused: paused === 1,
    reason,
    override: override === 1,
    totalNano: Number(total),
    thresholdNano: Number(threshold),
    webhookUrl: webhook ?? null,
  }
}

/** Redis not answering is a store outage (503 naming Redis); an error reply about the script itself is a defect (500). */
async function unavailableOnError<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call()
  } catch (err) {
    throw redisFailure(err)
  }
}
