import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { ClickHouseClient, ClickHouseSettings } from '@clickhouse/client'
import { parseCsv } from './csv.ts'

/**
 * What tests need to check an export against the events table: the stored rows of a user as
 * an export must show them, and each format's bytes read back into the same shape.
 */

/** An exported event: every column, values as the export's JSON shows them (cost_usd as its exact decimal text). */
export interface ExportedRow {
  event_id: string
  timestamp: string
  agent_id: string
  run_id: string | null
  event_type: string
  model: string | null
  input_tokens: number
  output_tokens: number
  cache_read_tokens: number
  cache_write_tokens: number
  quantities: Record<string, number>
  unpriced_quantities: string[]
  service_tier: string | null
  tool_name: string | null
  metadata: string
  cost_usd: string
  cost_nano: number
  price_fallback: boolean
}

export const COLUMNS = [
  'event_id',
  'timestamp',
  'agent_id',
  'run_id',
  'event_type',
  'model',
  'input_tokens',
  'output_tokens',
  'cache_read_tokens',
  'cache_write_tokens',
  'quantities',
  'unpriced_quantities',
  'service_tier',
  'tool_name',
  'metadata',
  'cost_usd',
  'cost_nano',
  'price_fallback',
]

/** ISO 8601 with microseconds, as ClickHouse writes a DateTime64(6) with date_time_output_format = 'iso'. */
export function isoMicros(us: number): string {
  return `${new Date(Math.floor(us / 1000)).toISOString().slice(0, 19)}.${String(us % 1_000_000).padStart(6, '0')}Z`
}

/** nano-USD as an exact decimal number of USD, without trailing zeros ("0.0075", "12", "0"). */
export function usdText(nano: bigint): string {
  const sign = nano < 0n ? '-' : ''
  const abs = nano < 0n ? -nano : nano
  const fraction = String(abs % 1_000_000_000n).padStart(9, '0').replace(/0+$/, '')
  return `${sign}${abs / 1_000_000_000n}${fraction ? `.${fraction}` : ''}`
}

/**
 * The user's stored events with a timestamp in [fromUs, toUs), read from the events table
 * itself, as the export should show them, in the order it should (timestamp, then event id).
 */
export async function storedRows(client: ClickHouseClient, userId: string, fromUs = 0, toUs = Number.MAX_SAFE_INTEGER): Promise<ExportedRow[]> {
  const rs = await client.query({
    query: `SELECT event_id, toUnixTimestamp64Micro(timestamp) AS ts, agent_id, run_id, event_type, model, input_tokens, output_tokens,
                   cache_read_tokens, cache_write_tokens, quantities, unpriced_quantities, service_tier, tool_name, metadata, cost_nano, price_fallback
            FROM events WHERE user_id = {user:String} AND toUnixTimestamp64Micro(timestamp) >= {from:Int64} AND toUnixTimestamp64Micro(timestamp) < {to:Int64}
            ORDER BY timestamp, event_id`,
    query_params: { user: userId, from: fromUs, to: toUs },
    format: 'JSONEachRow',
  })
  const rows = await rs.json<Record<string, unknown>>()
  return rows.map((r) => ({
    event_id: String(r.event_id),
    timestamp: isoMicros(Number(r.ts)),
    agent_id: String(r.agent_id),
    run_id: r.run_id === '' ? null : String(r.run_id),
    event_type: String(r.event_type),
    model: r.model === '' ? null : String(r.model),
    input_tokens: Number(r.input_tokens),
    output_tokens: Number(r.output_tokens),
    cache_read_tokens: Number(r.cache_read_tokens),
    cache_write_tokens: Number(r.cache_write_tokens),
    quantities: Object.fromEntries(Object.entries(r.quantities as Record<string, string>).map(([k, v]) => [k, Number(v)])),
    unpriced_quantities: r.unpriced_quantities as string[],
    service_tier: r.service_tier === '' ? null : String(r.service_tier),
    tool_name: r.tool_name as string | null,
    metadata: r.metadata === '' ? '{}' : String(r.metadata),
    cost_usd: usdText(BigInt(String(r.cost_nano))),
    cost_nano: Number(r.cost_nano),
    price_fallback: Boolean(r.price_fallback),
  }))
}

/**
 * NDJSON rows; cost_usd as the exact text of its number, not a double (quoted before
 * parsing: inside a string value a quote is escaped, so the pattern cannot match there).
 */
export function ndjsonRows(text: string): ExportedRow[] {
  if (text === '') return []
  if (!text.endsWith('\n')) throw new Error('NDJSON that does not end with a newline')
  return text
    .slice(0, -1)
    .split('\n')
    .map((line) => JSON.parse(line.replace(/"cost_usd":(-?\d+(?:\.\d+)?),"cost_nano":/, '"cost_usd":"$1","cost_nano":')) as ExportedRow)
}

/** CSV rows by their header, typed back (integers, JSON text of quantities, booleans). */
export function csvRows(text: string): { header: string[]; rows: ExportedRow[] } {
  const [header, ...records] = parseCsv(text)
  if (!header) throw new Error('a CSV without its header row')
  const rows = records.map((cells) => {
    const row: Record<string, unknown> = {}
    header.forEach((name, i) => {
      const cell = cells[i] ?? null
      if (name === null) throw new Error('a null column name')
      if (cell === null) row[name] = null
      else if (/_tokens$|^cost_nano$/.test(name)) row[name] = Number(cell)
      else if (name === 'quantities' || name === 'unpriced_quantities') row[name] = JSON.parse(cell)
      else if (name === 'price_fallback') row[name] = cell === 'true' ? true : cell === 'false' ? false : cell
      else row[name] = cell
    })
    if (cells.length !== header.length) throw new Error(`a CSV record of ${cells.length} fields, the header has ${header.length}`)
    return row as unknown as ExportedRow
  })
  return { header: header as string[], rows }
}

/**
 * A Parquet export read back by ClickHouse (its own reader, or with `arrow`, Apache Arrow's,
 * which pyarrow uses), in file order, as the other formats' rows; and its columns' types.
 */
export async function parquetRows(client: ClickHouseClient, bytes: Buffer, opts: { arrow?: boolean } = {}): Promise<{ rows: ExportedRow[]; types: Record<string, string> }> {
  const dir = mkdtempSync(join(tmpdir(), 'burnrate-parquet-'))
  const path = join(dir, 'export.parquet')
  writeFileSync(path, bytes)
  try {
    const settings = {
      date_time_output_format: 'iso',
      output_format_json_quote_64bit_integers: 0,
      output_format_json_quote_decimals: 1,
      input_format_parquet_use_native_reader_v3: opts.arrow ? 0 : 1,
      max_threads: 1,
      // In the file's order: its row groups may be read in parallel otherwise.
      input_format_parquet_preserve_order: 1,
    } as ClickHouseSettings
    const described = await client.query({ query: 'DESCRIBE file({path:String}, Parquet)', query_params: { path }, format: 'JSONEachRow', clickhouse_settings: settings })
    const types = Object.fromEntries((await described.json<{ name: string; type: string }>()).map((c) => [c.name, c.type]))
    const rs = await client.query({ query: 'SELECT * FROM file({path:String}, Parquet)', query_params: { path }, format: 'JSONEachRow', clickhouse_settings: settings })
    const rows = (await rs.json<Record<string, unknown>>()).map((r) => ({ ...r, cost_usd: String(r.cost_usd) }) as unknown as ExportedRow)
    return { rows, types }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * `n` events of one user written straight into the events table (INSERT … SELECT, as
 * bench/seed.ts does): llm_calls of `agents` agents, one every `stepUs` microseconds from
 * `startUs`, each with a metadata object of its own.
 */
export async function seedEvents(client: ClickHouseClient, o: { user: string; n: number; startUs: number; stepUs: number; agents?: number }): Promise<void> {
  await client.command({
    query: `INSERT INTO events (user_id, agent_id, timestamp, event_id, event_type, model, input_tokens, output_tokens,
              cache_read_tokens, cache_write_tokens, quantities, unpriced_quantities, service_tier, tool_name, run_id, metadata, cost_nano, price_fallback)
            SELECT {user:String}, concat('seeded-', toString(number % {agents:UInt64})),
                   fromUnixTimestamp64Micro(toInt64({start:Int64} + number * {step:Int64}), 'UTC'),
                   generateUUIDv4(number), 'llm_call', 'gpt-4o', 1000, 500, 0, 0,
                   map('input_tokens', 1000, 'output_tokens', 500), [], '', NULL, '', concat('{"n":', toString(number), '}'), 7500000, false
            FROM numbers({n:UInt64})`,
    query_params: { user: o.user, agents: o.agents ?? 100, start: o.startUs, step: o.stepUs, n: o.n },
    // chDB keeps a query's settings for the next of its session: a token of its own, or the
    // shipper's last one would make ClickHouse drop these rows as a repeat.
    clickhouse_settings: { insert_deduplication_token: randomUUID() },
  })
}

/**
 * Asserts two long lists of rows are equal, row by row: compared as JSON lines first (a deep
 * comparison of 100,000 objects is slow), and on a difference the first row that differs.
 */
export function sameRows(actual: readonly ExportedRow[], expected: readonly ExportedRow[]): string | null {
  if (actual.length !== expected.length) return `${actual.length} rows, expected ${expected.length}`
  for (let i = 0; i < actual.length; i++) {
    const a = JSON.stringify(actual[i])
    const e = JSON.stringify(expected[i])
    if (a !== e) return `row ${i}: ${a}\nexpected ${e}`
  }
  return null
}
