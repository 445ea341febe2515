/**
 * A preload for a burnrate under test (`node --import ./bench/trace-clickhouse.ts`): every
 * ClickHouse SELECT it makes through @clickhouse/client (chDB embedded too: the same
 * client) is appended to the file BENCH_CLICKHOUSE_TRACE names, one JSON line each: when
 * it was issued (epoch ms), how long until its rows were in hand (ms), how many, and what
 * it was (its first words, and the number of agents or users it asked for).
 *
 * No more than measuring: the query and its result are the client's own, only timed. The
 * ingest path makes no query (events go to ClickHouse as the journal's INSERTs, not traced);
 * the agent loader (src/ingest/rebuild.ts agentLoader) and the reads do.
 */
import { appendFileSync } from 'node:fs'
import { ClickHouseClient } from '@clickhouse/client'

/** One query, as traced. */
export interface TracedQuery {
  /** Issued at (epoch ms). */
  at: number
  /** Until its rows were parsed (ms): its wait for the engine, the engine's time, the parse. */
  ms: number
  rows: number
  /** What it was: its text, squeezed and cut. */
  query: string
  /** Agents (or users) it asked for: the length of the longest array parameter. */
  refs: number
  /**
   * The queries issued in one synchronous run of code share it: the agent loader's batch
   * issues its queries together (one Promise.all), so a batch is the queries of one `batch`
   * that ask for agents.
   */
  batch: number
}

let batch = 0
let open = false
/** The same number for every query issued before the current job's microtasks run. */
function batchOf(): number {
  if (!open) {
    open = true
    batch++
    queueMicrotask(() => (open = false))
  }
  return batch
}

const file = process.env.BENCH_CLICKHOUSE_TRACE
if (file) {
  // The common client's method: createClient makes one of those, and the Node client's own
  // query calls it.
  let proto = ClickHouseClient.prototype as object
  let base: object = proto
  for (; proto !== Object.prototype; proto = Object.getPrototypeOf(proto) as object) if (Object.prototype.hasOwnProperty.call(proto, 'query')) base = proto
  const target = base as { query: (params: { query: string; query_params?: Record<string, unknown> }) => Promise<{ json: () => Promise<unknown> }> }
  const query = target.query
  target.query = async function (this: unknown, params) {
    const at = Date.now()
    const started = performance.now()
    const issued = batchOf()
    const result = await query.call(this, params)
    const json = result.json.bind(result)
    // The rows are parsed by the caller; timed when it asks for them.
    result.json = async () => {
      const rows = await json()
      const refs = Math.max(0, ...Object.values(params.query_params ?? {}).map((v) => (Array.isArray(v) ? v.length : 0)))
      const line: TracedQuery = { at, ms: performance.now() - started, rows: Array.isArray(rows) ? rows.length : 0, query: params.query.replace(/\s+/g, ' ').trim().slice(0, 200), refs, batch: issued }
      appendFileSync(file, `${JSON.stringify(line)}\n`)
      return rows
    }
    return result
  }
}
