import { mkdirSync } from 'node:fs'
import { createClient, type ClickHouseClient, type ClickHouseClientConfigOptions } from '@clickhouse/client'
import { Session } from 'chdb'
import { createChdbConnection } from 'chdb/connection'
import type { Config } from '../config.ts'

/**
 * One client API for both deployments: with CLICKHOUSE_URL the client talks HTTP to a
 * server; without it the same client is plugged into chDB, the ClickHouse engine in
 * process, so every query in storage/ runs unchanged on both.
 */
export function createClickHouse(config: Pick<Config, 'clickhouse' | 'clickhouseDatabase'>): ClickHouseClient {
  const clickhouse_settings = {
    // Servers quote 64-bit integers in JSON by default and chDB does not; pin it so rows
    // look the same on both (and nano-USD sums never pass through a lossy double).
    output_format_json_quote_64bit_integers: 1,
    date_time_output_format: 'simple',
    // A batch shipped again with its token must store nothing twice in the tables that
    // materialized views fill from it either (hourly_cost, audit_log): said here, as not
    // every server version has it on by default.
    deduplicate_blocks_in_dependent_materialized_views: 1,
  } as const
  if (config.clickhouse.kind === 'server') {
    return createClient({
      url: config.clickhouse.url,
      username: config.clickhouse.username,
      password: config.clickhouse.password,
      database: config.clickhouseDatabase,
      clickhouse_settings,
      request_timeout: 30_000,
    })
  }
  mkdirSync(config.clickhouse.path, { recursive: true })
  const connection = openChdb(config.clickhouse.path)
  const client = createClient({
    // chdb types its Connection against @clickhouse/client-common, which the client
    // vendors as its own copy: the shapes are the same, the declarations are not.
    connection: connection as unknown as ClickHouseClientConfigOptions['connection'],
    clickhouse_settings,
  })
  rawInserts.set(client, async (table, body, token) => {
    await connection.chdb.rawInsert({ table, values: body, format: 'JSONEachRow', settings: { insert_deduplication_token: token, deduplicate_blocks_in_dependent_materialized_views: 1 } })
  })
  const path = config.clickhouse.path
  streamingSelects.set(client, (query, params, format) => sessionStream(path, query, params, format))
  return client
}

/**
 * The embedded engine of `path`, started with BACKUP and RESTORE allowed to File() anywhere
 * (`burnrate backup --to DIR` names the directory). chDB takes server configuration
 * (backups.allowed_path is one, not a setting) only from the first connection of a path in a
 * process, so a session given it opens first and closes once the client's connection holds
 * the engine. Only burnrate's own SQL runs on this engine: no user names a path but through
 * the admin socket or the CLI, which can reach DATA_DIR anyway.
 */
function openChdb(path: string): ReturnType<typeof createChdbConnection> {
  const first = new Session(path, { connectionArgs: ['--backups.allowed_path=/'] })
  try {
    return createChdbConnection({ path })
  } finally {
    first.close()
  }
}

/**
 * A streaming SELECT of an embedded client: the result's chunks as chDB formats them, each a
 * whole output of `format` (storage/stream.ts joins them). It runs on a chDB Session of its
 * own on the same data path, opened for it and closed after it: on the client's session the
 * next query of anyone (a read, the shipper's INSERT) ends a stream under way ("No active
 * streaming query"), while on its own session it runs beside them. Its parameters are bound
 * by the engine, as a query's of the client are, and it is cancelled by stopping the
 * iteration: the engine stops at its next block.
 */
export type StreamingSelect = (query: string, params: Record<string, unknown>, format: string) => AsyncIterable<Uint8Array>

const streamingSelects = new WeakMap<ClickHouseClient, StreamingSelect>()

export function streamingSelectOf(client: ClickHouseClient): StreamingSelect | undefined {
  return streamingSelects.get(client)
}

async function* sessionStream(path: string, query: string, params: Record<string, unknown>, format: string): AsyncGenerator<Uint8Array> {
  const session = new Session(path)
  try {
    for await (const chunk of session.queryStreamBind(query, params, { format })) yield chunk.raw()
  } finally {
    session.close()
  }
}

/**
 * chDB's raw insert of an embedded client: the payload goes to the engine as it is and is
 * parsed off the main thread. Its SQL-text INSERT held the event loop for 35–50 ms per
 * batch of 9,000 events (the tail latency of POST /events in bench/); this one for about 2.
 */
const rawInserts = new WeakMap<ClickHouseClient, (table: string, body: Buffer, token: string) => Promise<void>>()

export function rawInsertOf(client: ClickHouseClient) {
  return rawInserts.get(client)
}

// The text of the last second formatted: every event of a second shares it (a Date and
// toISOString per event was 2 % of the ingest path's CPU).
let lastSecond = Number.NaN
let lastSecondText = ''

/** ClickHouse DateTime64(3) text for a JS epoch-ms instant ("2026-01-01 12:00:00.000", UTC). */
export function toChDateTime(ms: number): string {
  const second = Math.floor(ms / 1000)
  if (second !== lastSecond) {
    lastSecondText = new Date(second * 1000).toISOString().slice(0, 19).replace('T', ' ')
    lastSecond = second
  }
  return `${lastSecondText}.${String(ms - second * 1000).padStart(3, '0')}`
}

/** ClickHouse DateTime64(6) text for an instant in epoch microseconds. */
export function toChDateTime64us(micros: number): string {
  const ms = Math.floor(micros / 1000)
  return `${toChDateTime(ms)}${String(micros - ms * 1000).padStart(3, '0')}`
}

/** ISO 8601 UTC for a ClickHouse DateTime/DateTime64 text value. */
export function fromChDateTime(text: string): string {
  const iso = text.replace(' ', 'T')
  return iso.includes('.') ? `${iso}Z` : `${iso}.000Z`
}

export function chDateTimeToMs(text: string): number {
  return Date.parse(fromChDateTime(text))
}
