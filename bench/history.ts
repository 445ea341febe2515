/**
 * The scale scenarios: what a large history costs one embedded burnrate.
 *
 *   1. An empty store: start-up, then ingest at a fixed rate and reads, as the baseline.
 *   2. A store seeded with `events` llm_calls of the last 24 h over `agents` agents
 *      (bench/seed.ts, INSERT … SELECT, not the HTTP API): time to /readyz and peak RSS;
 *      reads (GET /agents whole and a page of 100, GET /agents/{id}, GET /agents/{id}/hourly,
 *      GET /costs grouped by a metadata key, alone and with the model,
 *      GET /agents/events) and ingest at the same fixed rate; each as p50/p99 and as a ratio
 *      to the empty store.
 *   3. Both again with REDIS_URL, on a redis-server of their own (AOF on): the hot state in
 *      Redis, loaded from ClickHouse agent by agent as the ingest and the reads ask for them.
 *
 *   node bench/history.ts [--full] [--embedded-only] [--events N] [--agents N] [--rate R] [--duration S]
 *
 * Quick (the default, part of `npm run bench`): 1,000,000 events over 10,000 agents;
 * --full: 10,000,000 events. Prints a table and a JSON line (the last line) for bench/run.ts.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { startRedis } from '../test/helpers/redis.ts'
import { ROOT, STORE_ENV, children, createKey, fmt, ratio, run, scrape, startBurnrate, stop, table } from './processes.ts'
import type { LoadSummary } from './load.ts'
import type { Figure } from './results.ts'

const USER = 'bench'
const PREFIX = 'history-agent-'

export interface Latency {
  requests: number
  /** The first request's latency, which the warm-up leaves out of the rest. */
  first: number
  p50: number
  p99: number
  max: number
}

export interface HistoryResult {
  events: number
  agents: number
  seedSeconds: number
  empty: Store
  history: Store
  /** The same two with REDIS_URL (null with --embedded-only). */
  redis: { empty: Store; history: Store } | null
}

interface Store {
  readySeconds: number
  peakRssBytes: number | null
  ingest: { rate: number; p50: number; p99: number; max: number; ok: number; failed: number }
  /** ClickHouse's background merges during the ingest phase (its metrics), and hourly_cost's parts after it. */
  merges: { count: number; seconds: number; hourlyParts: number }
  reads: Record<string, Latency>
}

/** Peak resident set of `pid` (VmHWM), Linux only. */
async function peakRss(pid: number | undefined): Promise<number | null> {
  try {
    const { readFile } = await import('node:fs/promises')
    const kb = /VmHWM:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, 'utf8'))?.[1]
    return kb === undefined ? null : Number(kb) * 1024
  } catch {
    return null
  }
}

async function waitReady(url: string, started: number, timeoutMs: number): Promise<number> {
  for (;;) {
    try {
      const res = await fetch(new URL('/readyz', url), { signal: AbortSignal.timeout(5_000) })
      if (res.ok) return (performance.now() - started) / 1000
    } catch {
      // not listening yet
    }
    if (performance.now() - started > timeoutMs) throw new Error(`not ready after ${timeoutMs / 1000} s`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

/** `concurrency` loops (one: a request at a time, its own latency) sending GET `path()` for `seconds`; the latency of every answer. */
/**
 * Latencies of GET `path()` sent one after another for `seconds`, after a warm-up whose
 * requests are not counted: the first request and a second at least (the first of a process
 * compiles its code paths; in Redis mode the first listing loads every agent). The first
 * request's own latency is kept apart.
 */
async function sample(url: string, apiKey: string, path: () => string, seconds: number, concurrency = 1): Promise<Latency> {
  const latencies: number[] = []
  const get = async () => {
    const t = performance.now()
    const res = await fetch(new URL(path(), url), { headers: { 'x-api-key': apiKey } })
    await res.arrayBuffer()
    if (!res.ok) throw new Error(`GET ${path()} answered ${res.status}`)
    return { t, ms: performance.now() - t }
  }
  // The warm-up begins with the first request and lasts until it is answered, a second at least.
  const { t: started, ms: first } = await get()
  const counted = Math.max(started + WARMUP_MS, performance.now())
  const until = counted + seconds * 1000
  const worker = async () => {
    while (performance.now() < until) {
      const { t, ms } = await get()
      if (t >= counted) latencies.push(ms)
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  latencies.sort((a, b) => a - b)
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0
  return { requests: latencies.length, first, p50: at(0.5), p99: at(0.99), max: latencies.at(-1) ?? 0 }
}

/** Requests of the first second of each read's sampling are not counted (sample()). */
const WARMUP_MS = 1000

async function measureStore(dir: string, o: { agents: number; rate: number; duration: number; redisUrl?: string }): Promise<Store> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATA_DIR: dir,
    PORT: '0',
    HOST: '127.0.0.1',
    METRICS_PORT: '0',
    LOG_LEVEL: 'info',
    READS_RATE_LIMIT: '100000000',
  }
  for (const name of STORE_ENV) delete env[name]
  if (o.redisUrl) env.REDIS_URL = o.redisUrl
  await mkdir(dir, { recursive: true })
  const started = performance.now()
  const burnrate = await startBurnrate(env, join(dir, 'burnrate.log'), null, 600_000)
  try {
    const readySeconds = await waitReady(burnrate.url, started, 600_000)
    const peakRssBytes = await peakRss(burnrate.child.pid)
    const apiKey = await createKey(env, 'history', USER)
    const mergesBefore = await scrape(burnrate.metrics)
    // Ingest at a fixed rate on the same agents (every one with a history in the seeded store).
    const load = await run(
      [join(ROOT, 'bench', 'load.ts'), '--url', burnrate.url, '--rate', String(o.rate), '--duration', String(o.duration), '--warmup', '1', '--connections', '50', '--agents', String(o.agents), '--agent-prefix', PREFIX],
      { ...process.env, BENCH_API_KEY: apiKey },
      'ingest load',
      (o.duration + 120) * 1000,
    )
    const s = JSON.parse(load.trim().split('\n').at(-1)!) as LoadSummary
    const mergesAfter = await scrape(burnrate.metrics)
    const grew = (name: string) => (mergesAfter.get(name) ?? 0) - (mergesBefore.get(name) ?? 0)
    const merges = {
      count: grew('burnrate_clickhouse_merges_total'),
      seconds: grew('burnrate_clickhouse_merge_seconds_total'),
      hourlyParts: mergesAfter.get('burnrate_clickhouse_active_parts{table="hourly_cost"}') ?? Number.NaN,
    }
    // The load sends to agents 0, 1, 2, … in turn: in the empty store those are the ones that exist.
    const known = Math.max(1, Math.min(o.agents, s.ok))
    const agent = () => `${PREFIX}${Math.floor(Math.random() * known)}`
    const reads: Record<string, Latency> = {
      'GET /agents': await sample(burnrate.url, apiKey, () => '/agents', o.duration),
      'GET /agents?limit=100': await sample(burnrate.url, apiKey, () => '/agents?limit=100', o.duration),
      'GET /agents/{id}': await sample(burnrate.url, apiKey, () => `/agents/${agent()}`, o.duration),
      'GET /agents/{id}/hourly': await sample(burnrate.url, apiKey, () => `/agents/${agent()}/hourly`, o.duration),
      'GET /agents/events?limit=50': await sample(burnrate.url, apiKey, () => '/agents/events?limit=50', o.duration),
      'GET /costs?group_by=metadata.customer': await sample(burnrate.url, apiKey, () => '/costs?group_by=metadata.customer', o.duration),
      'GET /costs by metadata.customer and model': await sample(burnrate.url, apiKey, () => '/costs?group_by=metadata.customer&group_by=model', o.duration),
    }
    return {
      readySeconds,
      peakRssBytes,
      ingest: { rate: o.rate, p50: s.latencyMs.p50, p99: s.latencyMs.p99, max: s.latencyMs.max, ok: s.ok, failed: s.non2xx + s.errors },
      merges,
      reads,
    }
  } finally {
    await stop(burnrate.child, 'burnrate')
  }
}

export async function history(o: { events: number; agents: number; rate: number; duration: number; embeddedOnly?: boolean }): Promise<HistoryResult> {
  const dir = await mkdtemp(join(tmpdir(), 'burnrate-history-'))
  try {
    const empty = await measureStore(join(dir, 'empty'), o)
    const seeded = join(dir, 'seeded')
    const seedOut = await run(
      [join(ROOT, 'bench', 'seed.ts'), '--data-dir', seeded, '--events', String(o.events), '--agents', String(o.agents), '--user', USER, '--agent-prefix', PREFIX],
      process.env,
      'seed',
      1_800_000,
    )
    const { seconds: seedSeconds } = JSON.parse(seedOut.trim().split('\n').at(-1)!) as { seconds: number }
    const history = await measureStore(seeded, o)
    // With REDIS_URL: the same ClickHouse data (the seeded store once more; the empty store
    // afresh), the hot state in a Redis that starts empty.
    const withRedis = async (store: string): Promise<Store> => {
      const redis = await startRedis({ dir: await mkdtemp(join(dir, 'redis-')) })
      try {
        return await measureStore(store, { ...o, redisUrl: redis.url })
      } finally {
        await redis.stop()
      }
    }
    const redis = o.embeddedOnly ? null : { empty: await withRedis(join(dir, 'empty-redis')), history: await withRedis(seeded) }
    return { events: o.events, agents: o.agents, seedSeconds, empty, history, redis }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

/** The history scenarios as figures: the seeded store's, with its ratio to the empty store. */
export function historyFigures(r: HistoryResult): Figure[] {
  const n = `${(r.events / 1e6).toLocaleString('en-US')} M events`
  return [...storeFigures(n, r.empty, r.history, ''), ...(r.redis ? storeFigures(n, r.redis.empty, r.redis.history, 'REDIS_URL ') : [])]
}

function storeFigures(n: string, empty: Store, history: Store, mode: string): Figure[] {
  const r = { empty, history }
  const figures: Figure[] = [
    { figure: `${mode}start-up with ${n}: to /readyz`, value: r.history.readySeconds, unit: 's' },
    { figure: `${mode}start-up with ${n}: peak RSS`, value: r.history.peakRssBytes === null ? null : r.history.peakRssBytes / 2 ** 20, unit: 'MiB' },
    { figure: `${mode}ingest p50 at ${r.history.ingest.rate} req/s, ${n}`, value: r.history.ingest.p50, unit: 'ms', ratio: r.history.ingest.p50 / r.empty.ingest.p50 },
    { figure: `${mode}ingest p99 at ${r.history.ingest.rate} req/s, ${n}`, value: r.history.ingest.p99, unit: 'ms', ratio: r.history.ingest.p99 / r.empty.ingest.p99 },
    { figure: `${mode}ClickHouse merge time during that ingest, ${n}`, value: r.history.merges.seconds, unit: 's', ratio: r.history.merges.seconds / r.empty.merges.seconds },
  ]
  for (const [name, h] of Object.entries(r.history.reads)) {
    const e = r.empty.reads[name]!
    figures.push({ figure: `${mode}${name} first request, ${n}`, value: h.first, unit: 'ms', ratio: h.first / e.first })
    figures.push({ figure: `${mode}${name} p50, ${n}`, value: h.p50, unit: 'ms', ratio: h.p50 / e.p50 })
    figures.push({ figure: `${mode}${name} p99, ${n}`, value: h.p99, unit: 'ms', ratio: h.p99 / e.p99 })
  }
  return figures
}

export function historyTable(result: HistoryResult): string {
  const embedded = storeTable(result.events, result.empty, result.history, 'embedded')
  return result.redis ? `${embedded}\n\n${storeTable(result.events, result.redis.empty, result.redis.history, 'REDIS_URL')}` : embedded
}

function storeTable(events: number, empty: Store, history: Store, mode: string): string {
  const r = { empty, history }
  const ms = (n: number) => fmt(n, 1)
  const mb = (n: number | null) => (n === null ? 'n/a' : fmt(n / 2 ** 20))
  const rows = [
    [mode, 'empty', `${fmt(events)} events`, 'ratio'],
    ['start-up: seconds to /readyz', fmt(r.empty.readySeconds, 1), fmt(r.history.readySeconds, 1), '-'],
    ['start-up: peak RSS, MiB', mb(r.empty.peakRssBytes), mb(r.history.peakRssBytes), '-'],
    [`ingest at ${fmt(r.empty.ingest.rate)} req/s: p50 ms`, ms(r.empty.ingest.p50), ms(r.history.ingest.p50), ratio(r.history.ingest.p50, r.empty.ingest.p50)],
    [`ingest at ${fmt(r.empty.ingest.rate)} req/s: p99 ms`, ms(r.empty.ingest.p99), ms(r.history.ingest.p99), ratio(r.history.ingest.p99, r.empty.ingest.p99)],
    ['  ClickHouse merges during it: count', fmt(r.empty.merges.count), fmt(r.history.merges.count), ratio(r.history.merges.count, r.empty.merges.count)],
    ['  ClickHouse merges during it: seconds', fmt(r.empty.merges.seconds, 2), fmt(r.history.merges.seconds, 2), ratio(r.history.merges.seconds, r.empty.merges.seconds)],
    ['  hourly_cost active parts after it', fmt(r.empty.merges.hourlyParts), fmt(r.history.merges.hourlyParts), '-'],
  ]
  for (const name of Object.keys(r.history.reads)) {
    const e = r.empty.reads[name]!
    const h = r.history.reads[name]!
    rows.push([`${name}: first ms`, ms(e.first), ms(h.first), ratio(h.first, e.first)])
    rows.push([`${name}: p50 ms`, ms(e.p50), ms(h.p50), ratio(h.p50, e.p50)])
    rows.push([`${name}: p99 ms`, ms(e.p99), ms(h.p99), ratio(h.p99, e.p99)])
  }
  return table(rows)
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { full: { type: 'boolean' }, 'embedded-only': { type: 'boolean' }, events: { type: 'string' }, agents: { type: 'string' }, rate: { type: 'string' }, duration: { type: 'string' } },
    strict: true,
  })
  const o = {
    events: Number(values.events ?? (values.full ? 10_000_000 : 1_000_000)),
    agents: Number(values.agents ?? 10_000),
    rate: Number(values.rate ?? 500),
    duration: Number(values.duration ?? (values.full ? 15 : 5)),
    embeddedOnly: values['embedded-only'] ?? false,
  }
  const interrupted = () => void Promise.all([...children].map((c) => stop(c, `pid ${c.pid}`))).finally(() => process.exit(130))
  process.once('SIGINT', interrupted)
  process.once('SIGTERM', interrupted)
  const r = await history(o)
  console.log(historyTable(r))
  console.log(JSON.stringify(r))
}

if (import.meta.main) await main()
