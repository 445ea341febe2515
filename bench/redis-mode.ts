/**
 * Ingest with the Redis hot state, for a run whose main phases are embedded: burnrate on a
 * fresh DATA_DIR against a Redis deployment of the run's own, AOF on with appendfsync
 * everysec (the production shape; the project's test helpers start it), in two shapes:
 *
 * - REDIS_URL, one redis-server: cold (every agent loaded from
 *   ClickHouse), warm saturation with what it cost Redis (INFO commandstats and
 *   redis-server's CPU over the phase, bench/redis-figures.ts), the same saturation in
 *   POST /events/batch requests of BATCH events with what it cost Redis, which script each
 *   call ran (a pass of one event per agent with every command in the SLOWLOG), 50 % of it; then
 *   what Redis holds per agent and per remembered event id; POST /holds at saturation for
 *   the same agents, after the memory is measured so their keys do not count in
 *   it; a cold start as an operator meets it: agents with a history in ClickHouse,
 *   Redis flushed under the running burnrate, then each agent's first event; last, USERS
 *   users at saturation (usersPhase).
 * - REDIS_CLUSTER_NODES, three masters with a replica each: cold, warm
 *   saturation, USERS users at saturation with each master's share of the script time,
 *   and warm saturation again with REDIS_WAIT_REPLICAS=1 (every durable write waits for a
 *   replica to hold it).
 *
 * Both end with the stored = acknowledged check over every phase, and count their failures.
 */
import { randomUUID } from 'node:crypto'
import { mkdir, rm, rmdir } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { Redis } from 'ioredis'
import { startRedis } from '../test/helpers/redis.ts'
import { startRedisCluster } from '../test/helpers/redis-cluster.ts'
import type { LoadSummary } from './load.ts'
import { STORE_ENV, acknowledged, createKey, failures, getJson, halfOf, load, periodBudgetsPhase, postJson, redisMemory, startBurnrate, stop, storedLlmCalls, unanswered, withCpu, type LoadOptions } from './processes.ts'
import { loaderFigures, measureMasters, measureRedis, readTrace, sampleScripts, type LoaderFigures, type MasterCost, type RedisCost, type ScriptStat } from './redis-figures.ts'

type Timed = LoadSummary & { cpuUsPerRequest: number | null; cpuUsPerEvent: number | null }

/** Events per POST /events/batch request in the batch phase. */
export const BATCH = 100
/** Users (API keys) of the phase that spreads the load over a cluster's masters. */
export const USERS = 48

/** What every store run measures and checks. */
export interface StoreRunResult {
  cold: LoadSummary
  warm: Timed
  /** What the warm phase cost the store (REDIS_URL only: INFO commandstats, redis-server's CPU); null when not measured. */
  warmRedis: RedisCost | null
  /** Every acknowledged event stored once; up to `cutOff` more (requests cut off unanswered when a timed run stopped). */
  check: { stored: number; acked: number; cutOff: number; ok: boolean }
  /** Non-2xx responses, connection errors and timeouts over every phase of the run, warmups included. */
  failed: number
}

export interface RedisModeResult extends StoreRunResult {
  /** Saturation in POST /events/batch requests of BATCH events, right after the warm phase, on its agents and key. */
  batch: Timed
  /** What the batch phase cost Redis (INFO commandstats over it, per event). */
  batchRedis: RedisCost
  /** Which script each call ran, from a pass of one event for each of `events` warm agents with every command in the SLOWLOG. */
  scripts: { events: number; byScript: ScriptStat[]; complete: boolean }
  half: LoadSummary
  holds: Timed
  /** Saturation with a month and a rolling 30 days on every agent and the fleet (a user of its own), and what Redis holds per such agent. */
  periods: { cold: LoadSummary; saturation: Timed; memory: { agents: number; bytesPerAgent: number } }
  memory: Awaited<ReturnType<typeof redisMemory>>
  coldStart: ColdStartResult
  /** The agent loader's batches (bench/trace-clickhouse.ts) in the cold phases: the run's first, the cold start's new agents, and after FLUSHALL. */
  loader: { cold: LoaderFigures; newAgents: LoaderFigures; flushed: LoaderFigures }
  users: UsersResult
}

/** USERS users' saturation (usersPhase). */
export interface UsersResult {
  users: number
  /** One event for each agent, every one new: the agents made known before the measured phase. */
  cold: LoadSummary
  saturation: Timed
  /** Each master's FCALL line and time over the saturation phase (one for a single redis-server). */
  masters: MasterCost[]
}

/** The cold start an operator meets: agents with a history, Redis flushed under burnrate, then each agent's first event. */
export interface ColdStartResult {
  agents: number
  /** HISTORY_EVENTS passes of one event per agent; the first one's agents are new to burnrate (no history). */
  history: LoadSummary[]
  /** Seconds from the last history event acknowledged to every one of them in ClickHouse and the journal empty. */
  shippedS: number
  /** The first event of each agent after FLUSHALL. */
  flushed: LoadSummary
  /**
   * After that pass: seconds until its events were in ClickHouse too (null: not within
   * SHIPPED_TIMEOUT_MS, the journal does not ship after a flush); what burnrate's journal
   * keeps in Redis: whether the instance is registered again (its lease renewal does it,
   * every third of a lease), and the partition count (null: not recorded again).
   */
  after: { shippedS: number | null; registered: boolean; partitions: string | null }
}

export interface ClusterModeResult extends StoreRunResult {
  users: UsersResult
  /** Warm saturation on the same agents, burnrate restarted with REDIS_WAIT_REPLICAS=1. */
  warmWait: Timed
}

/** A master of the store: its address, and a client of the bench's own on it. */
interface Master {
  node: string
  client: Redis
}

/** A Redis deployment of the run's own: the environment that points burnrate at it, and how to stop it. */
interface Store {
  env: Record<string, string>
  stop(): Promise<void>
  /** Starts measuring what a phase costs the store; the function returned ends it, for the events the phase acknowledged. */
  measure?(): Promise<(events: number) => Promise<RedisCost>>
  /** The masters, as they are now (the single redis-server, or each master of a cluster). */
  masters(): Promise<Master[]>
}

/** The burnrate under test, for the phases a store run adds after cold and warm. */
interface Target {
  readonly url: string
  readonly pid: number | undefined
  readonly apiKey: string
  /** A new API key of `user` (burnrate's CLI, as the run's key). */
  createKey(name: string, user: string): Promise<string>
  /**
   * Stops this burnrate and starts another on the same DATA_DIR and store with `env` added:
   * chDB opens a data path once per process, so two cannot run side by side on it.
   */
  restart(env: Record<string, string>): Promise<void>
}

/**
 * The phases a store run adds: POST /events phases count in stored = acknowledged; the others
 * (POST /holds) only in the failures. The events of `keys` (other users) count in stored too.
 */
interface MorePhases {
  events: LoadSummary[]
  others: LoadSummary[]
  keys?: string[]
}

/** How long the cluster's nodes get to stop (a master waits up to 10 s for its replicas: Redis's shutdown-timeout). */
const CLUSTER_STOP_MS = 20_000


/**
 * One store run: `startStore` on `dir`/store, burnrate on `dir`/data with the store's
 * environment, a key, cold and warm saturation on `agentPrefix`, then `more`; last, the
 * stored = acknowledged check through whichever burnrate is running then, and both stopped.
 */
async function storeRun<S extends Store, M extends MorePhases>(
  dir: string,
  opts: LoadOptions & { warmup: number },
  agentPrefix: string,
  startStore: (dir: string) => Promise<S>,
  more: (target: Target, store: S, phases: { cold: LoadSummary; warm: Timed }) => Promise<M>,
): Promise<StoreRunResult & Omit<M, keyof MorePhases>> {
  await mkdir(join(dir, 'store'), { recursive: true })
  await mkdir(join(dir, 'data'), { recursive: true })
  const store = await startStore(join(dir, 'store'))
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: join(dir, 'data'), PORT: '0', HOST: '127.0.0.1', METRICS_PORT: '0', CONFIG_RATE_LIMIT: '100000000' }
    for (const name of STORE_ENV) delete env[name]
    Object.assign(env, store.env)
    // Each burnrate its own log: startBurnrate finds the address in the first 'serving' line of the file.
    let started = 0
    const start = (extra: Record<string, string>) => startBurnrate({ ...env, ...extra }, join(dir, `burnrate-${++started}.log`), null)
    let burnrate = await start({})
    try {
      const apiKey = await createKey(env, 'store-run')
      const target: Target = {
        get url() {
          return burnrate.url
        },
        get pid() {
          return burnrate.child.pid
        },
        apiKey,
        createKey: (name, user) => createKey(env, name, user),
        async restart(extra) {
          await stop(burnrate.child, 'burnrate')
          burnrate = await start(extra)
        },
      }
      const cold = await load(target.url, apiKey, opts, { agentPrefix, warmup: opts.warmup, load: 'once-per-agent' })
      // Redis's counters are reset just before the phase and read just after it: the load
      // process's start and end count in them, without a request of the phase missed.
      const measuring = await store.measure?.()
      const warm = await withCpu(target.pid, load(target.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation' }))
      const warmRedis = measuring ? await measuring(warm.ok) : null
      const { events, others, keys = [], ...extra } = await more(target, store, { cold, warm })
      let stored = 0
      for (const key of [apiKey, ...keys]) stored += await storedLlmCalls(target.url, key)
      const runs = [cold, warm, ...events]
      const acked = runs.reduce((n, s) => n + acknowledged(s), 0)
      // Requests autocannon cut off at the end of a timed run may have been stored unseen.
      const cut = runs.reduce((n, s) => n + unanswered(s), 0)
      const failed = [...runs, ...others].reduce((n, s) => n + failures(s), 0)
      return { cold, warm, warmRedis, ...extra, check: { stored, acked, cutOff: cut, ok: stored >= acked && stored <= acked + cut }, failed }
    } finally {
      await stop(burnrate.child, 'burnrate')
    }
  } finally {
    await store.stop()
  }
}

/** REDIS_URL on a redis-server of the run's own. */
export async function redisMode(dir: string, opts: LoadOptions & { warmup: number; coldAgents: number }, agentPrefix: string): Promise<RedisModeResult> {
  const trace = join(dir, 'clickhouse-trace.jsonl')
  return storeRun(
    dir,
    opts,
    agentPrefix,
    async (storeDir) => {
      const redis = await startRedis({ dir: storeDir })
      // burnrate (and its CLI) with bench/trace-clickhouse.ts preloaded: its ClickHouse queries timed, to a file.
      const env = {
        REDIS_URL: redis.url,
        NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${JSON.stringify(TRACE_PRELOAD)}`.trim(),
        BENCH_CLICKHOUSE_TRACE: trace,
      }
      return {
        url: redis.url,
        client: redis.redis,
        env,
        stop: () => redis.stop(),
        measure: () => measureRedis(redis.redis),
        masters: async () => [{ node: `127.0.0.1:${redis.port}`, client: redis.redis }],
      }
    },
    async (t, redis, { cold, warm }) => {
      // Right after the warm phase, the same saturation on the same agents and key, in
      // batches: what the group commit makes of events that arrive together.
      const measuring = await redis.measure()
      const batch = await withCpu(t.pid, load(t.url, t.apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', batch: BATCH }))
      const batchRedis = await measuring(acknowledged(batch))
      // Which script each call runs, in a pass of its own: one event for each of (at most
      // SAMPLED_AGENTS of) the warm phase's agents, all known, every command in the SLOWLOG.
      const sampled = Math.min(opts.agents, SAMPLED_AGENTS)
      const sample = await sampleScripts(redis.client, sampled * SLOWLOG_ENTRIES_PER_EVENT + 1000, () =>
        load(t.url, t.apiKey, opts, { agentPrefix, warmup: 0, load: 'once-per-agent', agents: sampled }),
      )
      const half = await load(t.url, t.apiKey, opts, { agentPrefix, warmup: opts.warmup, load: { rate: halfOf(warm) } })
      const memory = await redisMemory(redis.url)
      // Holds store no llm_call: they stay out of stored = acknowledged.
      const holds = await withCpu(t.pid, load(t.url, t.apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', holds: true }))
      // A month and a rolling 30 days on every agent and the fleet of a user of their own.
      const periodsKey = await t.createKey('bench-periods', 'bench-periods')
      const periods = await periodBudgetsPhase(t.url, periodsKey, t.pid, opts, `periods-${agentPrefix}`)
      const periodsMemory = await periodsRedisMemory(redis.client, opts.agents)
      const coldStart = await flushedColdStart(t, redis.client, opts, `history-${agentPrefix}`, opts.coldAgents)
      const traced = readTrace(trace)
      const loader = (s: LoadSummary) => loaderFigures(traced, s.startedAt, s.endedAt)
      // Last: after the FLUSHALL above, so that nothing of these users' is flushed before the check.
      const { keys, ...users } = await usersPhase(t, redis, opts, `users-${agentPrefix}`)
      return {
        events: [batch, sample.result, half, periods.cold, periods.saturation, ...coldStart.history, coldStart.flushed, users.cold, users.saturation],
        others: [holds],
        keys: [...keys, periodsKey],
        periods: { ...periods, memory: periodsMemory },
        batch,
        batchRedis,
        users,
        scripts: { events: sample.result.ok, byScript: sample.byScript, complete: sample.complete },
        half,
        holds,
        memory,
        coldStart,
        loader: { cold: loader(cold), newAgents: loader(coldStart.history[0]!), flushed: loader(coldStart.flushed) },
      }
    },
  )
}

const TRACE_PRELOAD = join(import.meta.dirname, 'trace-clickhouse.ts')
/** At most this many agents in the pass whose commands the SLOWLOG records. */
const SAMPLED_AGENTS = 1000
/** Room in the SLOWLOG per event of that pass: two scripts and the twenty-odd commands they call (each entry up to a few kB). */
const SLOWLOG_ENTRIES_PER_EVENT = 50
/** Events each agent of the cold start sends before Redis is flushed: its history in ClickHouse. */
const HISTORY_EVENTS = 3
/** burnrate's Redis keys' prefix (the hot state's and the journal's default). */
const KEY_PREFIX = 'br:'
/** How long the events of a pass may take to reach ClickHouse. */
const SHIPPED_TIMEOUT_MS = 120_000

/**
 * A cold start as an operator meets it: `agents` agents of one user send HISTORY_EVENTS
 * events each (one pass per event: the first pass's agents are new to burnrate), the bench
 * waits until every one of them is in ClickHouse, then Redis is flushed under the running
 * burnrate (FLUSHALL: Redis restarted without its data, or lost) and each agent sends its
 * first event again, all of them loaded from ClickHouse with their history. Nothing else is
 * changed: burnrate runs on, and the check after the run counts these events too.
 */
async function flushedColdStart(t: Target, client: Redis, opts: LoadOptions, agentPrefix: string, agents: number): Promise<ColdStartResult> {
  const pass = () => load(t.url, t.apiKey, opts, { agentPrefix, warmup: 0, load: 'once-per-agent', agents })
  const history: LoadSummary[] = []
  for (let i = 0; i < HISTORY_EVENTS; i++) history.push(await pass())
  const shippedS = await shippedToClickHouse(t, `${agentPrefix}0`)
  if (shippedS === null) throw new Error(`cold start: the history was not in ClickHouse within ${SHIPPED_TIMEOUT_MS / 1000} s`)
  await client.flushall()
  const flushed = await pass()
  // burnrate goes on after the flush: its journal ships again (its lease renewal takes the
  // ownership Redis lost back, src/journal/redis-streams.ts renew), and registers it again;
  // the partition count is recorded at start-up only (register).
  const shippedAfter = await shippedToClickHouse(t, `${agentPrefix}0`)
  const registered = (await client.scard(`${KEY_PREFIX}ship:instances`)) > 0
  const partitions = await client.get(`${KEY_PREFIX}partitions`)
  return { agents, history, shippedS, flushed, after: { shippedS: shippedAfter, registered, partitions } }
}


/**
 * Seconds until everything acknowledged so far is in ClickHouse (null: not within
 * SHIPPED_TIMEOUT_MS): a last event of the user (a tool_call, so not an llm_call the check
 * counts) is readable through GET /agents/events, which reads ClickHouse alone, and the
 * journal is empty (/readyz). A user's rows are appended to one stream and shipped in its
 * order, so once the last one is in ClickHouse every earlier one is; the empty journal says
 * its batch was committed too.
 */
async function shippedToClickHouse(t: Target, agentId: string): Promise<number | null> {
  const started = performance.now()
  const eventId = randomUUID()
  await postJson(t.url, t.apiKey, '/events', { agent_id: agentId, event_type: 'tool_call', tool_name: 'bench-sentinel', event_id: eventId })
  const until = async (done: () => Promise<boolean>) => {
    for (;;) {
      if (await done()) return true
      if (performance.now() - started > SHIPPED_TIMEOUT_MS) return false
      await sleep(100)
    }
  }
  const shipped =
    (await until(async () => {
      const { events } = await getJson<{ events: Array<{ event_id: string }> }>(t.url, t.apiKey, '/agents/events?limit=1')
      return events[0]?.event_id === eventId
    })) &&
    (await until(async () => {
      const res = await fetch(new URL('/readyz', t.url), { signal: AbortSignal.timeout(10_000) })
      return ((await res.json()) as { journal?: { rows?: number } }).journal?.rows === 0
    }))
  return shipped ? (performance.now() - started) / 1000 : null
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * What Redis holds per agent of the period-budget phase: MEMORY USAGE of every key of its
 * state (:s, :w, :d), summed over the states whose stored policy has a rolling window (only
 * that phase's agents and fleet have one) and divided by their number.
 */
async function periodsRedisMemory(client: Redis, agents: number): Promise<{ agents: number; bytesPerAgent: number }> {
  let bytes = 0
  let found = 0
  for (let cursor = '0'; ; ) {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${KEY_PREFIX}*:hs:*:s`, 'COUNT', 1000)
    for (const key of keys) {
      if (!(await client.hget(key, 'policy'))?.includes('"windowDays"')) continue
      const base = key.slice(0, -2)
      for (const k of [key, `${base}:w`, `${base}:d`]) bytes += (await client.memory('USAGE', k)) ?? 0
      found++
    }
    if (next === '0') break
    cursor = next
  }
  // The fleet's state is among them: one state more than the agents.
  return { agents: Math.min(found, agents), bytesPerAgent: found === 0 ? 0 : bytes / found }
}

/** burnrate's CLI starts a process per key: this many at a time. */
const KEYS_AT_ONCE = 4

/**
 * USERS users, an API key each (burnrate's CLI), and the run's agents spread over them
 * (agent i is user i mod USERS's): one event for each agent (all new), then saturation for
 * `duration` seconds, with each master's FCALL line and time over it. A user's keys hash to
 * one partition, one slot: with several users the partitions, and their scripts, spread over
 * a cluster's masters. On one machine the masters share its cores, so the throughput cannot
 * rise; the spread of the script time is what the phase shows.
 */
async function usersPhase(t: Target, store: Store, opts: LoadOptions, agentPrefix: string): Promise<UsersResult & { keys: string[] }> {
  const keys: string[] = []
  for (let i = 0; i < USERS; i += KEYS_AT_ONCE) {
    const users = Array.from({ length: Math.min(KEYS_AT_ONCE, USERS - i) }, (_, j) => `bench-user-${i + j}`)
    keys.push(...(await Promise.all(users.map((user) => t.createKey(user, user)))))
  }
  const cold = await load(t.url, t.apiKey, opts, { agentPrefix, warmup: 0, load: 'once-per-agent', keys })
  const measuring = await measureMasters(await store.masters())
  const saturation = await withCpu(t.pid, load(t.url, t.apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', keys }))
  return { users: USERS, keys, cold, saturation, masters: await measuring() }
}

/**
 * REDIS_CLUSTER_NODES on a Redis Cluster of the run's own. The replica wait is a
 * setting of the process, so its phase is a second burnrate, started once the first has
 * stopped, on the same DATA_DIR and cluster: the same agents, warm in Redis and in
 * ClickHouse as they were for the first warm phase, the same key, and one store for the
 * check. A fresh DATA_DIR would not measure the same thing: its ClickHouse would lack the
 * key and the agents' history that Redis has, and the check would be split over two stores.
 * The second process has its warmup (on the cold phase's warmup agents, warm too), so its
 * JIT and caches are warm before the measured seconds.
 */
export async function clusterMode(dir: string, opts: LoadOptions & { warmup: number }, agentPrefix: string): Promise<ClusterModeResult> {
  return storeRun(
    dir,
    opts,
    agentPrefix,
    async () => {
      const cluster = await startRedisCluster()
      return {
        env: { REDIS_CLUSTER_NODES: cluster.seeds.join(',') },
        // Each node's own client (the helper's), the masters by their role now.
        async masters() {
          const roles = await Promise.all(cluster.nodes.map(async (n) => /role:master/.test(await n.redis.info('replication'))))
          return cluster.nodes.filter((_, i) => roles[i]).map((n) => ({ node: `127.0.0.1:${n.port}`, client: n.redis }))
        },
        async stop() {
          // A replica sent SIGTERM while it writes its first AOF after a full sync (just
          // created, or resynced under load) refuses to exit ("Writing initial AOF, can't
          // exit.") and stays up: after a deadline, what has not stopped is killed.
          let timer: NodeJS.Timeout | undefined
          const stopped = await Promise.race([
            cluster.stop().then(() => true),
            new Promise<false>((r) => (timer = setTimeout(() => r(false), CLUSTER_STOP_MS))),
          ])
          clearTimeout(timer)
          if (!stopped) {
            console.error(`the Redis Cluster had not stopped ${CLUSTER_STOP_MS / 1000} s after SIGTERM; killing it`)
            await Promise.all(cluster.nodes.map((n) => n.kill()))
          }
          // The helper makes each node a directory of its own under a temporary one and
          // leaves them behind; the bench removes them. rmdir removes the parent only if
          // nothing else is in it.
          await Promise.all(cluster.nodes.map((n) => rm(n.dir, { recursive: true, force: true })))
          await rmdir(dirname(cluster.nodes[0]!.dir)).catch(() => {})
        },
      }
    },
    async (t, cluster) => {
      // Before the restart: the replica wait stays out of the comparison with the single Redis's.
      const { keys, ...users } = await usersPhase(t, cluster, opts, `users-${agentPrefix}`)
      await t.restart({ REDIS_WAIT_REPLICAS: '1' })
      const warmWait = await withCpu(t.pid, load(t.url, t.apiKey, opts, { agentPrefix, warmup: opts.warmup, load: 'saturation' }))
      return { events: [users.cold, users.saturation, warmWait], others: [], keys, users, warmWait }
    },
  )
}
