/**
 * What the run reads cost on a large history: GET /agents/{id}/runs and GET /runs/{id}'s
 * reads of ClickHouse, each against what the same answer costs read from the events
 * themselves (the "before": no runs view).
 *
 *   node bench/runs.ts [--data-dir DIR] [--events 10000000] [--agents 10000] [--run-events 100] [--samples 9]
 *
 * Without --data-dir it seeds a store of its own (bench/seed.ts: `events` events over
 * `agents` agents of one user, each agent's events in runs of `run-events`) in a temporary
 * directory and removes it after; with it, it reads a store seeded that way (embedded: no
 * server may hold it). Each read is run on `samples` different agents or runs (a repeat of
 * one read would be answered from the engine's query condition cache) and reported as the
 * rows it read, the engine's SelectedRows profile event around it (system.query_log's
 * read_rows on a server; the embedded engine keeps no query log), and its time, the median
 * and the largest.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import type { ClickHouseClient } from '@clickhouse/client'
import { loadConfig } from '../src/config.ts'
import { createClickHouse } from '../src/storage/clickhouse.ts'
import { runEvents } from '../src/storage/events.ts'
import { agentRuns, runParts } from '../src/storage/runs.ts'
import { seed } from './seed.ts'

const USER = 'bench'
const PREFIX = 'history-agent-'

interface Read {
  name: string
  /** Runs the read for sample `i`; returns the rows it answered. */
  read(i: number): Promise<number>
}

interface Measured {
  name: string
  answered: number
  rowsRead: { median: number; max: number }
  ms: { median: number; max: number }
}

async function selectedRows(client: ClickHouseClient): Promise<number> {
  const rs = await client.query({ query: "SELECT value FROM system.events WHERE event = 'SelectedRows'", format: 'JSONEachRow' })
  const [row] = await rs.json<{ value: string }>()
  return Number(row?.value ?? 0)
}

async function measure(client: ClickHouseClient, r: Read, samples: number): Promise<Measured> {
  // What reading the counter itself reads (system tables), taken off every sample.
  const a = await selectedRows(client)
  const own = (await selectedRows(client)) - a
  const rows: number[] = []
  const ms: number[] = []
  let answered = 0
  for (let i = 0; i < samples; i++) {
    const before = await selectedRows(client)
    const t = performance.now()
    answered = await r.read(i)
    ms.push(performance.now() - t)
    rows.push((await selectedRows(client)) - before - own)
  }
  const mid = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!
  return { name: r.name, answered, rowsRead: { median: mid(rows), max: Math.max(...rows) }, ms: { median: mid(ms), max: Math.max(...ms) } }
}

async function json(client: ClickHouseClient, query: string, query_params: Record<string, unknown>): Promise<number> {
  const rs = await client.query({ query, query_params, format: 'JSONEachRow' })
  return (await rs.json()).length
}

export async function benchRuns(env: NodeJS.ProcessEnv, o: { agents: number; runsPerAgent: number; samples: number }): Promise<Measured[]> {
  const client = createClickHouse(loadConfig(env))
  try {
    // Samples spread over the agents and over each agent's runs.
    const agent = (i: number) => `${PREFIX}${(i * 7919 + 13) % o.agents}`
    const runOf = (i: number) => `${agent(i)}-run-${(i * 7 + 3) % o.runsPerAgent}`
    const reads: Read[] = [
      {
        name: "before: an agent's runs, page of 50, from its events",
        read: (i) =>
          json(
            client,
            `SELECT run_id, min(timestamp) AS first, minIfOrNull(timestamp, event_type = 'agent_start') AS start, maxIfOrNull(timestamp, event_type = 'agent_end') AS end,
                    max(timestamp) AS last, sum(cost_nano) AS cost, count() AS n, countIf(event_type = 'llm_call') AS llm, countIf(event_type = 'tool_call') AS tools,
                    groupUniqArrayIf(model, event_type = 'llm_call') AS models
             FROM events WHERE user_id = {user:String} AND agent_id = {agent:String} AND run_id != ''
             GROUP BY run_id ORDER BY coalesce(start, first) DESC, run_id DESC LIMIT 51`,
            { user: USER, agent: agent(i) },
          ),
      },
      { name: "after: an agent's runs, page of 50 (runs view)", read: async (i) => (await agentRuns(client, { userId: USER, agentId: agent(i + 1000), limit: 51 })).length },
      {
        name: "before: one run's figures, from the events",
        read: (i) =>
          json(
            client,
            `SELECT agent_id, min(timestamp) AS first, max(timestamp) AS last, sum(cost_nano) AS cost, count() AS n
             FROM events WHERE user_id = {user:String} AND run_id = {run:String} GROUP BY agent_id`,
            { user: USER, run: runOf(i) },
          ),
      },
      {
        name: "after: one run's figures, runs view without its projection",
        read: (i) =>
          json(
            client,
            `SELECT agent_id, min(first_at) AS f, max(last_at) AS l, sum(cost_nano) AS c, sumMap(by_model) AS m
             FROM runs WHERE user_id = {user:String} AND run_id = {run:String} GROUP BY agent_id SETTINGS optimize_use_projections = 0`,
            { user: USER, run: runOf(i + 1000) },
          ),
      },
      { name: "after: one run's figures (runs view, by_run projection)", read: async (i) => (await runParts(client, USER, runOf(i + 2000))).length },
      {
        name: "before: one run's newest 100 events, from the events",
        read: (i) =>
          json(client, 'SELECT * FROM events WHERE user_id = {user:String} AND run_id = {run:String} ORDER BY timestamp DESC, event_id DESC LIMIT 100', {
            user: USER,
            run: runOf(i + 3000),
          }),
      },
      {
        name: "after: one run's newest 100 events (its agents and span, then the events' key)",
        read: async (i) => {
          const parts = await runParts(client, USER, runOf(i + 4000))
          const events = await runEvents(client, {
            userId: USER,
            runId: runOf(i + 4000),
            agentIds: parts.map((p) => p.agent_id),
            fromUs: Math.min(...parts.map((p) => p.first_us)),
            untilUs: Math.max(...parts.map((p) => p.last_us)),
            before: undefined,
            limit: 100,
          })
          return events.length
        },
      },
    ]
    const out: Measured[] = []
    for (const r of reads) out.push(await measure(client, r, o.samples))
    return out
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
      'run-events': { type: 'string' },
      samples: { type: 'string' },
    },
    strict: true,
  })
  const events = Number(values.events ?? 10_000_000)
  const agents = Number(values.agents ?? 10_000)
  const runEvents = Number(values['run-events'] ?? 100)
  const samples = Number(values.samples ?? 9)
  for (const [name, v, min] of [['--events', events, 1], ['--agents', agents, 1], ['--run-events', runEvents, 2], ['--samples', samples, 1]] as const) {
    if (!Number.isSafeInteger(v) || v < min) throw new Error(`${name} must be a whole number of at least ${min}`)
  }
  const own = values['data-dir'] ? null : await mkdtemp(join(tmpdir(), 'burnrate-runs-'))
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: resolve(values['data-dir'] ?? own!) }
  delete env.CLICKHOUSE_URL
  try {
    if (own) console.log(JSON.stringify({ seeded: await seed(env, { events, agents, user: USER, agentPrefix: PREFIX, runEvents }) }))
    const perAgent = Math.floor(events / agents)
    const results = await benchRuns(env, { agents, runsPerAgent: Math.floor(perAgent / runEvents), samples })
    console.log(`${events.toLocaleString('en')} events, ${agents.toLocaleString('en')} agents, runs of ${runEvents} (${Math.floor(events / runEvents).toLocaleString('en')} runs, ${Math.floor(perAgent / runEvents).toLocaleString('en')} per agent)`)
    console.log('| read | rows answered | rows read (median / max) | ms (median / max) |\n|---|---:|---:|---:|')
    for (const r of results) console.log(`| ${r.name} | ${r.answered} | ${r.rowsRead.median.toLocaleString('en')} / ${r.rowsRead.max.toLocaleString('en')} | ${r.ms.median.toFixed(1)} / ${r.ms.max.toFixed(1)} |`)
    console.log(JSON.stringify({ events, agents, runEvents, results }))
  } finally {
    if (own) await rm(own, { recursive: true, force: true })
  }
}

if (import.meta.main) await main()
