import { LRUCache } from 'lru-cache'
import { StoreUnavailableError } from '../errors.ts'
import type { RedisJournal } from '../journal/redis-streams.ts'
import { JournalFullError } from '../journal/types.ts'
import { toChDateTime } from '../storage/clickhouse.ts'
import { configRow, shownConfig } from '../storage/configs.ts'
import { redisFailure } from '../storage/failures.ts'
import { NO_REPLICA_WAIT, durably, whileSlotMoves, type RedisClient, type ReplicaWait } from '../storage/redis.ts'
import { agentKeyId, eventFingerprint, partitionTag, userKeyId } from '../storage/redis-keys.ts'
import { minuteOf } from '../rolling-day.ts'
import { holdOfAnotherAgent } from './holds.ts'
import { NO_HISTORY, NO_PERIODS, storedHours, storedSince, type PeriodHistory } from './period-tallies.ts'
import { periodExhaustionAt } from './projection.ts'
import { budgetMeter, metersOf, pauseReasonOf, resolveMeters, type ResolvedMeter } from './meters.ts'
import { holdRoom, levelsReached, pausedBy, type Judged } from './policy.ts'
import { isControl, isControlReply, isMissingLibrary, loadLibrary, parseReply, queueScript, tallyCode, type Control, type LuaMeter, type ScriptName, type ScriptResult, type RateReply, type RecordedReply, type StateArgs, type TransitionReply } from './scripts.ts'
import { FLEET, agentKey, fleetOf, isFleet, type AgentRef } from './agent-ref.ts'
import { agentBudget, agentPolicyJson, defaultPolicy, type AgentPolicy } from './meters.ts'
import { DEFAULT_IGNORE_GRACE_MS, DEFAULT_RUN_IDLE_MS, RUNNING, RateLimitedError, SYSTEM_ACTOR, type AgentLoad, type AgentLoader, type AgentSnapshot, type BudgetAlert, type HoldRequest, type HoldResult, type HotState, type ListedAgent, type PauseState, type PeriodSpend, type RateCharge, type RateState, type RecordEvent, type RecordResult, type ReleasedHold, type Transition } from './types.ts'

/** The agents of a user with events in the window, as ClickHouse has them (for a lost index). */
export type UserAgentsLoader = (userId: string, now: number) => Promise<string[]>

export interface RedisHotStateOptions {
  redis: RedisClient
  /** This instance's journal: every script appends to its stream of the user's partition. */
  journal: RedisJournal
  loader: AgentLoader
  userAgents: UserAgentsLoader
  prefix?: string
  /** How long after a pause an llm_call may still arrive unflagged. */
  graceMs?: number
  /** How long a run kept for its agent's run budget may go without an event. */
  runIdleMs?: number
  /** Replicas that must hold a write before it is answered; none by default. */
  replicaWait?: ReplicaWait
}

/** A state's policy as this instance knows it: the version Redis stores it under, and the policy. */
interface KnownPolicy {
  pv: number
  policy: AgentPolicy
}

/** An event waiting for its partition's next record call. */
interface Waiting {
  e: RecordEvent
  now: number
  resolve: (r: RecordResult) => void
  reject: (err: unknown) => void
}

/** A partition's events waiting for a call, whether one is in flight, and whether one is about to go. */
interface Group {
  waiting: Waiting[]
  busy: boolean
  scheduled: boolean
}

/** A charge as the scripts take it (lua/state.lua charge()). */
interface RateArgs {
  key: string
  max: number
  window: number
}

/** The events one record call carries at most; more wait for the next. */
const MAX_GROUP = 256

/** The states of a call's refs, in their order. */
type CallStates<R extends readonly AgentRef[]> = { readonly [K in keyof R]: CallState }

/** A state as one script call sees it: its key, the policy its meters were resolved from, and those meters. */
interface CallState {
  ref: AgentRef
  key: string
  names: StateNames
  known: KnownPolicy
  meters: readonly ResolvedMeter[]
}

/**
 * The hot state in Redis, shared by every burnrate instance, with the journal in the same
 * atomic step: each operation is one Lua script (scripts.ts) over its states' keys, its
 * user's agent index and this instance's journal stream of the user's partition. They all
 * carry the partition's hash tag {p<n>} (storage/redis-keys.ts), so a script touches one
 * Redis Cluster slot, and its effects and its journal rows are applied together or not at
 * all; Redis's AOF makes them durable. The rules are policy.ts's, mirrored by lua/rules.lua.
 *
 * Redis is derived state for the counters: a script that finds a state not loaded answers
 * NEEDS_LOAD, and the state is installed from ClickHouse (the loader) by a script that
 * installs only once. Each state keeps its policy and the policy's version; this instance
 * keeps the policies it knows, resolves their meters for the moment of each call (meters.ts,
 * so that calendars and time zones stay out of Lua) and sends the version with them. A
 * script that finds another version stored answers STALE with the stored policy, before
 * changing anything, and is called again: a config set through any instance applies to the
 * next event everywhere.
 */
export class RedisHotState implements HotState {
  readonly #redis: RedisClient
  readonly #prefix: string
  readonly #journal: RedisJournal
  readonly #loader: AgentLoader
  readonly #userAgents: UserAgentsLoader
  readonly #graceMs: number
  readonly #runIdleMs: number
  readonly #replicaWait: ReplicaWait
  // One loader call in flight per state (by agentKey) and per user index (by its key name,
  // which holds no NUL) in this process; other instances are kept from double counting by
  // load.lua, which installs only once.
  readonly #loading = new Map<string, Promise<void>>()
  // The policies this instance knows, by agentKey(); a state it does not know is taken to
  // have the default policy (version 0), which most agents of a fleet have.
  readonly #policies = new LRUCache<string, KnownPolicy>({ max: 100_000 })
  // Per partition, the events waiting for its next record call (group commit).
  readonly #groups = new Map<number, Group>()
  // The library's load in flight, which the calls that found it missing wait for together.
  #libraryLoad: Promise<void> | null = null

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
    this.#runIdleMs = opts.runIdleMs ?? DEFAULT_RUN_IDLE_MS
    this.#replicaWait = opts.replicaWait ?? NO_REPLICA_WAIT
  }

  /**
   * POST /events. The event joins its partition's next call (group commit): events that
   * arrive while a call to their partition is in flight, or in the same turn of the event
   * loop, go to Redis together, in one script call that answers each as it would have been
   * alone, in arrival order. A lone event goes at once: nothing waits on a timer.
   */
  record(e: RecordEvent, now: number): Promise<RecordResult> {
    return new Promise((resolve, reject) => {
      const partition = this.#journal.partitionOf(e.userId)
      let group = this.#groups.get(partition)
      if (!group) this.#groups.set(partition, (group = { waiting: [], busy: false, scheduled: false }))
      group.waiting.push({ e, now, resolve, reject })
      this.#schedule(group)
    })
  }

  /** Sends a group's waiting events once the turn of the event loop has gathered them, unless a call is in flight. */
  #schedule(group: Group): void {
    if (group.busy || group.scheduled) return
    group.scheduled = true
    setImmediate(() => {
      group.scheduled = false
      void this.#send(group)
    })
  }

  /** One call for what waits (up to MAX_GROUP events); what arrives meanwhile goes next, as soon as it returns. */
  async #send(group: Group): Promise<void> {
    if (group.busy || group.waiting.length === 0) return
    group.busy = true
    try {
      await this.#recordAll(group.waiting.splice(0, MAX_GROUP))
    } finally {
      group.busy = false
      if (group.waiting.length > 0) void this.#send(group)
    }
  }

  /** One record script call for events of one partition: each is answered, or fails, on its own. */
  async #recordAll(batch: readonly Waiting[]): Promise<void> {
    // The call's moment: its events are applied together, when it runs.
    const now = batch.reduce((latest, w) => Math.max(latest, w.now), 0)
    const refs: AgentRef[] = []
    const index = new Map<string, number>()
    // A state's place in the call, from 1, as the script names them.
    const place = (ref: AgentRef): number => {
      const key = agentKey(ref)
      let i = index.get(key)
      if (i === undefined) index.set(key, (i = refs.push(ref)))
      return i
    }
    // The budgets charged, each once (the events of a request's key share one).
    const rates: RateArgs[] = []
    const rateIndex = new Map<string, number>()
    const rateOfEvent = (e: RecordEvent): number | undefined => {
      if (!e.rate) return undefined
      const args = this.#rateArgs(e.userId, e.rate)
      let i = rateIndex.get(args.key)
      if (i === undefined) rateIndex.set(args.key, (i = rates.push(args)))
      return i
    }
    const events = batch.map(({ e }, i) => ({
      agent: place(e),
      fleet: place(fleetOf(e.userId)),
      fp: eventFingerprint(e.userId, e.agentId, e.eventId),
      cost: e.costNano,
      llm_call: e.llmCall,
      minute: minuteOf(e.at),
      hold: e.holdId,
      row: i + 2,
      rate: rateOfEvent(e),
      run: e.runId,
      ends: e.endsRun || undefined,
    }))
    let reply: { result: ScriptResult<'record'>; states: readonly CallState[] }
    try {
      reply = await this.#run('record', refs, now, DURABLE, (call) => ({
        keys: this.#partitionKeys(batch[0]!.e.userId),
        args: { ...this.#head(now), ...this.#statesArgs(call), grace: this.#graceMs, rates, events },
        rest: batch.map((w) => JSON.stringify(w.e.row)),
      }))
    } catch (err) {
      for (const w of batch) w.reject(err)
      return
    }
    batch.forEach((w, i) => {
      try {
        const { agent, fleet } = events[i]!
        w.resolve(this.#recorded(w.e, reply.result.events[i]!, reply.states[agent - 1]!, reply.states[fleet - 1]!, now))
      } catch (err) {
        w.reject(err)
      }
    })
  }

  /** One event's answer from the record script, as RecordResult says it. */
  #recorded(e: RecordEvent, answer: RecordedReply, agent: CallState, fleet: CallState, now: number): RecordResult {
    if ('limited' in answer) throw new RateLimitedError(rateOf(answer.limited))
    if ('error' in answer) throw holdOfAnotherAgent(e.holdId!)
    const exhausted = answer.exhausts ?? null
    const fleetExhausted = answer.fleet_exhausts ?? null
    const of = (scope: string) => (scope === 'fleet' ? fleet : agent)
    return {
      counted: answer.counted,
      costNano: answer.cost,
      totalNano: answer.total,
      thresholdNano: agentBudget(agent.known.policy),
      exhaustionAt: exhausted,
      ...pausedBy(told(answer.reason), told(answer.fleet_reason), answer.run_stopped),
      periods: periodsOf(agent.meters, answer.periods, answer.last_hour, now),
      runStop: answer.run_stop
        ? {
            userId: e.userId,
            agentId: e.agentId,
            runId: e.runId!,
            at: now,
            version: answer.run_stop.version,
            spentNano: answer.run_stop.spent,
            heldNano: answer.run_stop.held,
            budgetNano: agent.known.policy.runBudgetNano!,
            webhookUrl: agent.known.policy.webhookUrl,
          }
        : null,
      transitions: (answer.transitions ?? []).map((t) => transitionOf(of(t.scope), t, now)),
      alerts: (answer.alerts ?? []).map((a): BudgetAlert => {
        const s = of(a.scope)
        const m = s.meters[a.meter]!
        return {
          userId: s.ref.userId,
          agentId: s.ref.agentId,
          at: now,
          version: a.version,
          meter: m.id,
          level: m.alertAt[a.level]!,
          totalNano: a.spent,
          thresholdNano: m.limitNano,
          exhaustionAt: m.period
            ? periodExhaustionAt(m, a.spent, (s === fleet ? answer.fleet_last_hour : answer.last_hour) ?? 0, now)
            : s === fleet
              ? fleetExhausted
              : exhausted,
          webhookUrl: s.known.policy.webhookUrl,
        }
      }),
      ignored: answer.ignored
        ? {
            userId: e.userId,
            agentId: e.agentId,
            at: now,
            pausedSince: answer.ignored.since,
            calls: answer.ignored.calls,
            costNano: answer.ignored.nano,
            version: answer.ignored.version,
            webhookUrl: agent.known.policy.webhookUrl ?? fleet.known.policy.webhookUrl,
          }
        : null,
      rate: answer.rate ? rateOf(answer.rate) : null,
    }
  }

  /** A charge as the scripts take it (lua/state.lua charge()): its budget's key, in the user's slot. */
  #rateArgs(userId: string, rate: RateCharge): RateArgs {
    return { key: `${this.#userNames(userId).budgets}${rate.key}`, max: rate.max, window: rate.windowMs }
  }

  async get(ref: AgentRef, now: number): Promise<{ snapshot: AgentSnapshot; transition: Transition | null; exhaustionAt: number | null }> {
    const { result, states } = await this.#run('read', [ref] as const, now, !DURABLE, (call) => ({
      keys: this.#partitionKeys(ref.userId),
      args: { ...this.#head(now), ...this.#statesArgs(call), with_projection: true },
    }))
    const r = result.states[0]!
    const [s] = states
    return {
      snapshot: snapshotOf(r, s, now),
      transition: r.transition ? transitionOf(s, r.transition, now) : null,
      exhaustionAt: r.exhausts ?? null,
    }
  }

  /**
   * The user's index of agents, loaded from ClickHouse when Redis lost it (or it expired):
   * it may list an agent whose last event has just left the window, which the caller's
   * snapshot (active) settles.
   */
  async activeAgents(userId: string, now: number): Promise<string[]> {
    const keys = { index: this.#userNames(userId).index }
    const first = await this.#once1('agents', keys, { now })
    if (!isControlReply(first)) return first.agents
    await this.#once(keys.index, async () => {
      const agents = await this.#userAgents(userId, now)
      await this.#once1('agentsLoad', keys, { now, ttl: AGENT_TTL_MS, agents })
    })
    const second = await this.#once1('agents', keys, { now })
    if (isControlReply(second)) throw new StoreUnavailableError('Redis', `the agent index of a user was lost while loading it`)
    return second.agents
  }

  async listAgents(userId: string, now: number): Promise<ListedAgent[]> {
    const agentIds = await this.activeAgents(userId, now)
    // LIST_CHUNK states a call (lua/read.lua), a call per 500 agents instead of one per
    // agent, one after the other: the states a call finds missing (all of them after a
    // restart of Redis) are named in one NEEDS_LOAD and loaded together, and calls issued
    // all at once queued their loads behind one another past the command timeout. The index
    // may still name an agent whose last event just left the window; its own state says so.
    const listed: ListedAgent[] = []
    for (let i = 0; i < agentIds.length; i += LIST_CHUNK) {
      const ids = agentIds.slice(i, i + LIST_CHUNK)
      const { result, states } = await this.#run('read', ids.map((agentId) => ({ userId, agentId })), now, !DURABLE, (call) => ({
        keys: this.#partitionKeys(userId),
        args: { ...this.#head(now), ...this.#statesArgs(call) },
      }))
      result.states.forEach((r, k) => {
        if (r.active) listed.push({ agentId: ids[k]!, snapshot: snapshotOf(r, states[k]!, now) })
      })
    }
    return listed
  }

  async setPolicy(ref: AgentRef, policy: AgentPolicy, now: number, actor: string, history?: PeriodHistory): Promise<Transition | null> {
    // The script appends the config it replaces (it alone knows it at that moment): "replaced" is left out here.
    const row = configRow(ref, policy, now, actor)
    const next = { ...policy }
    const meters = resolveMeters(metersOf(next), now)
    const { result, states } = await this.#run('setPolicy', [ref] as const, now, DURABLE, (call) => ({
      keys: this.#partitionKeys(ref.userId),
      args: {
        ...this.#head(now),
        ...this.#statesArgs(call),
        policy: JSON.stringify(next),
        new_meters: luaMeters(meters).lua,
        version: row.version,
        shown: row.shown,
        actor,
        ...(history ? { history: { cut: history.cut, quarters: Array.from(history.quarters) } } : {}),
      },
      rest: [JSON.stringify(row)],
    }))
    const known = { pv: result.pv, policy: next }
    this.#policies.set(agentKey(ref), known)
    return result.transition ? transitionOf({ ...states[0], known, meters }, result.transition, now, actor) : null
  }

  async setPaused(ref: AgentRef, paused: boolean, now: number, actor: string): Promise<Transition | null> {
    const { result, states } = await this.#run('setPaused', [ref] as const, now, DURABLE, (call) => ({
      keys: this.#partitionKeys(ref.userId),
      args: { ...this.#head(now), ...this.#statesArgs(call), paused, actor },
    }))
    return result.transition ? transitionOf(states[0], result.transition, now, actor) : null
  }

  async hold(ref: AgentRef, request: HoldRequest, now: number): Promise<HoldResult> {
    const fleetRef = fleetOf(ref.userId)
    // Holds are hot state only: a failover may lose one, never an event. No replica waits.
    const { result, states } = await this.#run('hold', [ref, fleetRef] as const, now, !DURABLE, (call) => ({
      keys: this.#partitionKeys(ref.userId),
      args: {
        ...this.#head(now),
        ...this.#statesArgs(call),
        hold: { id: request.holdId, amount: request.costNano, expires: request.expiresAt, key_id: agentKeyId(ref.userId, ref.agentId), agent_id: ref.agentId, run: request.runId },
        rate: request.rate && this.#rateArgs(ref.userId, request.rate),
      },
    }))
    if ('limited' in result) throw new RateLimitedError(rateOf(result.limited))
    const [agent, fleet] = states
    const judged = (s: (typeof result)['agent']): Judged => ({ pause: { ...RUNNING, ...s.pause, reason: null }, spent: s.spent, held: s.held, alerted: {} })
    return {
      refusal: result.refusal ?? null,
      ...pausedBy(told(result.agent.pause.reason), told(result.fleet.pause.reason), result.run_stopped),
      remainingNano: holdRoom([
        { s: judged(result.agent), meters: agent.meters },
        { s: judged(result.fleet), meters: fleet.meters },
      ]),
      rate: result.rate ? rateOf(result.rate) : null,
    }
  }

  async release(userId: string, holdId: string, now: number, charge?: RateCharge): Promise<{ hold: ReleasedHold | null; rate: RateState | null }> {
    const names = this.#names(fleetOf(userId))
    const reply = await this.#once1('release', { fleet: names.state }, { now, hold: holdId, agent_base: names.agentBase, rate: charge && this.#rateArgs(userId, charge) })
    if (isControlReply(reply)) throw new StoreUnavailableError('Redis', `the release script answered ${reply.control}`)
    if ('limited' in reply) throw new RateLimitedError(rateOf(reply.limited))
    const rate = reply.rate ? rateOf(reply.rate) : null
    return { hold: reply.released ? { agentId: reply.released.agent_id, costNano: reply.released.amount } : null, rate }
  }

  async ping(): Promise<void> {
    await this.#redis.ping()
  }

  /**
   * Unlinks every key of the user's states (each agent the index or `agentIds` names, and the
   * fleet: their :s and the keys named after it), the user's agent index and the budgets. All
   * carry the user's partition tag: one slot, so one call per chunk, on a cluster too.
   */
  async erase(userId: string, o: { agentIds: readonly string[]; budgets: readonly string[] }): Promise<number> {
    const user = this.#userNames(userId)
    const indexed = await unavailableOnError(() => this.#redis.zrange(user.index, '0', '-1'))
    // The index's '' member marks it loaded; the fleet ('') is erased as an agent anyway.
    const agents = new Set([...o.agentIds, ...indexed, FLEET])
    const named = new Set<string>()
    for (const agentId of agents) {
      const ref = { userId, agentId }
      const { agentBase, keyId } = this.#names(ref)
      named.add(`${agentBase}${keyId}`)
      this.#policies.delete(agentKey(ref))
      this.#agentNames.delete(agentKey(ref))
    }
    // An agent with an open hold and nothing stored is named by its fleet's holds (lua/state.lua hold_entry: 'amount key_id agent').
    const fleet = this.#names(fleetOf(userId))
    for (const entry of await unavailableOnError(() => this.#redis.hvals(`${fleet.agentBase}${fleet.keyId}:h`))) {
      const keyId = entry.split(' ')[1]
      if (keyId && /^[0-9a-f]+$/.test(keyId)) named.add(`${fleet.agentBase}${keyId}`)
    }
    const keys = [user.index, ...o.budgets.map((b) => `${user.budgets}${b}`)]
    for (const name of named) keys.push(...STATE_KEY_SUFFIXES.map((suffix) => `${name}${suffix}`))
    let dropped = 0
    for (let i = 0; i < keys.length; i += ERASE_CHUNK) {
      const chunk = keys.slice(i, i + ERASE_CHUNK)
      dropped += await unavailableOnError(() => whileSlotMoves(() => this.#redis.unlink(...chunk)))
    }
    return dropped
  }

  /** The client belongs to the caller, who quits it. */
  async close(): Promise<void> {}

  /**
   * Runs a script over the states of `refs` until it acts: `build` makes the call from the
   * states as this instance knows them, afresh each time. A state not loaded is loaded, a
   * stale policy is learnt, a journal taken over by another instance is rejoined under a
   * new id, and the script runs again; the journal's bound is a 503. An open hold of
   * another agent is the caller's to answer.
   */
  async #run<N extends ScriptName, R extends readonly AgentRef[]>(
    name: N,
    refs: R,
    now: number,
    durable: boolean,
    build: (states: CallStates<R>) => { keys: Parameters<typeof queueScript<N>>[2]; args: object; rest?: readonly string[] },
  ): Promise<{ result: ScriptResult<N>; states: CallStates<R> }> {
    const wait = durable ? this.#replicaWait : NO_REPLICA_WAIT
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const instance = this.#journal.instance
      const states = refs.map((ref) => this.#callState(ref, now)) as unknown as CallStates<R>
      const call = build(states)
      // The script is issued on the client, or on a pipeline whose WAIT follows it (durably).
      const raw = await this.#call(() => durably(this.#redis, wait, (c) => queueScript(c, name, call.keys, call.args, call.rest), (r) => !isControl(r)))
      const reply = parseReply(name, raw)
      if (!isControlReply(reply)) return { result: reply, states }
      await this.#settle(reply, states, instance, now)
    }
    throw new StoreUnavailableError('Redis', `the hot state's ${name} script did not settle in ${MAX_ATTEMPTS} attempts (states expiring or flushed between loads, or a journal fenced again and again)`)
  }

  /** Does what a control answer asks for, before the script runs again. */
  async #settle(reply: Control, states: ReadonlyArray<CallState>, instance: string, now: number): Promise<void> {
    const byKey = (key: string) => states.find((s) => s.key === key)
    switch (reply.control) {
      case 'FENCED':
        return this.#journal.rejoin(instance)
      case 'NEEDS_LOAD':
        // ClickHouse's failures are classified as ClickHouse's.
        return this.#loadStates((reply.detail.keys ?? []).map((key) => byKey(key)!.ref), now)
      case 'STALE':
        for (const s of reply.detail.stale ?? []) {
          const ref = byKey(s.key)!.ref
          this.#policies.set(agentKey(ref), { pv: s.pv, policy: s.policy === undefined ? defaultPolicy(ref) : agentPolicyJson.parse(JSON.parse(s.policy)) })
        }
        return
      case 'FULL': {
        const backlog = this.#journal.backlog()
        throw new JournalFullError({ ...backlog, rows: Math.max(backlog.rows, this.#journal.streamRows) })
      }
      case 'HOLD_OF_ANOTHER_AGENT':
        throw holdOfAnotherAgent(reply.detail.hold ?? '')
    }
  }

  /** A script that needs no state's policy, run once: its control answer (NEEDS_LOAD) is the caller's. */
  async #once1<N extends ScriptName>(name: N, keys: Parameters<typeof queueScript<N>>[2], args: object, rest?: readonly string[]): Promise<Control | ScriptResult<N>> {
    return parseReply(name, await this.#call(() => queueScript(this.#redis, name, keys, args, rest) as Promise<unknown>))
  }

  /**
   * A script's call to Redis. A Redis without the library (new, restarted, or a master that
   * joined a cluster) has it loaded, and the call is made again: the call that found it
   * missing did nothing.
   */
  async #call(send: () => Promise<unknown>): Promise<unknown> {
    return unavailableOnError(async () => {
      try {
        return await whileSlotMoves(send)
      } catch (err) {
        if (!isMissingLibrary(err)) throw err
        this.#libraryLoad ??= loadLibrary(this.#redis).finally(() => (this.#libraryLoad = null))
        await this.#libraryLoad
        return whileSlotMoves(send)
      }
    })
  }

  /** A state as a call sees it now: its policy as known here, and the meters resolved from it. */
  #callState(ref: AgentRef, now: number): CallState {
    const known = this.#policies.get(agentKey(ref)) ?? { pv: 0, policy: defaultPolicy(ref) }
    const names = this.#names(ref)
    return { ref, key: names.state, names, known, meters: resolveMeters(metersOf(known.policy), now) }
  }

  /**
   * The states of a call as the scripts take them (lua/state.lua read_states): each by its key
   * id, with its policy's version, its meters (each distinct list once), its ids,
   * its daily budget (the projection's) and, for a fleet, its user's agent index.
   */
  #statesArgs(states: readonly CallState[]): { base: string; meters: LuaMeter[][]; states: StateArgs[] } {
    // Each list once by its content: agents configured alike (every agent a client starts
    // with the same config) share one, and the script decodes it once, not once per state.
    const lists: LuaMeter[][] = []
    const indexOf = new Map<string, number>()
    const args = states.map((s): StateArgs => {
      const { lua, key } = luaMeters(s.meters)
      let i = indexOf.get(key)
      if (i === undefined) indexOf.set(key, (i = lists.push(lua) - 1))
      return {
        id: s.names.keyId,
        pv: s.known.pv,
        meters: i + 1,
        user: s.ref.userId,
        agent: s.ref.agentId,
        ...(s.known.policy.thresholdNano !== null ? { budget: s.known.policy.thresholdNano } : {}),
        ...(isFleet(s.ref) ? { index: this.#userNames(s.ref.userId).index } : {}),
        ...(s.known.policy.runBudgetNano !== null ? { run_budget: s.known.policy.runBudgetNano } : {}),
      }
    })
    return { base: states[0]!.names.agentBase, meters: lists, states: args }
  }

  #lastTime = { ms: Number.NaN, text: '' }

  /** The arguments every journaling script takes (lua/state.lua). */
  #head(now: number) {
    // `now` as ClickHouse text, for the rare transition row: formatted once per millisecond.
    if (this.#lastTime.ms !== now) this.#lastTime = { ms: now, text: toChDateTime(now) }
    return { now, ttl: AGENT_TTL_MS, instance: this.#journal.instance, stream_rows: this.#journal.streamRows, at: this.#lastTime.text, run_idle: this.#runIdleMs }
  }

  /**
   * Loads the states of `refs` (one user's partition) from ClickHouse and installs them in
   * one script call (the loader batches the reads of what is asked for meanwhile). One load
   * per state in flight: every script that answered NEEDS_LOAD was sent before the load's
   * install on the same connection (one node per slot), which Redis answers in order, so
   * they all find the load still in flight and wait for it, never start another.
   */
  async #loadStates(refs: readonly AgentRef[], now: number): Promise<void> {
    const waits: Array<Promise<void>> = []
    const fresh: AgentRef[] = []
    for (const ref of refs) {
      const loading = this.#loading.get(agentKey(ref))
      if (loading) waits.push(loading)
      else fresh.push(ref)
    }
    if (fresh.length > 0) {
      const loading = (async () => {
        const loads = await Promise.all(fresh.map((ref) => this.#loader(ref, now))) // ClickHouse's failures are classified as ClickHouse's
        await unavailableOnError(() => this.#install(fresh, loads, now))
      })().finally(() => {
        for (const ref of fresh) this.#loading.delete(agentKey(ref))
      })
      for (const ref of fresh) this.#loading.set(agentKey(ref), loading)
      waits.push(loading)
    }
    await Promise.all(waits)
  }

  /** One load per key in flight (#loadStates says why that is enough). */
  #once(id: string, load: () => Promise<void>): Promise<void> {
    let loading = this.#loading.get(id)
    if (!loading) {
      loading = load().finally(() => this.#loading.delete(id))
      this.#loading.set(id, loading)
    }
    return loading
  }

  /**
   * Installs states as ClickHouse has them (lua/load.lua), each only if Redis has none: in
   * calls of at most INSTALL_MAX_STATES states and INSTALL_MAX_IDS event ids, one after the
   * other. A user's 10,000 agents loaded at once after a restart were one call that held
   * Redis for seconds, past the command timeout; each state installs on its own, so a
   * split changes nothing else.
   */
  async #install(refs: readonly AgentRef[], loads: readonly AgentLoad[], now: number): Promise<void> {
    for (let start = 0; start < refs.length; ) {
      let end = start
      let ids = 0
      while (end < refs.length && end - start < INSTALL_MAX_STATES && (end === start || ids + loads[end]!.seen.length <= INSTALL_MAX_IDS)) {
        ids += loads[end]!.seen.length
        end++
      }
      await this.#installCall(refs.slice(start, end), loads.slice(start, end), now)
      start = end
    }
  }

  async #installCall(refs: readonly AgentRef[], loads: readonly AgentLoad[], now: number): Promise<void> {
    const fingerprints: string[] = []
    const states = refs.map((ref, i) => {
      const load = loads[i]!
      const policy = load.policy ?? defaultPolicy(ref)
      const pv = load.policy ? load.policyVersion : 0
      const minutes = [...load.minutes].sort((x, y) => x.minute - y.minute)
      // The levels the loaded spend is at count as fired: they were, with the events that
      // crossed them, or their level came with a config since.
      // Per meter of the policy, in order (lua/state.lua keeps them so).
      const meters = resolveMeters(metersOf(policy), now)
      const periods = loadedPeriods(meters, minutes, load.history ?? NO_HISTORY)
      const alerted = meters.map((m) =>
        m.alertAt.length === 0 ? 0 : levelsReached(m, m.period ? periods.spent.get(m)! : minutes.reduce((sum, b) => (b.minute >= m.from ? sum + b.costNano : sum), 0)),
      )
      const pause = load.pause ?? RUNNING
      // Fingerprints as ARGV: a busy agent's seen ids can be many.
      const first = fingerprints.length + 2
      for (const s of load.seen) fingerprints.push(eventFingerprint(ref.userId, ref.agentId, s.eventId))
      return {
        key: this.#names(ref).state,
        minutes: minutes.map((m) => [m.minute, m.costNano, m.llmCalls]),
        seen: load.seen.map((s) => [s.costNano, s.minute]),
        fps: first,
        pv,
        ...(pv > 0 ? { policy: JSON.stringify(policy), shown: shownConfig(policy) } : {}),
        pause: { paused: pause.paused, reason: pause.reason ?? '', override: pause.override, since: pause.since },
        ignored: load.ignored ?? undefined,
        alerted,
        ...(periods.spent.size > 0 ? { periods: meters.filter((m) => m.period).map((m) => [tallyCode(m), m.from, periods.spent.get(m)!]) } : {}),
        ...(periods.hours.length > 0 ? { hours: periods.hours } : {}),
        ...(load.runs && load.runs.length > 0 ? { runs: load.runs.map((r) => [r.runId, r.spentNano, r.stopped ? 1 : 0, r.lastAt]) } : {}),
      }
    })
    const reply = await this.#once1('load', { ids: this.#partitionKeys(refs[0]!.userId).ids }, { now, ttl: AGENT_TTL_MS, states }, fingerprints)
    if (isControlReply(reply)) throw new StoreUnavailableError('Redis', `the load script answered ${reply.control}`)
    reply.installed.forEach((installed, i) => {
      if (installed) this.#policies.set(agentKey(refs[i]!), { pv: states[i]!.pv, policy: loads[i]!.policy ?? defaultPolicy(refs[i]!) })
    })
  }

  /** The keys of the user's partition every journaling script takes (lua/state.lua). */
  #partitionKeys(userId: string): { journal: string; fenced: string; ids: string } {
    const partition = this.#journal.partitionOf(userId)
    return { journal: this.#journal.streamKey(partition), fenced: this.#journal.fencedKey(partition), ids: this.#userNames(userId).ids }
  }

  // Key names cost SHA-256s (redis-keys.ts); an agent's and a user's are the same every
  // event, so the recent ones are kept (two hashes a request were 4 % of the CPU, bench/).
  readonly #agentNames = new LRUCache<string, StateNames>({ max: 50_000 })
  readonly #users = new LRUCache<string, { index: string; ids: string; budgets: string }>({ max: 10_000 })

  #names(ref: AgentRef): StateNames {
    const id = agentKey(ref)
    let names = this.#agentNames.get(id)
    if (!names) {
      // The user's partition tag: the state's keys share a slot with every key of its user,
      // the journal streams its rows go to included (redis-keys.ts).
      const agentBase = `${this.#prefix}${partitionTag(this.#journal.partitionOf(ref.userId))}:hs:`
      const keyId = agentKeyId(ref.userId, ref.agentId)
      names = {
        agentBase,
        keyId,
        state: `${agentBase}${keyId}:s`,
      }
      this.#agentNames.set(id, names)
    }
    return names
  }

  /** A user's index of agents, its partition's event-id tables, and the prefix of its API keys' budgets (:rl:<budget>). */
  #userNames(userId: string): { index: string; ids: string; budgets: string } {
    let names = this.#users.get(userId)
    if (!names) {
      const tag = partitionTag(this.#journal.partitionOf(userId))
      names = { index: `${this.#prefix}${tag}:u:${userKeyId(userId)}`, ids: `${this.#prefix}${tag}:ids`, budgets: `${this.#prefix}${tag}:rl:` }
      this.#users.set(userId, names)
    }
    return names
  }
}

/** A state's key names: its :s key, the name its user's agents' keys start with, and its own key id after it. */
interface StateNames {
  state: string
  agentBase: string
  keyId: string
}

/**
 * A loaded state's periods (lua/load.lua): what each holds, from the stored spend before the
 * history's cut and the loaded minutes (all from the cut on), and its rolling windows' cost per
 * UTC hour but the newest minute's (the script's newest bucket, added to :d when it is written).
 */
function loadedPeriods(meters: readonly ResolvedMeter[], minutes: ReadonlyArray<{ minute: number; costNano: number }>, history: PeriodHistory): { spent: Map<ResolvedMeter, number>; hours: number[] } {
  const spent = new Map<ResolvedMeter, number>()
  let oldest = Infinity
  for (const m of meters) {
    if (!m.period) continue
    spent.set(m, storedSince(history, m.from) + minutes.reduce((sum, b) => (b.minute >= Math.max(m.from, history.cut) ? sum + b.costNano : sum), 0))
    if ('windowDays' in m.period) oldest = Math.min(oldest, m.from)
  }
  if (oldest === Infinity) return { spent, hours: [] }
  const byHour = storedHours(history, oldest)
  for (const b of minutes.slice(0, -1)) if (b.minute >= oldest) byHour.set(Math.floor(b.minute / 60), (byHour.get(Math.floor(b.minute / 60)) ?? 0) + b.costNano)
  return { spent, hours: [...byHour].flat() }
}

/** What a script answered of a state's periods (lua/state.lua period_answer()), with each one's meter and projection. */
function periodsOf(meters: readonly ResolvedMeter[], spent: readonly number[] | undefined, lastHour: number | undefined, now: number): readonly PeriodSpend[] {
  if (!spent) return NO_PERIODS
  return meters.filter((m) => m.period).map((meter, i) => ({ meter, spentNano: spent[i]!, exhaustionAt: periodExhaustionAt(meter, spent[i]!, lastHour ?? 0, now) }))
}

/** States a listing reads in one call (lua/read.lua). */
const LIST_CHUNK = 500

/** A state as a read (lua/read.lua) answers it, with its policy as known here. */
function snapshotOf(r: ScriptResult<'read'>['states'][number], s: Pick<CallState, 'known' | 'meters'>, now: number): AgentSnapshot {
  const { known } = s
  return {
    active: r.active,
    lastEventMinute: r.active ? r.last_minute : null,
    totalNano: r.total,
    llmCalls: r.calls,
    pause: r.pause.paused || r.pause.override ? { paused: r.pause.paused, reason: r.pause.paused ? pauseReasonOf(r.pause.reason) : null, override: r.pause.override, since: r.pause.since } : RUNNING,
    policy: known.policy,
    configured: known.pv > 0,
    ignored: { since: r.ignored.since, calls: r.ignored.calls, nano: r.ignored.nano, flagged: r.ignored.flagged },
    periods: periodsOf(s.meters, r.periods, r.last_hour, now),
    heldNano: r.held,
  }
}

/**
 * The keys of a state, after its name (agentBase + key id): its packed state, its window's
 * minutes and days, its period tallies' hours, its runs (lua/state.lua, lua/load.lua).
 */
const STATE_KEY_SUFFIXES = [':s', ':w', ':d', ':hz', ':h', ':r', ':rz', ':rh'] as const

/** Keys one UNLINK of an erasure names. */
const ERASE_CHUNK = 500

/** Keys live 25 h after an agent's last write: longer than the window, so only idle agents expire. */
const AGENT_TTL_MS = 25 * 60 * 60 * 1000

/** The most states, and event ids, one install call carries (#install). */
const INSTALL_MAX_STATES = 500
const INSTALL_MAX_IDS = 20_000

/** Loads, stale policies and fences a call may meet before it acts. */
const MAX_ATTEMPTS = 5

/** Whether a script's write must be on the replicas before it is answered (replicaWait). */
const DURABLE = true

// A meters list resolved for a minute is reused for that minute (meters.ts): so is its Lua form.
const luaForms = new WeakMap<readonly ResolvedMeter[], { lua: LuaMeter[]; key: string }>()

/** Resolved meters as lua/rules.lua reads them, and that form as text: lists alike in content have the same key. */
function luaMeters(meters: readonly ResolvedMeter[]): { lua: LuaMeter[]; key: string } {
  let form = luaForms.get(meters)
  if (!form) {
    const lua = meters.map((m): LuaMeter => ({
      id: m.id,
      limit: m.limitNano,
      from: m.from,
      minutes: m.windowMinutes,
      alert_at: m.alertAt,
      ...(m.autoResume ? { auto_resume: true } : {}),
      ...(m.countsHolds ? { holds: true } : {}),
      ...(m.period ? { tally: tallyCode(m), ...('windowDays' in m.period ? { rolling: true } : {}) } : {}),
    }))
    form = { lua, key: JSON.stringify(lua) }
    luaForms.set(meters, form)
  }
  return form
}

/** A budget as a script tells it. */
function rateOf(r: RateReply): RateState {
  return { max: r.max, current: r.current, ttlMs: r.ttl }
}

/** Whether a state is paused and why, as a script tells it: its reason, '' when running. */
function told(reason: string): Pick<PauseState, 'paused' | 'reason'> {
  return reason === '' ? RUNNING : { paused: true, reason: pauseReasonOf(reason) }
}

/** A transition a script journaled, as the caller announces it. */
function transitionOf(s: Pick<CallState, 'ref' | 'known' | 'meters'>, t: TransitionReply, now: number, actor = SYSTEM_ACTOR): Transition {
  // The meter of a pause it made, or of a pause ending by itself.
  const m = t.meter >= 0 && (t.reason === s.meters[t.meter]?.id || t.reason === 'auto_resume') ? s.meters[t.meter] : undefined
  const { policy } = s.known
  return {
    userId: s.ref.userId,
    agentId: s.ref.agentId,
    at: now,
    version: t.version,
    actor,
    paused: t.paused,
    reason: t.reason,
    override: t.override,
    totalNano: t.total,
    thresholdNano: budgetMeter(policy)?.limitNano ?? null,
    webhookUrl: policy.webhookUrl,
    ...(m ? { meter: { id: m.id, spentNano: t.spent ?? 0, limitNano: m.limitNano, windowMinutes: m.windowMinutes } } : {}),
    ...(t.held !== 0 ? { heldNano: t.held } : {}),
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
