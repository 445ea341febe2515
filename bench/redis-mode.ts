/**
 * Ingest with the Redis hot state, for a run whose main phases are embedded: burnrate on a
 * fresh DATA_DIR against a Redis deployment of the run's own, AOF on with appendfsync
 * everysec (the production shape; the project's test helpers start it), in two shapes:
 *
 * - REDIS_URL, one redis-server: cold (every agent loaded from
 *   ClickHouse), warm saturation, 50 % of it; then what Redis holds per agent and per
 *   remembered event id; last, POST /holds at saturation for the same agents,
 *   after the memory is measured so their keys do not count in it.
 * - REDIS_CLUSTER_NODES, three masters with a replica each: cold, warm
 *   saturation, and warm saturation again with REDIS_WAIT_REPLICAS=1 (every durable write
 *   waits for a replica to hold it).
 *
 * Both end with the stored = acknowledged check over every phase, and count their failures.
 */
import { mkdir, rm, rmdir } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { startRedis } from '../test/helpers/redis.ts'
import { startRedisCluster } from '../test/helpers/redis-cluster.ts'
import type { LoadSummary } from './load.ts'
import { createKey, cutOff, failures, halfOf, load, redisMemory, startBurnrate, stop, storedLlmCalls, withCpu, type LoadOptions } from './processes.ts'

type Timed = LoadSummary & { cpuUsPerRequest: number | null }

/** What every store run measures and checks. */
export interface StoreRunResult {
  cold: LoadSummary
  warm: Timed
  /** Every acknowledged event stored once; up to `cutOff` more (requests cut off unanswered when a timed run stopped). */
  check: { stored: number; acked: number; cutOff: number; ok: boolean }
  /** Non-2xx responses, connection errors and timeouts over every phase of the run, warmups included. */
  failed: number
}

export interface RedisModeResult extends StoreRunResult {
  half: LoadSummary
  holds: Timed
  memory: Awaited<ReturnType<typeof redisMemory>>
}

export interface ClusterModeResult extends StoreRunResult {
  /** Warm saturation on the same agents, burnrate restarted with REDIS_WAIT_REPLICAS=1. */
  warmWait: Timed
}

/** A Redis deployment of the run's own: the environment that points burnrate at it, and how to stop it. */
interface Store {
  env: Record<string, string>
  stop(): Promise<void>
}

/** The burnrate under test, for the phases a store run adds after cold and warm. */
interface Target {
  readonly url: string
  readonly pid: number | undefined
  readonly apiKey: string
  /**
   * Stops this burnrate and starts another on the same DATA_DIR and store with `env` added:
   * chDB opens a data path once per process, so two cannot run side by side on it.
   */
  restart(env: Record<string, string>): Promise<void>
}

/** The phases a store run adds: POST /events phases count in stored = acknowledged; the others (POST /holds) only in the failures. */
interface MorePhases {
  events: LoadSummary[]
  others: LoadSummary[]
}

/** How long the cluster's nodes get to stop (a master waits up to 10 s for its replicas: Redis's shutdown-timeout). */
const CLUSTER_STOP_MS = 20_000

/** Settings of the shell that would point burnrate at other stores, or wait for replicas in a phase that must not. */
const STORE_ENV = ['CLICKHOUSE_URL', 'CLICKHOUSE_USER', 'CLICKHOUSE_PASSWORD', 'CLICKHOUSE_DATABASE', 'REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_WAIT_REPLICAS', 'REDIS_WAIT_TIMEOUT_MS', 'PRICES_FILE']

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
  more: (target: Target, store: S, warm: Timed) => Promise<M>,
): Promise<StoreRunResult & Omit<M, keyof MorePhases>> {
  await mkdir(join(dir, 'store'), { recursive: true })
  await mkdir(join(dir, 'data'), { recursive: true })
  const store = await startStore(join(dir, 'store'))
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: join(dir, 'data'), PORT: '0', HOST: '127.0.0.1', METRICS_PORT: '0' }
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
        async restart(extra) {
          await stop(burnrate.child, 'burnrate')
          burnrate = await start(extra)
        },
      }
      const cold = await load(target.url, apiKey, opts, { agentPrefix, warmup: opts.warmup, load: 'once-per-agent' })
      const warm = await withCpu(target.pid, load(target.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation' }))
      const { events, others, ...extra } = await more(target, store, warm)
      const stored = await storedLlmCalls(target.url, apiKey)
      const runs = [cold, warm, ...events]
      const acked = runs.reduce((n, s) => n + s.ok + (s.warmup?.ok ?? 0), 0)
      // Requests autocannon cut off at the end of a timed run may have been stored unseen.
      const cut = runs.reduce((n, s) => n + cutOff(s) + (s.warmup ? cutOff(s.warmup) : 0), 0)
      const failed = [...runs, ...others].reduce((n, s) => n + failures(s), 0)
      return { cold, warm, ...extra, check: { stored, acked, cutOff: cut, ok: stored >= acked && stored <= acked + cut }, failed }
    } finally {
      await stop(burnrate.child, 'burnrate')
    }
  } finally {
    await store.stop()
  }
}

/** REDIS_URL on a redis-server of the run's own. */
export async function redisMode(dir: string, opts: LoadOptions & { warmup: number }, agentPrefix: string): Promise<RedisModeResult> {
  return storeRun(
    dir,
    opts,
    agentPrefix,
    async (storeDir) => {
      const redis = await startRedis({ dir: storeDir })
      return { url: redis.url, env: { REDIS_URL: redis.url }, stop: () => redis.stop() }
    },
    async (t, redis, warm) => {
      const half = await load(t.url, t.apiKey, opts, { agentPrefix, warmup: opts.warmup, load: { rate: halfOf(warm) } })
      const memory = await redisMemory(redis.url)
      // Holds store no llm_call: they stay out of stored = acknowledged.
      const holds = await withCpu(t.pid, load(t.url, t.apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', holds: true }))
      return { events: [half], others: [holds], half, holds, memory }
    },
  )
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
    async (t) => {
      await t.restart({ REDIS_WAIT_REPLICAS: '1' })
      const warmWait = await withCpu(t.pid, load(t.url, t.apiKey, opts, { agentPrefix, warmup: opts.warmup, load: 'saturation' }))
      return { events: [warmWait], others: [], warmWait }
    },
  )
}
