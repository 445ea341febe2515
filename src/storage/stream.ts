import { Readable } from 'node:stream'
import type { ClickHouseClient } from '@clickhouse/client'
import { streamingSelectOf } from './clickhouse.ts'
import { clickhouseFailure } from './failures.ts'
import { ParquetJoiner } from './parquet.ts'

/** The output formats a streamed SELECT may ask for: each is joined whole from chDB's chunks. */
export type StreamFormat = 'CSVWithNames' | 'JSONEachRow' | 'Parquet'

/**
 * One parameterised SELECT's result as ClickHouse formats it, as a byte stream that is read
 * from ClickHouse only as fast as it is consumed, so that a result of any size passes
 * through in constant memory. A server's answer is its HTTP body, passed on as it comes.
 * Embedded, chDB formats each block on its own (a CSV header, or a whole Parquet file, per
 * block): the blocks are joined into the one output a server would write.
 *
 * The query states how its values are written (its SETTINGS): the client's own settings
 * (clickhouse.ts) do not reach the embedded session it runs on.
 *
 * The first chunk is read before this resolves, so a query that ClickHouse refuses or cannot
 * run rejects here, before a caller has sent anything. Destroying the stream (the client went
 * away) cancels the query: a server sees its HTTP request end, the engine stops at its next
 * block. A failure later errors the stream.
 */
export async function streamSelect(client: ClickHouseClient, query: string, query_params: Record<string, unknown>, format: StreamFormat): Promise<Readable> {
  const embedded = streamingSelectOf(client)
  const chunks = embedded ? joined(embedded(query, query_params, format), format) : serverChunks(client, query, query_params, format)
  const it = chunks[Symbol.asyncIterator]()
  let first: IteratorResult<Buffer>
  try {
    first = await it.next()
  } catch (err) {
    await it.return?.(undefined)
    throw clickhouseFailure(err, 'query')
  }
  async function* all(): AsyncGenerator<Buffer> {
    try {
      if (first.done) return
      yield first.value
      for (;;) {
        const next = await it.next()
        if (next.done) return
        yield next.value
      }
    } finally {
      await it.return?.(undefined)
    }
  }
  return Readable.from(all(), { objectMode: false })
}

async function* serverChunks(client: ClickHouseClient, query: string, query_params: Record<string, unknown>, format: StreamFormat): AsyncGenerator<Buffer> {
  const { stream } = await client.exec({
    query: `${query} FORMAT ${format}`,
    query_params,
    // Cancelled when its client goes away while it computes, before it has written anything
    // (afterwards, writing to the closed connection fails and ends it).
    clickhouse_settings: { cancel_http_readonly_queries_on_client_close: 1 },
  })
  // Breaking out of the loop destroys the response, and with it the request.
  for await (const chunk of stream) yield chunk as Buffer
}

/** chDB's chunks, each a whole output of `format`, as one. */
async function* joined(chunks: AsyncIterable<Uint8Array>, format: StreamFormat): AsyncGenerator<Buffer> {
  if (format === 'Parquet') {
    const parquet = new ParquetJoiner()
    for await (const chunk of chunks) yield parquet.add(chunk)
    yield parquet.end()
    return
  }
  let first = true
  for await (const chunk of chunks) {
    let bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    // Every chunk of CSVWithNames starts with the names' line; the output has one. The names
    // are the query's own column names: their line holds no newline.
    if (format === 'CSVWithNames' && !first) bytes = bytes.subarray(bytes.indexOf(0x0a) + 1)
    first = false
    if (bytes.length > 0) yield bytes
  }
}
