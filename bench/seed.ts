/**
 * Seeds a history for the scale scenarios (bench/history.ts): `events` llm_calls of the last 24 h
 * spread evenly over `agents` agents of one user, written by INSERT … SELECT in ClickHouse
 * itself (the hourly view fills as it does for the shipper's INSERTs), never through the
 * HTTP API. Embedded (a DATA_DIR burnrate is not running on: one process may open it) or a
 * ClickHouse server (CLICKHOUSE_URL).
 *
 *   node bench/seed.ts --data-dir DIR [--events 10000000] [--agents 10000] [--user bench] [--agent-prefix history-agent-] [--run-events 0]
 *                      [--end ISO] [--metadata-bytes N]
 *
 * Every event has a client event_id (a UUID), gpt-4o, 1,000 input and 500 output tokens and
 * the cost burnrate's price table gives them, and metadata of three keys an operator would
 * group cost by: customer (500 values), feature (20) and priority (a number, 3); timestamps are spaced evenly from 24 h ago
 * (plus two minutes, so none leaves the window while the scenario starts) to now, or to
 * `--end` (a history outside the rolling window, which a start-up does not load: the
 * exports' scenarios). `--metadata-bytes N` adds a fourth key, `trace`, of N bytes of random
 * hex (metadata as large as agents attach, and as incompressible). With
 * `--run-events N`, each agent's events are runs of N in a row (run id
 * `<agent>-run-<k>`), the first of each an agent_start and the last an agent_end (N ≥ 2):
 * 10 M events in runs of 100 are 100,000 runs. The tables are merged (OPTIMIZE … FINAL)
 * before it returns.
 */
import { resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { loadConfig } from '../src/config.ts'
import { createPriceTable } from '../src/pricing/price-table.ts'
import { createClickHouse } from '../src/storage/clickhouse.ts'
import { migrate } from '../src/storage/migrations.ts'

/** Rows per INSERT … SELECT: bounds the memory one statement takes in the engine. */
const CHUNK = 1_000_000

export interface SeedOptions {
  events: number
  agents: number
  user: string
  agentPrefix: string
  /** Events per run (each agent's in a row); 0: no runs, every event an llm_call. */
  runEvents?: number
  /** Bytes of random hex in each event's metadata, as a `trace` key; 0: none. */
  metadataBytes?: number
}

export async function seed(env: NodeJS.ProcessEnv, o: SeedOptions, now = Date.now()): Promise<{ seconds: number }> {
  const config = loadConfig(env)
  const client = createClickHouse(config)
  const started = performance.now()
  try {
    await migrate(client)
    const costNano = createPriceTable().cost('gpt-4o', { input_tokens: 1000, output_tokens: 500 }).costNano
    const spanUs = (24 * 3600 - 120) * 1_000_000
    const endUs = now * 1000
    const runEvents = o.runEvents ?? 0
    for (let from = 0; from < o.events; from += CHUNK) {
      const n = Math.min(CHUNK, o.events - from)
      await client.command({
        query: `INSERT INTO events (user_id, agent_id, timestamp, event_id, event_type, model, input_tokens, output_tokens,
                  cache_read_tokens, cache_write_tokens, quantities, unpriced_quantities, service_tier, tool_name, run_id, metadata, cost_nano, price_fallback)
                SELECT {user:String}, agent,
                       fromUnixTimestamp64Micro(toInt64({end:Int64} - {span:Int64} + intDiv(i * {span:Int64}, {total:UInt64})), 'UTC'),
                       generateUUIDv4(i), type, if(llm, 'gpt-4o', ''), 1000 * llm, 500 * llm, 0, 0,
                       if(llm, map('input_tokens', 1000, 'output_tokens', 500), map()), [], '', NULL,
                       if({runs:UInt64} = 0, '', concat(agent, '-run-', toString(intDiv(k, n_run)))),
                       concat('{"customer":"customer-', toString(i % 500), '","feature":"feature-', toString(intDiv(i, 7) % 20), '","priority":', toString(i % 3),
                              if({meta:UInt32} = 0, '', concat(',"trace":"', hex(randomString(intDiv({meta:UInt32}, 2))), '"')), '}'),
                       {cost:Int64} * llm, false
                FROM (
                  SELECT number + {from:UInt64} AS i, concat({prefix:String}, toString(i % {agents:UInt64})) AS agent,
                         intDiv(i, {agents:UInt64}) AS k, greatest({runs:UInt64}, 1) AS n_run,
                         multiIf({runs:UInt64} < 2, 'llm_call', k % n_run = 0, 'agent_start', k % n_run = n_run - 1, 'agent_end', 'llm_call') AS type,
                         toUInt8(type = 'llm_call') AS llm
                  FROM numbers({n:UInt64}))`,
        query_params: { user: o.user, prefix: o.agentPrefix, agents: o.agents, end: endUs, span: spanUs, total: o.events, from, n, cost: costNano, runs: runEvents, meta: o.metadataBytes ?? 0 },
      })
    }
    // Settled as a long-running store's parts would be, so that the scenarios do not measure
    // the engine merging the seed's parts in the background.
    for (const table of ['events', 'hourly_cost', 'hourly_dimensions', 'runs']) await client.command({ query: `OPTIMIZE TABLE ${table} FINAL` })
    return { seconds: (performance.now() - started) / 1000 }
  } finally {
    await client.close()
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'data-dir': { type: 'string' },
      events: { type: 'string' },
      agents: { type: 'string' },
      user: { type: 'string' },
      'agent-prefix': { type: 'string' },
      'run-events': { type: 'string' },
      end: { type: 'string' },
      'metadata-bytes': { type: 'string' },
    },
    strict: true,
  })
  const env: NodeJS.ProcessEnv = { ...process.env }
  if (values['data-dir']) env.DATA_DIR = resolve(values['data-dir'])
  else if (!env.CLICKHOUSE_URL) throw new Error('--data-dir or CLICKHOUSE_URL is required')
  const o: SeedOptions = {
    events: Number(values.events ?? 10_000_000),
    agents: Number(values.agents ?? 10_000),
    user: values.user ?? 'bench',
    agentPrefix: values['agent-prefix'] ?? 'history-agent-',
    runEvents: Number(values['run-events'] ?? 0),
    metadataBytes: Number(values['metadata-bytes'] ?? 0),
  }
  if (!Number.isSafeInteger(o.events) || o.events < 1) throw new Error('--events must be a whole number of at least 1')
  if (!Number.isSafeInteger(o.agents) || o.agents < 1) throw new Error('--agents must be a whole number of at least 1')
  if (!Number.isSafeInteger(o.runEvents) || o.runEvents! < 0) throw new Error('--run-events must be a whole number of at least 0')
  const bytes = o.metadataBytes ?? 0
  if (!Number.isSafeInteger(bytes) || bytes < 0 || bytes > 16_384) throw new Error('--metadata-bytes must be a whole number from 0 to 16384')
  const end = values.end === undefined ? Date.now() : Date.parse(values.end)
  if (Number.isNaN(end)) throw new Error('--end must be an ISO 8601 time')
  const { seconds } = await seed(env, o, end)
  console.log(JSON.stringify({ ...o, seconds }))
}

if (import.meta.main) await main()
