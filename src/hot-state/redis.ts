import { readFileSync } from 'node:fs'
import type { Cluster, Redis } from 'ioredis'
import { LRUCache } from 'lru-cache'
import { StoreUnavailableError } from '../errors.ts'
import type { RedisJournal } from '../journal/redis-streams.ts'
import { JournalFullError } from '../journal/types.ts'
import { toChDateTime } from '../storage/clickhouse.ts'
import { configRow, shownConfig } from '../storage/configs.ts'
import { redisFailure } from '../storage/failures.ts'
import { NO_REPLICA_WAIT, durably, type ReplicaWait } from '../storage/redis.ts'
import { agentKeyId, eventFingerprint, partitionTag, userKeyId } from '../storage/redis-keys.ts'
import { minuteOf } from '../window.ts'
import { exhaustionAt, type Spend } from './projection.ts'
import { holdOfAnotherAgent } from './holds.ts'
import { holdRoom, pausedBy, type HoldBudget } from './policy.ts'
import {
  DEFAULT_IGNORE_GRACE_MS,
  NOT_IGNORED,
  RUNNING,
  SYSTEM_ACTOR,
  defaultPolicy,
  fleetOf,
  storedVelocityLimit,
  velocityLimitOf,
  type AgentLoad,
  type AgentPolicy,
  type AgentLoader,
  type AgentRef,
  type AgentSnapshot,
  type BudgetAlert,
  type HoldRefusal,
  type HoldRequest,
  type HoldResult,
  type HotState,
  type ListedAgent,
  type PauseReason,
  type PauseState,
  type RecordEvent,
  type RecordResult,
  type ReleasedHold,
  type Transition,
  type TransitionReason,
} from './types.ts'

/** The agents of a user with events in the window, as ClickHouse has them (for a lost index). */
export type UserAgentsLoader = (userId: string, now: number) => Promise<string[]>

export interface RedisHotStateOptions {
  redis: Redis | Cluster
  /** This instance's journal: every script appends to its stream of the user's partition. */
  journal: RedisJournal
  loader: AgentLoader
  userAgents: UserAgentsLoader
  prefix?: string
  /** How long after a pause an llm_call may still arrive unflagged (issue 13). */
  graceMs?: number
  /** Replicas that must hold a write before it is answered (issue 15); none by default. */
  replicaWait?: ReplicaWait
}

/**
 * The hot state in Redis, shared by every burnrate instance (DECISIONS.md "Architecture"),
 * with the journal in the same atomic step (issue 8): each operation is one Lua script over
 * one agent's keys, its user's agent index and this instance's journal stream of the user's
 * partition. They all carry the partition's hash tag {p<n>} (storage/redis-keys.ts), so a
 * script touches one Redis Cluster slot, and its effects and its journal rows are applied
 * together or not at all; Redis's AOF makes them durable.
 * Redis is derived state for the counters: a script finding the agent not loaded answers
 * NEEDS_LOAD, and the agent is installed from ClickHouse (the loader) by a script that
 * installs only once. The rules are memory.ts's, branch for branch (lua/lib.lua mirrors policy.ts).
 */
export class RedisHotState implements HotState {
  readonly #redis: Redis | Cluster
  readonly #scripts: Scripts
  readonly #prefix: string
  readonly #journal: RedisJournal
  readonly #loader: AgentLoader
  readonly #userAgents: UserAgentsLoader
  readonly #graceMs: number
  readonly #replicaWait: ReplicaWait
  // One loader call in flight per agent (and per user index) in this process; other
  // instances are kept from double counting by load.lua, which installs only once.
  readonly #loading = new Map<string, Promise<void>>()

  constructor(opts: RedisHotStateOptions) {
    const prefix = opts.prefix ?? 'br:'
    // Redis Cluster hashes the first {…} of a key: the prefix must not hold one.
    if (/[{}]/.test(prefix)) throw new Error(`hot-state prefix must not contain braces: ${prefix}`)
    this.#redis = opts.redis
    this.#prefix = prefix
    this.#journal = opts.journal
    this.#loader = opts.loader
    this.#userAgents = opts.userAgents
    this.#graceMs = opts.graceMs ?? DEFAULT_IGNORE_GRACE_MS
    this.#replicaWait = opts.replicaWait ?? NO_REPLICA_WAIT
    for (const [name, { lua, keys }] of Object.entries(SCRIPTS)) {
      opts.redis.defineCommand(name, { lua, numberOfKeys: keys })
    }
    this.#scripts = opts.redis as unknown as Scripts
  }

  async record(e: RecordEvent, now: number): Promise<RecordResult> {
    const fleetRef = fleetOf(e.userId)
    const fleet = this.#keys(fleetRef)
    const reply = (await this.#agentScript(e, now, DURABLE, (s, k, head) =>
      s.burnrateRecord(
        ...withFleet(k, fleet),
        ...head,
        String(e.costNano),
        e.llmCall ? 1 : 0,
        minuteOf(e.at),
        JSON.stringify(e.row),
        eventFingerprint(e.userId, e.agentId, e.eventId),
        this.#names(fleetRef).members,
        this.#graceMs,
        e.holdId ?? '',
      ),
    )) as RecordReply | typeof HOLD_OF_ANOTHER_AGENT
    if (reply === HOLD_OF_ANOTHER_AGENT) throw holdOfAnotherAgent(e.holdId!)
    const [counted, total, reason, cost, threshold, spend, fired, webhook, f, ign, ...transitions] = reply
    const [fleetReason, fleetTotal, fleetThreshold, fleetWebhook, fleetTransitions, fleetFired, fleetSpend] = f
    const budget = { totalNano: Number(total), thresholdNano: Number(threshold), exhaustionAt: exhaustionAt(spendOf(total, spend), Number(threshold), now) }
    const fleetBudget = {
      totalNano: Number(fleetTotal),
      thresholdNano: Number(fleetThreshold),
      exhaustionAt: fleetSpend ? exhaustionAt(spendOf(fleetTotal, fleetSpend), Number(fleetThreshold), now) : null,
    }
    return {
      counted: counted === 1,
      costNano: Number(cost),
      ...budget,
      ...pausedBy(pauseOf(reason), pauseOf(fleetReason)),
      transitions: [...transitions.map((t) => transitionOf(e, now, t)), ...fleetTransitions.map((t) => transitionOf(fleetRef, now, t))],
      alerts: [...alertsOf(e, now, fired, budget, webhook), ...alertsOf(fleetRef, now, fleetFired, fleetBudget, fleetWebhook)],
      ignored: ign
        ? {
            userId: e.userId,
            agentId: e.agentId,
            at: now,
            pausedSince: Number(ign[0]),
            calls: Number(ign[1]),
            costNano: Number(ign[2]),
            version: Number(ign[3]),
            webhookUrl: webhook || fleetWebhook || null,
          }
        : null,
    }
  }

  get(ref: AgentRef, now: number): Promise<{ snapshot: AgentSnapshot; transition: Transition | null; exhaustionAt: number | null }> {
    return this.#read(ref, now, true)
  }

  /** get(), and the projection's reads only `withSpend` (a listing of 10,000 agents has no use for them). */
  async #read(ref: AgentRef, now: number, withSpend: boolean): Promise<{ snapshot: AgentSnapshot; transition: Transition | null; exhaustionAt: number | null }> {
    const [s, t, spend] = (await this.#agentScript(ref, now, !DURABLE, (c, k, head) => c.burnrateGet(...k, ...k.holds, ...head, withSpend ? 1 : 0))) as GetReply
    const [total, calls, paused, reason, override, threshold, autoResume, webhook, configured, active, alertAt, vlimit, vwindow, since, ignSince, ignCalls, ignNano, ignFlag, held] = s
    return {
      snapshot: {
        active: active === 1,
        totalNano: Number(total),
        llmCalls: Number(calls),
        pause: { paused: paused === 1, reason: reason === '' ? null : (reason as PauseReason), override: override === 1, since: Number(since) },
        policy: {
          thresholdNano: Number(threshold),
          autoResume: autoResume === 1,
          webhookUrl: webhook,
          alertAt: alertAt.split(',').filter(Boolean).map(Number),
          velocityLimitNano: velocityLimitOf(Number(vlimit)),
          velocityWindowMinutes: vwindow,
        },
        configured: configured === 1,
        ignored: { since: Number(ignSince), calls: Number(ignCalls), nano: Number(ignNano), flagged: ignFlag === 1 },
        heldNano: Number(held),
      },
      transition: t ? transitionOf(ref, now, t) : null,
      exhaustionAt: spend ? exhaustionAt(spendOf(total, spend), Number(threshold), now) : null,
    }
  }

  /**
   * The user's index of agents, loaded from ClickHouse when Redis lost it (or it expired):
   * it may list an agent whose last event has just left the window, which the caller's
   * snapshot (active) settles.
   */
  async activeAgents(userId: string, now: number): Promise<string[]> {
    const key = this.#userKey(userId)
    const first = await unavailableOnError(() => this.#scripts.burnrateAgents(key, now))
    if (first !== NEEDS_LOAD) return first as string[]
    await this.#once(`user\0${userId}`, async () => {
      const agents = await this.#userAgents(userId, now)
      await unavailableOnError(() => this.#scripts.burnrateAgentsLoad(key, AGENT_TTL_MS, minuteOf(now), ...agents))
    })
    const second = await unavailableOnError(() => this.#scripts.burnrateAgents(key, now))
    if (second === NEEDS_LOAD) throw new StoreUnavailableError('Redis', `the agent index of a user was lost while loading it`)
    return second as string[]
  }

  async listAgents(userId: string, now: number): Promise<ListedAgent[]> {
    const agentIds = await this.activeAgents(userId, now)
    // Issued together: one round trip for the listing. The index may still name an agent
    // whose last event just left the window; its own state says so.
    const results = await Promise.all(agentIds.map((agentId) => this.#read({ userId, agentId }, now, false)))
    return agentIds.flatMap((agentId, i) => (results[i]!.snapshot.active ? [{ agentId, snapshot: results[i]!.snapshot }] : []))
  }

  async setPolicy(ref: AgentRef, policy: AgentPolicy, now: number, actor: string): Promise<Transition | null> {
    // The script appends the config it replaces (it alone knows it at that moment): "replaced" is left out here.
    const row = configRow(ref, policy, now, actor)
    const [t] = (await this.#agentScript(ref, now, DURABLE, (s, k, head) =>
      s.burnrateSetPolicy(
        ...k,
        ...head,
        String(policy.thresholdNano),
        policy.autoResume ? 1 : 0,
        policy.webhookUrl ?? '',
        JSON.stringify(row),
        actor,
        row.shown,
        policy.alertAt.join(','),
        String(storedVelocityLimit(policy.velocityLimitNano)),
        policy.velocityWindowMinutes,
      ),
    )) as [TransitionReply | false]
    return t ? transitionOf(ref, now, t, actor) : null
  }

  async setPaused(ref: AgentRef, paused: boolean, now: number, actor: string): Promise<Transition | null> {
    const [t] = (await this.#agentScript(ref, now, DURABLE, (s, k, head) => s.burnrateSetPaused(...k, ...k.holds, ...head, paused ? 1 : 0, actor))) as [
      TransitionReply | false,
    ]
    return t ? transitionOf(ref, now, t, actor) : null
  }

  async hold(ref: AgentRef, request: HoldRequest, now: number): Promise<HoldResult> {
    const fleetRef = fleetOf(ref.userId)
    const fleet = this.#keys(fleetRef)
    // Holds are hot state only: a failover may lose one, never an event. No replica waits.
    const reply = (await this.#agentScript(ref, now, !DURABLE, (s, k, head) =>
      s.burnrateHold(
        ...withFleet(k, fleet),
        ...head,
        request.holdId,
        String(request.costNano),
        request.expiresAt,
        this.#names(fleetRef).members,
      ),
    )) as HoldReply | typeof HOLD_OF_ANOTHER_AGENT
    if (reply === HOLD_OF_ANOTHER_AGENT) throw holdOfAnotherAgent(request.holdId)
    const [refusal, a, f] = reply
    const agent = holdBudgetOf(a)
    const ofFleet = holdBudgetOf(f)
    return {
      refusal: refusal === '' ? null : refusal,
      ...pausedBy(agent.pause, ofFleet.pause),
      remainingNano: holdRoom(agent, ofFleet),
      transitions: [...(a[5] ? [transitionOf(ref, now, a[5])] : []), ...(f[5] ? [transitionOf(fleetRef, now, f[5])] : [])],
    }
  }

  async release(userId: string, holdId: string, now: number): Promise<ReleasedHold | null> {
    // The fleet's entry names the agent (lib.lua), whose keys the script needs; it checks
    // again, as the hold may have gone since.
    const fleet = this.#keys(fleetOf(userId))
    const entry = await unavailableOnError(() => this.#redis.hget(fleet.holds[1], holdId))
    if (entry === null) return null
    const agentId = entry.slice(entry.indexOf(':') + 1)
    const agent = this.#keys({ userId, agentId })
    const released = await unavailableOnError(() => this.#scripts.burnrateRelease(fleet[0], ...fleet.holds, agent[0], ...agent.holds, now, holdId, agentId))
    return typeof released === 'string' ? { agentId, costNano: Number(released) } : null
  }

  async ping(): Promise<void> {
    await this.#redis.ping()
  }

  /** The client belongs to the caller, who quits it. */
  async close(): Promise<void> {}

  /**
   * Runs an agent script (lib.lua: its six keys and seven arguments, then its own). An agent
   * not loaded is loaded and the script runs once more; a journal taken over by another
   * instance is rejoined under a new id and the script runs again; the bound is a 503.
   */
  async #agentScript(ref: AgentRef, now: number, durable: boolean, call: (scripts: Scripts, keys: AgentKeys, head: ScriptHead) => unknown): Promise<unknown> {
    const wait = durable ? this.#replicaWait : NO_REPLICA_WAIT
    for (let attempt = 0; ; attempt++) {
      const instance = this.#journal.instance
      // The script is issued on the client, or on a pipeline whose WAIT follows it (durably).
      const reply = await unavailableOnError(() => durably(this.#redis, wait, (c) => call(c as unknown as Scripts, this.#keys(ref), this.#head(ref, now)), wroteState))
      if (reply === FENCED && attempt < 4) {
        await this.#journal.rejoin(instance)
        continue
      }
      if (reply === NEEDS_LOAD && attempt < 4) {
        await this.#ensureLoaded(ref, now) // ClickHouse's failures are classified as ClickHouse's
        continue
      }
      if (reply === NEEDS_FLEET_LOAD && attempt < 4) {
        await this.#ensureLoaded(fleetOf(ref.userId), now)
        continue
      }
      if (reply === FULL) {
        const backlog = this.#journal.backlog()
        throw new JournalFullError({ ...backlog, rows: Math.max(backlog.rows, this.#journal.streamRows) })
      }
      // Only an agent expiring or flushed between loads, or a journal fenced again and again,
      // gets here; an open hold of another agent is record()'s to answer.
      if (typeof reply === 'string' && reply !== HOLD_OF_ANOTHER_AGENT) throw new StoreUnavailableError('Redis', `the hot state of agent ${ref.agentId} answered ${reply}`)
      return reply
    }
  }

  #lastTime = { ms: Number.NaN, text: '' }

  /** `now` as ClickHouse text, for the rare transition row: formatted once per millisecond. */
  #chTime(now: number): string {
    if (this.#lastTime.ms !== now) this.#lastTime = { ms: now, text: toChDateTime(now) }
    return this.#lastTime.text
  }

  /** ARGV[1..7] of every agent script (lib.lua). */
  #head(ref: AgentRef, now: number): ScriptHead {
    return [now, AGENT_TTL_MS, this.#journal.instance, this.#journal.streamRows, this.#names(ref).members, this.#chTime(now), ref.agentId]
  }

  #ensureLoaded(ref: AgentRef, now: number): Promise<void> {
    return this.#once(agentId(ref), async () => {
      const load = await this.#loader(ref, now)
      await unavailableOnError(() => this.#install(ref, load, now))
    })
  }

  /**
   * One load per key in flight. Every script that answered NEEDS_LOAD was sent before the
   * load's install on the same connection (one node per slot), which Redis answers in
   * order: they all find the load still in flight and wait for it, never start another.
   */
  #once(id: string, load: () => Promise<void>): Promise<void> {
    let loading = this.#loading.get(id)
    if (!loading) {
      loading = load().finally(() => this.#loading.delete(id))
      this.#loading.set(id, loading)
    }
    return loading
  }

  async #install(ref: AgentRef, load: AgentLoad, now: number): Promise<void> {
    const k = this.#keys(ref)
    const policy = load.policy ?? defaultPolicy(ref)
    const pause = load.pause ?? RUNNING
    const ignored = load.ignored ?? NOT_IGNORED
    const payload = {
      minutes: [...load.minutes].sort((x, y) => x.minute - y.minute).map((m) => [String(m.minute), String(m.costNano), String(m.llmCalls)]),
      seen: load.seen.map((s) => [String(s.costNano), String(s.minute)]),
      policy: {
        threshold: String(policy.thresholdNano),
        auto_resume: policy.autoResume ? '1' : '0',
        webhook: policy.webhookUrl ?? false,
        configured: load.policy ? '1' : '0',
        shown: load.policy ? shownConfig(load.policy) : false,
        alert_at: policy.alertAt.join(','),
        vlimit: String(storedVelocityLimit(policy.velocityLimitNano)),
        vwindow: policy.velocityWindowMinutes,
      },
      pause: { paused: pause.paused ? '1' : '0', reason: pause.reason ?? '', override: pause.override ? '1' : '0', since: String(pause.since) },
      ignored: { since: String(ignored.since), calls: String(ignored.calls), nano: String(ignored.nano), flagged: ignored.flagged ? '1' : '0' },
    }
    const fingerprints = load.seen.map((s) => eventFingerprint(ref.userId, ref.agentId, s.eventId))
    // An array, not spread: ioredis flattens it, and a busy agent's seen ids can be many.
    await this.#scripts.burnrateLoad(k[0], k[1], k[2], k.ids, ...k.holds, now, AGENT_TTL_MS, JSON.stringify(payload), fingerprints)
  }

  /** KEYS[1..6] of an agent script (lib.lua), and the partition's event-id tables. */
  #keys(ref: AgentRef): AgentKeys {
    const { partition, base } = this.#names(ref)
    const user = this.#userNames(ref.userId)
    const keys = [`${base}:a`, `${base}:w`, `${base}:m`, this.#journal.streamKey(partition), this.#journal.fencedKey(partition), user.index] as const
    return Object.assign(keys, { ids: user.ids, holds: [`${base}:hz`, `${base}:h`] as const })
  }

  #userKey(userId: string): string {
    return this.#userNames(userId).index
  }

  // Key names cost SHA-256s (redis-keys.ts); an agent's and a user's are the same every
  // event, so the recent ones are kept (two hashes a request were 4 % of the CPU, bench/).
  readonly #agentNames = new LRUCache<string, AgentNames>({ max: 50_000 })
  readonly #users = new LRUCache<string, { index: string; ids: string }>({ max: 10_000 })

  #names(ref: AgentRef): AgentNames {
    const id = agentId(ref)
    let names = this.#agentNames.get(id)
    if (!names) {
      // The user's partition tag: the agent's keys share a slot with every key of its user,
      // the journal streams its rows go to included (redis-keys.ts).
      const partition = this.#journal.partitionOf(ref.userId)
      names = {
        partition,
        base: `${this.#prefix}${partitionTag(partition)}:hs:${agentKeyId(ref.userId, ref.agentId)}`,
        members: JSON.stringify({ user_id: ref.userId, agent_id: ref.agentId }).slice(1, -1),
      }
      this.#agentNames.set(id, names)
    }
    return names
  }

  #userNames(userId: string): { index: string; ids: string } {
    let names = this.#users.get(userId)
    if (!names) {
      const tag = partitionTag(this.#journal.partitionOf(userId))
      names = { index: `${this.#prefix}${tag}:u:${userKeyId(userId)}`, ids: `${this.#prefix}${tag}:e` }
      this.#users.set(userId, names)
    }
    return names
  }
}

/** An agent's key base and partition, and its ids as JSON members of a journaled row (lib.lua). */
interface AgentNames {
  partition: number
  base: string
  members: string
}
/** KEYS[1..6] of an agent script, the partition's event-id tables, and the state's open holds (:hz, :h; lib.lua). */
type AgentKeys = readonly [string, string, string, string, string, string] & { ids: string; holds: readonly [string, string] }
type ScriptHead = [number, number, string, number, string, string, string]

/** Keys live 25 h after an agent's last write: longer than the window, so only idle agents expire. */
const AGENT_TTL_MS = 25 * 60 * 60 * 1000

/** The scripts' control answers (NEEDS_LOAD, FENCED, FULL, …) are strings, and come before any write that matters. */
const wroteState = (reply: unknown) => typeof reply !== 'string'

/** Whether a script's write must be on the replicas before it is answered (replicaWait). */
const DURABLE = true

const NEEDS_LOAD = 'NEEDS_LOAD'
const NEEDS_FLEET_LOAD = 'NEEDS_FLEET_LOAD'
const FENCED = 'FENCED'
const FULL = 'FULL'
const HOLD_OF_ANOTHER_AGENT = 'HOLD_OF_ANOTHER_AGENT'

// Read once at start-up; lib.lua holds the helpers every script shares (Redis 7 scripts
// cannot import), so the rules exist once in Lua.
const lua = (name: string): string => readFileSync(new URL(`./lua/${name}.lua`, import.meta.url), 'utf8')
const LIB = lua('lib')
const script = (name: string, keys: number) => ({ lua: `${LIB}\n${lua(name)}`, keys })
const standalone = (name: string, keys: number) => ({ lua: lua(name), keys })
const SCRIPTS = {
  burnrateRecord: script('record', 14),
  burnrateGet: script('get', 8),
  burnrateSetPolicy: script('set_policy', 6),
  burnrateSetPaused: script('set_paused', 8),
  burnrateHold: script('hold', 14),
  burnrateRelease: script('release', 6),
  burnrateLoad: script('load', 6),
  burnrateAgents: standalone('agents', 1),
  burnrateAgentsLoad: standalone('agents_load', 1),
}

type Arg = string | number | string[]
/** The commands defineCommand adds to the client (ioredis calls them by EVALSHA, EVAL on NOSCRIPT). */
type Scripts = Record<keyof typeof SCRIPTS, (...args: Arg[]) => Promise<unknown>>

/** {reason, paused, override, total, threshold, webhook, version, spent, vlimit, vwindow, held} from lib.lua transition(). */
type TransitionReply = [TransitionReason, number, number, string, string, string | null, string, string, string, number, string]
/** hold.lua, of the agent and of its fleet: pause reason, override, total, held, threshold, relaxing transition. */
type HoldStateReply = [PauseReason | '', number, string, string, string, TransitionReply | null]
type HoldReply = ['' | HoldRefusal, HoldStateReply, HoldStateReply]
/** lib.lua spend(): the last 60 minutes' cost, and [hour, cost, …] oldest first. */
type SpendReply = [string, string[]]
/** The alerts an event fired: [level, version, …]. */
type FiredReply = string[]
/** record.lua's fleet: pause reason, total, threshold, webhook, transitions, alerts fired, spend (with alerts). */
type FleetReply = [PauseReason | '', string, string, string | null, TransitionReply[], FiredReply, SpendReply | false]
/** record.lua's ignoring-pause flag raised: paused_at, calls, nano, version. */
type IgnoredReply = [string, string, string, string]
/** record.lua: counted, total, pause reason, cost, threshold, spend, alerts fired, webhook, fleet, ignored, transitions. */
type RecordReply = [number, string, PauseReason | '', string, string, SpendReply, FiredReply, string | null, FleetReply, IgnoredReply | null, ...TransitionReply[]]
type GetReply = [
  [string, string, number, string, number, string, number, string | null, number, number, string, string, number, string, string, string, string, number, string],
  TransitionReply | null,
  SpendReply | false,
]

function spendOf(total: string, [lastHour, hours]: SpendReply): Spend {
  return { totalNano: Number(total), lastHourNano: Number(lastHour), hours: hours.map(Number) }
}

/** Whether a state is paused and why, as record.lua answers it: its reason, '' when running. */
function pauseOf(reason: PauseReason | ''): Pick<PauseState, 'paused' | 'reason'> {
  return reason === '' ? RUNNING : { paused: true, reason }
}

/** The alerts of one state (an agent's, a fleet's) an event fired, with that state's budget. */
function alertsOf(ref: AgentRef, now: number, fired: FiredReply, budget: Pick<BudgetAlert, 'totalNano' | 'thresholdNano' | 'exhaustionAt'>, webhook: string | null): BudgetAlert[] {
  const alerts: BudgetAlert[] = []
  for (let i = 0; i < fired.length; i += 2) {
    alerts.push({ userId: ref.userId, agentId: ref.agentId, at: now, version: Number(fired[i + 1]), level: Number(fired[i]), ...budget, webhookUrl: webhook || null })
  }
  return alerts
}

/** KEYS[1..14] of a script that steps an agent and its fleet together (record.lua, hold.lua). */
function withFleet(k: AgentKeys, fleet: AgentKeys): string[] {
  return [...k, k.ids, fleet[0], fleet[1], fleet[2], ...k.holds, ...fleet.holds]
}

function agentId(ref: AgentRef): string {
  return `${ref.userId}\0${ref.agentId}`
}

/** What the hold rules read of a state, as hold.lua answers it. */
function holdBudgetOf([reason, override, total, held, threshold]: HoldStateReply): HoldBudget {
  return { pause: { ...pauseOf(reason), override: override === 1 }, totalNano: Number(total), heldNano: Number(held), thresholdNano: Number(threshold) }
}

function transitionOf(ref: AgentRef, now: number, t: TransitionReply, actor = SYSTEM_ACTOR): Transition {
  const [reason, paused, override, total, threshold, webhook, version, spent, vlimit, vwindow, held] = t
  return {
    userId: ref.userId,
    agentId: ref.agentId,
    at: now,
    version: Number(version),
    actor,
    paused: paused === 1,
    reason,
    override: override === 1,
    totalNano: Number(total),
    thresholdNano: Number(threshold),
    webhookUrl: webhook ?? null,
    ...(reason === 'velocity' ? { velocity: { spentNano: Number(spent), limitNano: Number(vlimit), windowMinutes: vwindow } } : {}),
    ...(held !== '0' ? { heldNano: Number(held) } : {}),
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
