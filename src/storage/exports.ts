import type { Readable } from 'node:stream'
import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { select } from './query.ts'
import { streamSelect, type StreamFormat } from './stream.ts'

export const EXPORT_FORMATS = ['csv', 'ndjson', 'parquet'] as const
export type ExportFormat = (typeof EXPORT_FORMATS)[number]

/** Every column of an export, in order: the stored event but its user (the caller's own). */
export const EXPORT_COLUMNS = [
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
] as const

/**
 * ClickHouse's output format for each, and how it writes the values. Text formats: times in
 * ISO 8601 UTC with microseconds, 64-bit integers as JSON numbers (token counts and nano-USD
 * stay far below 2^53), a NULL as an empty CSV field. CSV has no maps or arrays:
 * `quantities` and `unpriced_quantities` are JSON text there, as `metadata` is everywhere.
 * Parquet keeps the types (a map, a list, a timestamp, a decimal) and writes no page index
 * (storage/parquet.ts joins files by their footers, and a page index holds file offsets of
 * its own). Its row groups are the blocks read: about 8 MB of columns each, between the
 * 8,192 rows of a granule and 65,536 rows (fixed 32,768-row groups of events with half a
 * kilobyte of metadata held +324 MB; these, +144 MB).
 *
 * One thread reads and formats an export (max_threads): it leaves the other cores to
 * ingestion, and held the least memory for the same speed. Over 3 M events (chDB 26.7, peak
 * RSS of the process beyond its idle 292 MB): CSV +86 MB in 8.8 s, NDJSON +117 MB in 19 s;
 * on both cores +155 MB and +197 MB in about the same time, and Parquet encoded in parallel
 * in groups of 65,536 rows +364 MB.
 */
const FORMATS: Record<ExportFormat, { format: StreamFormat; settings: string; nested: (column: string) => string }> = {
  csv: {
    format: 'CSVWithNames',
    settings: "date_time_output_format = 'iso', output_format_json_quote_64bit_integers = 0, format_csv_null_representation = ''",
    nested: (column) => `toJSONString(${column})`,
  },
  ndjson: {
    format: 'JSONEachRow',
    settings: "date_time_output_format = 'iso', output_format_json_quote_64bit_integers = 0, output_format_json_quote_decimals = 0",
    nested: (column) => column,
  },
  parquet: {
    format: 'Parquet',
    settings:
      'max_block_size = 65536, preferred_block_size_bytes = 8388608, output_format_parquet_row_group_size = 65536, output_format_parquet_row_group_size_bytes = 8388608, output_format_parquet_parallel_encoding = 0, output_format_parquet_write_page_index = 0, output_format_parquet_string_as_string = 1',
    nested: (column) => column,
  },
}

/**
 * The SELECT of an export, from `source`. Rows come in (user_id, timestamp, event_id) order,
 * the order of the events table's user_recent projection (sql/0011): read from the projection
 * itself (mergeTreeProjection), ClickHouse reads its parts in order and sorts nothing, so its
 * memory stays bounded whatever the range. Left to choose, it compares only the marks each
 * would read: when the range holds all of a user's events the table can tie the projection
 * and win, and it then sorts the whole range (three million events: +940 MB of peak RSS; a
 * million with half a kilobyte of metadata each, +1.1 GB). With prefer_column_name_to_alias,
 * `event_id` in ORDER BY is the stored UUID, not its text. cost_usd is cost_nano as an exact
 * Decimal(18, 9): the product of two decimals adds their scales, so cost_nano × 10^-9 is the
 * same integer with 9 places.
 */
export function exportSql(format: ExportFormat, source: string = PROJECTION): string {
  const f = FORMATS[format]
  return `SELECT toString(event_id) AS event_id, timestamp, agent_id, nullIf(run_id, '') AS run_id, event_type,
       nullIf(model, '') AS model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
       ${f.nested('quantities')} AS quantities, ${f.nested('unpriced_quantities')} AS unpriced_quantities,
       nullIf(service_tier, '') AS service_tier, tool_name, if(metadata = '', '{}', metadata) AS metadata,
       toDecimal64(cost_nano, 0) * toDecimal64('0.000000001', 9) AS cost_usd, cost_nano, price_fallback
FROM ${source}
WHERE user_id = {user:String}
  AND timestamp >= fromUnixTimestamp64Micro({from:Int64}) AND timestamp < fromUnixTimestamp64Micro({to:Int64})
ORDER BY user_id, timestamp, event_id
SETTINGS prefer_column_name_to_alias = 1, max_threads = 1, ${f.settings}`
}

const PROJECTION = 'mergeTreeProjection(currentDatabase(), events, user_recent)'

/**
 * One user's events with a timestamp in [fromUs, toUs) (microseconds), oldest first, as
 * `format`'s bytes. The projection holds every event once each part has it: parts written
 * before it existed get theirs from a mutation (sql/0011), and until then the export reads
 * the table, which sorts.
 */
export async function exportEvents(client: ClickHouseClient, q: { userId: string; fromUs: number; toUs: number; format: ExportFormat }): Promise<Readable> {
  const [parts] = await select(
    client,
    "SELECT countIf(NOT has(projections, 'user_recent')) AS without FROM system.parts WHERE database = currentDatabase() AND table = 'events' AND active",
    {},
    z.object({ without: z.coerce.number() }),
  )
  const source = parts?.without === 0 ? PROJECTION : 'events'
  return streamSelect(client, exportSql(q.format, source), { user: q.userId, from: q.fromUs, to: q.toUs }, FORMATS[q.format].format)
}
