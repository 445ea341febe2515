import { setTimeout as sleep } from 'node:timers/promises'
import { Cluster, Redis, type ChainableCommander } from 'ioredis'
import type { RedisTarget } from '../config.ts'
import { StoreUnavailableError } from '../errors.ts'

/** One Redis, or a Redis Cluster: the same code paths run on either. */
export type RedisClient = Redis | Cluster

/** Reconnect forever, backing off to 2 s: the instance recovers by itself. */
const backoff = (attempt: number) => Math.min(attempt * 100, 2000)

/**
 * The Redis client of one burnrate instance. Commands fail fast when Redis is away (the
 * routes answer 503 and the client retries), instead of queueing behind a reconnect;
 * commands issued together are pipelined, so a batch costs one round trip (per node of a
 * cluster). A cluster's client follows MOVED and ASK redirections itself (a slot migrating;
 * a call refused TRYAGAIN while its keys are split over two nodes is tried again by
 * whileSlotMoves) and finds the new master after a failover: it reads the slot map again as
 * soon as a node fails, and every second, so that calls follow the promoted replica within
 * about a second of the cluster's own failover.
 */
export function createRedis(target: RedisTarget, log: { warn(obj: object, msg: string): void }): RedisClient {
  const connection = { maxRetriesPerRequest: 1, commandTimeout: 2000, connectTimeout: 2000 }
  const redis =
    target.kind === 'single'
      ? new Redis(target.url, { ...connection, enableAutoPipelining: true, retryStrategy: backoff })
      : new Cluster([...target.nodes], {
          // Off on a cluster: commands auto-pipelined to a master that failed over kept coming
          // back MOVED instead of following the redirection, and burnrate never recovered
          // (test/cluster-faults.test.ts, ioredis 5); sent one by one they are redirected.
          enableAutoPipelining: false,
          clusterRetryStrategy: backoff,
          // A call refused while its slot moves fails after a few short tries (16 × 20 ms),
          // for whileSlotMoves to try again as a new call: ioredis's own share one commandTimeout.
          retryDelayOnTryAgain: 20,
          slotsRefreshInterval: SLOTS_REFRESH_MS,
          redisOptions: {
            ...connection,
            ...(target.username ? { username: target.username } : {}),
            ...(target.password ? { password: target.password } : {}),
            ...(target.tls ? { tls: {} } : {}),
          },
        })
  watch(redis, log)
  if (redis instanceof Cluster) {
    // A node that fails may be a master the cluster is about to replace: read the slot map
    // now rather than at the next interval (ioredis's own refreshes are shared while one runs).
    redis.on('node error', () => redis.refreshSlotsCache())
  }
  return redis
}

/** How often a cluster's client reads the slot map again (CLUSTER SLOTS, one small reply). */
const SLOTS_REFRESH_MS = 1000

/**
 * How long a call refused while its slot moves is tried again before it fails (a 503):
 * while a slot's keys move to another master (CLUSTER SETSLOT MIGRATING, MIGRATE in batches),
 * a call whose keys are some on each node is refused (TRYAGAIN, ASK, MOVED) until they are
 * all on one. Redis refuses such a call before running it, so trying it again is always
 * safe. A move of a busy partition's keys in batches of a few hundred takes seconds.
 */
export const SLOT_MOVE_RETRY_MS = 10_000

/** `send` (a call of a script on one slot), tried again while its slot's keys move. */
export async function whileSlotMoves<T>(send: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + SLOT_MOVE_RETRY_MS
  for (let delay = 5; ; delay = Math.min(delay * 2, 100)) {
    try {
      return await send()
    } catch (err) {
      if (!isSlotMoving(err) || Date.now() + delay > deadline) throw err
      await sleep(delay)
    }
  }
}

// TRYAGAIN, or ioredis giving up after following MOVED, ASK and TRYAGAIN answers as many
// times as it follows any (maxRedirections): each of those is a refusal before the call ran.
function isSlotMoving(err: unknown): boolean {
  return err instanceof Error && (/^(ReplyError: )?TRYAGAIN\b/.test(err.message) || err.message.startsWith('Too many Cluster redirections.'))
}

/**
 * How many replicas must hold a write before it is answered (REDIS_WAIT_REPLICAS).
 * Redis replicates asynchronously: a master that fails over right after answering may take
 * its last writes with it. With `replicas` > 0 each durable write is followed by WAIT on the
 * same connection (the node that ran it), and one that fewer replicas confirm within
 * `timeoutMs` is answered 503: its retry is a repeat (event ids), so nothing is counted twice.
 */
export interface ReplicaWait {
  replicas: number
  timeoutMs: number
}

export const NO_REPLICA_WAIT: ReplicaWait = Object.freeze({ replicas: 0, timeoutMs: 0 })

/**
 * Runs a write that must survive a failover: `queue` issues it on the client (no wait) or on
 * a pipeline followed by WAIT, which a cluster sends to the node of the write's slot. Answers
 * the write's reply; a reply `wrote` says wrote nothing (a script that answered "load the
 * agent first") is answered whatever the replicas said. WAIT covers every earlier write of
 * the connection too: a repeat confirms its first write.
 */
export async function durably(
  redis: RedisClient,
  wait: ReplicaWait,
  queue: (c: RedisClient | ChainableCommander) => unknown,
  wrote: (reply: unknown) => boolean,
): Promise<unknown> {
  if (wait.replicas === 0) return queue(redis)
  const pipeline = redis.pipeline()
  queue(pipeline)
  pipeline.wait(wait.replicas, wait.timeoutMs)
  const results = (await pipeline.exec()) ?? []
  const [[err, reply] = [null, null], [waitErr, acked] = [null, 0]] = results
  if (err) throw err
  if (!wrote(reply)) return reply
  if (waitErr) throw waitErr
  if (Number(acked) < wait.replicas) {
    throw new StoreUnavailableError('Redis', `${String(acked)} of ${wait.replicas} replicas confirmed the write within ${wait.timeoutMs} ms (REDIS_WAIT_REPLICAS): retry it`)
  }
  return reply
}

/** Logs a connection's errors (ioredis reconnects by itself) once per outage, not per retry. */
export function watch(redis: RedisClient, log: { warn(obj: object, msg: string): void }): void {
  let down = false
  redis.on('error', (err: Error) => {
    if (!down) log.warn({ err }, 'Redis is unavailable; answering 503 until it returns')
    down = true
  })
  redis.on('ready', () => {
    if (down) log.warn({}, 'Redis is back')
    down = false
  })
}

/**
 * With REDIS_URL, Redis holds the journal: an acknowledged event is as durable as Redis
 * makes it. Warns when Redis would lose acknowledged events on a restart (no AOF)
 * or up to a second of them on a power loss (appendfsync no); a managed Redis that refuses
 * CONFIG GET gets a warning that names what to check.
 */
export async function checkPersistence(redis: RedisClient, log: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void }): Promise<void> {
  // Every master of a cluster holds part of the journal: each must keep it.
  if (redis instanceof Cluster) {
    // Its masters are known once it has read the slots: the first command waits for that.
    await redis.ping().catch(() => {})
    const masters = redis.nodes('master')
    if (masters.length === 0) log.warn({}, 'could not reach the Redis Cluster to read its persistence settings: acknowledged events survive a restart of a master only with appendonly yes on each')
    for (const node of masters) await checkPersistence(node, log)
    return
  }
  let settings: Record<string, string>
  try {
    const flat = (await redis.call('CONFIG', 'GET', 'append*')) as string[]
    settings = Object.fromEntries(flat.flatMap((v, i) => (i % 2 === 0 ? [[v, flat[i + 1]!]] : [])))
  } catch (err) {
    log.warn({ err }, 'could not read Redis persistence settings (CONFIG GET refused): acknowledged events survive a Redis restart only with appendonly yes; check it with your provider')
    return
  }
  const { appendonly, appendfsync } = settings
  if (appendonly !== 'yes') {
    log.warn({ appendonly, appendfsync }, 'Redis runs without its append-only file: events acknowledged and not yet shipped to ClickHouse are lost if Redis restarts. Set appendonly yes (appendfsync everysec)')
  } else if (appendfsync === 'no') {
    log.warn({ appendonly, appendfsync }, 'Redis leaves fsync to the OS (appendfsync no): a power loss may take acknowledged events; everysec bounds it to a second, always to none')
  } else {
    log.info({ appendonly, appendfsync }, 'Redis persistence')
  }
}

/** Where instances tell each other that an API key was revoked. */
export const KEY_REVOKED_CHANNEL = 'burnrate:keys:revoked'

/**
 * Has every node write its persistence files again from what it holds now (after an
 * erasure): the append-only file keeps every command that wrote a key until it is rewritten,
 * and an RDB snapshot what it held when it was taken. BGREWRITEAOF where appendonly is on,
 * BGSAVE where snapshots are configured; a rewrite already under way began before the
 * erasure, so another one follows it. Resolves with the nodes' addresses it could not
 * confirm (CONFIG refused, or a rewrite that failed), for the caller to report.
 */
export async function rewritePersistence(redis: RedisClient, timeoutMs: number): Promise<string[]> {
  const nodes = redis instanceof Cluster ? redis.nodes('all') : [redis]
  const unconfirmed: string[] = []
  for (const node of nodes) {
    const where = `${node.options.host ?? 'localhost'}:${node.options.port ?? 6379}`
    try {
      const flat = (await node.call('CONFIG', 'GET', 'appendonly')) as string[]
      const snapshots = ((await node.call('CONFIG', 'GET', 'save')) as string[])[1] ?? ''
      if (flat[1] === 'yes') await rewriteOnce(node, 'aof', timeoutMs)
      if (snapshots.trim() !== '') await rewriteOnce(node, 'rdb', timeoutMs)
    } catch {
      unconfirmed.push(where)
    }
  }
  return unconfirmed
}

async function rewriteOnce(node: Redis, kind: 'aof' | 'rdb', timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  const busy = async () => {
    const info = await node.info('persistence')
    return kind === 'aof' ? /aof_rewrite_in_progress:1|aof_rewrite_scheduled:1/.test(info) : /rdb_bgsave_in_progress:1/.test(info)
  }
  const waitIdle = async () => {
    while (await busy()) {
      if (Date.now() > deadline) throw new Error(`Redis ${kind} rewrite still running after ${timeoutMs} ms`)
      await sleep(50)
    }
  }
  await waitIdle()
  await (kind === 'aof' ? node.bgrewriteaof() : node.bgsave())
  await waitIdle()
  const info = await node.info('persistence')
  const status = kind === 'aof' ? /aof_last_bgrewrite_status:(\w+)/.exec(info) : /rdb_last_bgsave_status:(\w+)/.exec(info)
  if (status?.[1] !== 'ok') throw new Error(`Redis ${kind} rewrite ended ${status?.[1] ?? 'unknown'}`)
}

/** Unlinks the keys whose names match `pattern` (SCAN MATCH, on every master of a cluster); resolves with how many. */
export async function unlinkMatching(redis: RedisClient, pattern: string): Promise<number> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis]
  let unlinked = 0
  for (const node of nodes) {
    let cursor = '0'
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
      cursor = next
      // One by one: on a cluster the keys of one reply may be in different slots.
      for (const key of keys) unlinked += await node.unlink(key)
    } while (cursor !== '0')
  }
  return unlinked
}
