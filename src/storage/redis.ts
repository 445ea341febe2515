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

/** Where instances tell each other that an API key was revoked. */
export const KEY_REVOKED_CHANNEL = 'burnrate:keys:revoked'
