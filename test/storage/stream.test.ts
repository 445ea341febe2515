import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import type { ClickHouseClient } from '@clickhouse/client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { ParquetJoiner } from '../../src/storage/parquet.ts'
import { streamSelect, type StreamFormat } from '../../src/storage/stream.ts'
import { startClickHouseServer } from '../helpers/clickhouse-server.ts'
import { eventually } from '../helpers/harness.ts'

/**
 * streamSelect: embedded, chDB hands a result over block by block, each block a whole output
 * of its format; joined, they must be the one output a ClickHouse server writes for the same
 * query. Compared here with the HTTP server of the tests (the same engine, answering whole),
 * over blocks of one row to thousands, values that CSV must quote, NULLs, maps, arrays,
 * decimals, times and unicode.
 */

let embedded: ClickHouseClient
let server: ClickHouseClient
let stopServer: () => Promise<void>
let dir: string
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'burnrate-stream-'))
  embedded = createClickHouse(loadConfig({ DATA_DIR: dir }))
  const ch = await startClickHouseServer()
  stopServer = ch.stop
  server = createClickHouse(loadConfig({ DATA_DIR: dir, CLICKHOUSE_URL: ch.url }))
}, 60_000)
afterAll(async () => {
  await embedded?.close()
  await server?.close()
  await stopServer?.()
  rmSync(dir, { recursive: true, force: true })
})

/** A result of `n` rows in blocks of `block` (a test's own constants in SETTINGS, as the export's are). */
function query(block: number): string {
  return `SELECT number AS n, toString(number) AS s,
                 if(number % 3 = 0, NULL, concat('a,"b"', char(10), 'line ', toString(number))) AS maybe,
                 map('k', number, 'l', number * 2) AS m, [toString(number), '日本🚀'] AS a,
                 toDecimal64(number * 7, 0) * toDecimal64('0.000000001', 9) AS d, number % 2 = 0 AS b,
                 fromUnixTimestamp64Micro(toInt64(1767225600000000 + number * 1001), 'UTC') AS t
          FROM numbers({n:UInt64})
          SETTINGS max_block_size = ${block}, preferred_block_size_bytes = 1000000000, output_format_parquet_write_page_index = 0, date_time_output_format = 'iso',
                   output_format_json_quote_64bit_integers = 0`
}

async function bytesOf(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of stream) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

/** A Parquet file's rows as JSON lines, read by the embedded engine (its reader, or Apache Arrow's), in file order. */
async function parquetLines(bytes: Buffer, arrow: boolean): Promise<string> {
  const path = join(dir, `read-${Math.random().toString(36).slice(2)}.parquet`)
  writeFileSync(path, bytes)
  try {
    const rs = await embedded.query({
      query: 'SELECT * FROM file({path:String}, Parquet)',
      query_params: { path },
      format: 'JSONEachRow',
      clickhouse_settings: { input_format_parquet_use_native_reader_v3: arrow ? 0 : 1, input_format_parquet_preserve_order: 1, max_threads: 1, date_time_output_format: 'iso' },
    })
    return await rs.text()
  } finally {
    rmSync(path, { force: true })
  }
}

async function both(format: StreamFormat, n: number, block: number): Promise<{ ours: Buffer; theirs: Buffer }> {
  const [ours, theirs] = await Promise.all([
    streamSelect(embedded, query(block), { n }, format).then(bytesOf),
    streamSelect(server, query(block), { n }, format).then(bytesOf),
  ])
  return { ours, theirs }
}

describe('streamSelect, embedded and on a server', () => {
  const cases: Array<[number, number]> = [
    [0, 10],
    [1, 10],
    [10, 1],
    [50, 7],
    [2500, 1000],
    [2500, 2500],
  ]

  for (const [n, block] of cases) {
    it(`${n} rows in blocks of ${block}: CSVWithNames and JSONEachRow byte for byte, Parquet row for row`, async () => {
      for (const format of ['CSVWithNames', 'JSONEachRow'] as const) {
        const { ours, theirs } = await both(format, n, block)
        expect(ours.toString('utf8'), format).toBe(theirs.toString('utf8'))
      }
      const { ours, theirs } = await both('Parquet', n, block)
      const expected = await parquetLines(theirs, false)
      expect(expected.split('\n')).toHaveLength(n + 1)
      for (const arrow of [false, true]) expect(await parquetLines(ours, arrow), `arrow: ${arrow}`).toBe(expected)
    })
  }

  it('rejects a query ClickHouse refuses before any byte, on both', async () => {
    for (const client of [embedded, server]) {
      await expect(streamSelect(client, 'SELECT * FROM no_such_table WHERE x = {x:UInt8}', { x: 1 }, 'CSVWithNames')).rejects.toThrow(/no_such_table|UNKNOWN_TABLE/)
    }
  })

  it('stops the engine when the stream is destroyed', async () => {
    const stream = await streamSelect(embedded, 'SELECT number FROM numbers({n:UInt64})', { n: 1e12 }, 'JSONEachRow')
    const first = await new Promise<Buffer>((resolve) => stream.once('data', resolve))
    expect(first.length).toBeGreaterThan(0)
    stream.destroy()
    await new Promise((resolve) => stream.once('close', resolve))
    await eventually(async () => {
      const rs = await embedded.query({ query: "SELECT count() AS n FROM system.processes WHERE query LIKE '%numbers(%' AND query_id != queryID()", format: 'JSONEachRow' })
      return Number((await rs.json<{ n: string }>())[0]!.n) === 0 ? true : undefined
    }, 10_000)
  })
})

describe('ParquetJoiner', () => {
  it('refuses what is not a Parquet file, and a join of nothing', () => {
    expect(() => new ParquetJoiner().add(Buffer.from('not parquet at all'))).toThrow(/not a Parquet file/)
    const truncated = Buffer.concat([Buffer.from('PAR1'), Buffer.from([0xff, 0xff, 0, 0]), Buffer.from('PAR1')])
    expect(() => new ParquetJoiner().add(truncated)).toThrow(/footer/)
    expect(() => new ParquetJoiner().end()).toThrow(/no Parquet file/)
  })
})
