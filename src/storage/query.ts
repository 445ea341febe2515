import { randomUUID } from 'node:crypto'
import { Readable } from 'node:stream'
import { finished } from 'node:stream/promises'
import type { ClickHouseClient } from '@clickhouse/client'
import type { z } from 'zod'
import { rawInsertOf } from './clickhouse.ts'
import { clickhouseCode, clickhouseFailure } from './failures.ts'

/**
 * Runs one parameterised SELECT ({name:Type} placeholders, values bound by ClickHouse,
 * never concatenated) and checks every row against a schema at the boundary.
 */
export async function select<S extends z.ZodType>(
  client: ClickHouseClient,
  query: string,
  query_params: Record<string, unknown>,
  row: S,
): Promise<z.output<S>[]> {
  let rows: unknown[]
  try {
    const rs = await client.query({ query, query_params, format: 'JSONEachRow' })
    rows = await rs.json()
  } catch (err) {
    throw clickhouseFailure(err, 'query')
  }
  return rows.map((r) => row.parse(r))
}

/**
 * One INSERT of rows already encoded as JSON, one per line, sent as they are: the journal
 * keeps rows as JSON, and decoding a batch only to encode it again cost the main thread tens
 * of milliseconds a second. Embedded, chDB's raw insert parses them off the main thread; a
 * server gets them as the request body. `table` is one of burnrate's own names, never input.
 */
export async function insertJsonLines(client: ClickHouseClient, table: string, body: Buffer, token: string): Promise<void> {
  if (body.length === 0) return
  try {
    const raw = rawInsertOf(client)
    if (raw) return await raw(table, body, token)
    const { stream } = await client.exec({
      query: `INSERT INTO ${table} FORMAT JSONEachRow`,
      values: Readable.from([body]),
      clickhouse_settings: { insert_deduplication_token: token },
    })
    stream.resume() // the server's (empty) answer; the request is done once it is read
    await finished(stream)
  } catch (err) {
    throw clickhouseFailure(err, `insert into ${table}`)
  }
}

/**
 * One INSERT. `token` makes it idempotent: ClickHouse stores a block with a token it has
 * seen within the table's deduplication window once (sql/0007). Without one, the INSERT gets
 * a token of its own: an empty token would deduplicate by content, and two different
 * batches that aggregate to the same hourly_cost row would lose one. The setting is always
 * sent: chDB keeps a query's settings for the next query of its session.
 */
export async function insert(client: ClickHouseClient, table: string, values: readonly object[], token: string = randomUUID()): Promise<void> {
  if (values.length === 0) return
  try {
    await client.insert({ table, values: values as object[], format: 'JSONEachRow', clickhouse_settings: { insert_deduplication_token: token } })
  } catch (err) {
    throw clickhouseFailure(err, `insert into ${table}`)
  }
}

/**
 * CREATE TABLE IF NOT EXISTS of a table two instances may create at the same moment: the
 * check and the creation are two steps in ClickHouse, and the second creator can be told
 * the table exists (TABLE_ALREADY_EXISTS, 57), which is what it wanted.
 */
export async function ensureTable(client: ClickHouseClient, query: string): Promise<void> {
  try {
    await client.command({ query })
  } catch (err) {
    if (clickhouseCode(err) !== 57) throw err
  }
}
