import { StoreUnavailableError } from '../errors.ts'

/**
 * ClickHouse error codes (src/Common/ErrorCodes.cpp) that say the server cannot do the work
 * now rather than that the query is wrong: a retry may succeed.
 */
const TRANSIENT_CLICKHOUSE_CODES: ReadonlySet<number> = new Set([
  159, // TIMEOUT_EXCEEDED
  164, // READONLY
  173, // CANNOT_ALLOCATE_MEMORY
  202, // TOO_MANY_SIMULTANEOUS_QUERIES
  203, // NO_FREE_CONNECTION
  209, // SOCKET_TIMEOUT
  210, // NETWORK_ERROR
  236, // ABORTED
  241, // MEMORY_LIMIT_EXCEEDED
  242, // TABLE_IS_READ_ONLY
  252, // TOO_MANY_PARTS
  285, // TOO_FEW_LIVE_REPLICAS
  319, // UNKNOWN_STATUS_OF_INSERT
  394, // QUERY_WAS_CANCELLED
  425, // SYSTEM_ERROR
  439, // CANNOT_SCHEDULE_TASK
  999, // KEEPER_EXCEPTION
  1000, // POCO_EXCEPTION (network)
])

/**
 * What a failed ClickHouse call means. The server answering with an error carries its
 * numeric code (both transports raise ClickHouseError with `code`): transient codes are
 * the store being unavailable, the rest are defects and pass through (500). Anything else
 * (refused or reset connections, timeouts of the HTTP request) never reached an answer: unavailable.
 */
export function clickhouseFailure(err: unknown, what: string): Error {
  const code = clickhouseCode(err)
  if (code !== null && !TRANSIENT_CLICKHOUSE_CODES.has(code)) return err as Error
  return new StoreUnavailableError('ClickHouse', `ClickHouse did not answer the ${what}`, { cause: err })
}

/**
 * The ClickHouse error code of a failure, null when ClickHouse did not answer: a server's
 * ClickHouseError carries it as `code`; chDB's errors only in their text ("Code: 41. DB::…").
 */
export function clickhouseCode(err: unknown): number | null {
  if (!(err instanceof Error)) return null
  if ('code' in err && 'type' in err) {
    const code = Number(err.code)
    return typeof err.code === 'string' && Number.isInteger(code) ? code : null
  }
  if (!err.name.startsWith('Chdb')) return null
  const match = /^Code: (\d+)\./.exec(err.message)
  return match ? Number(match[1]) : null
}

/**
 * Redis error replies whose first word (the reply's error code, RESP) says the server
 * cannot do the work now: loading its data, busy with a script, read-only or down during a
 * failover, out of memory. Other replies (ERR from a script, WRONGTYPE) are defects.
 */
// MOVED and ASK reach us only when the cluster client could not follow them itself (a pipeline
// caught mid-failover): it has refreshed its slots, and a retry goes to the new master.
const TRANSIENT_REDIS_REPLIES: ReadonlySet<string> = new Set(['LOADING', 'BUSY', 'MASTERDOWN', 'READONLY', 'TRYAGAIN', 'CLUSTERDOWN', 'OOM', 'NOREPLICAS', 'MISCONF', 'MOVED', 'ASK'])

/** What a failed Redis call means (see clickhouseFailure). ioredis raises a ReplyError for an error reply. */
export function redisFailure(err: unknown): Error {
  if (err instanceof StoreUnavailableError) return err
  if (err instanceof Error && err.name === 'ReplyError' && !TRANSIENT_REDIS_REPLIES.has(err.message.split(' ', 1)[0]!)) return err
  return new StoreUnavailableError('Redis', 'Redis did not answer', { cause: err })
}
