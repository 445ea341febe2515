import { Redis } from 'ioredis'

/**
 * The Redis client of one burnrate instance. Commands fail fast when Redis is away (the
 * routes answer 503 and the client retries), instead of queueing behind a reconnect;
 * commands issued together are pipelined, so a batch costs one round trip.
 */
export function createRedis(url: string, log: { warn(obj: object, msg: string): void }): Redis {
  const redis = new Redis(url, {
    enableAutoPipelining: true,
    maxRetriesPerRequest: 1,
    commandTimeout: 2000,
    connectTimeout: 2000,
    // Reconnect forever, backing off to 2 s: the instance recovers by itself.
    retryStrategy: (attempt) => Math.min(attempt * 100, 2000),
  })
  watch(redis, log)
  return redis
}

/** Logs a connection's errors (ioredis reconnects by itself) once per outage, not per retry. */
export function watch(redis: Redis, log: { warn(obj: object, msg: string): void }): void {
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
 * makes it (issue 8). Warns when Redis would lose acknowledged events on a restart (no AOF)
 * or up to a second of them on a power loss (appendfsync no); a managed Redis that refuses
 * CONFIG GET gets a warning that names what to check.
 */
export async function checkPersistence(redis: Redis, log: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void }): Promise<void> {
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
