/**
 * `npm run bench`: POST /events throughput and latency of burnrate as a ratio of a ceiling
 * (a bare Fastify server, bench/ceiling.ts) measured in the same run with the same load: the
 * load a fleet sends (bench/load.ts: 1000 agents in turn, a client event_id on every event).
 * See bench/README.md.
 *
 *   1. starts the ceiling and loads it: saturation, then a fixed rate of half the saturation
 *      throughput it just measured; stops it;
 *   2. starts `burnrate serve` on a fresh temporary DATA_DIR, creates an API key with the CLI,
 *      and loads it: saturation until each agent has sent one event (cold: every event for
 *      an agent new to the hot state), saturation for a while on the same agents (warm),
 *      the same in POST /events/batch requests of 100 events, then a fixed rate of half the
 *      warm saturation throughput;
 *   3. prints every phase and the ratios burnrate/ceiling;
 *   4. checks that the events burnrate acknowledged are the ones it stores (GET /agents),
 *      and that no request failed; exits 1 if not;
 *   5. unless BENCH_REDIS_URL is set, the Redis hot state (bench/redis-mode.ts): REDIS_URL on
 *      a redis-server of the run's own (with what the warm phase and the batches cost Redis,
 *      per event and per request beside burnrate's CPU, and a cold start of agents with a
 *      history after FLUSHALL), then REDIS_CLUSTER_NODES on a Redis Cluster of its own,
 *      without and with REDIS_WAIT_REPLICAS=1; in both, 48 users at saturation, with each
 *      master's share of the script time; each with the same checks;
 *   6. history and the write path through an outage; every figure to bench/results.
 *
 * Options (argv wins over env): --connections / BENCH_CONNECTIONS (50), --duration /
 * BENCH_DURATION seconds per timed phase (10), --warmup / BENCH_WARMUP seconds (2), --agents /
 * BENCH_AGENTS (1000), --cold-agents / BENCH_COLD_AGENTS (2000: the REDIS_URL run's cold start
 * after FLUSHALL), BENCH_REDIS_URL to give burnrate a Redis hot state, and
 * BENCH_CPU_PROF=<dir> to run burnrate under `node --cpu-prof` and print where it spent its time.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { createReadStream, readFileSync } from 'node:fs'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'

import { summarizeProfile } from './cpu-profile.ts'
import { history, historyFigures, historyTable } from './history.ts'
import { markdown, writeResults, type Figure } from './results.ts'
import { BATCH, clusterMode, redisMode, type ClusterModeResult, type RedisModeResult, type StoreRunResult, type UsersResult } from './redis-mode.ts'
import { REDIS_US_PER_EVENT_TARGET, type LoaderFigures, type MasterCost, type RedisCost, type ScriptStat } from './redis-figures.ts'
import { writePathFigures, writePathScenario, writePathTable } from './write-path.ts'
import { NODE, ROOT, START_TIMEOUT_MS, STORE_ENV, acknowledged, beforeExit, bucketQuantile, children, configureAgents, createKey, cutOff, failures, getJson, postJson, fmt, halfOf, load, periodBudgetsPhase, ratio, redisMemory, run, scrape, startBurnrate, stop, storedLlmCalls, table, track, unanswered, withCpu } from './processes.ts'
import { DEFAULT_AGENTS, type LoadSummary } from './load.ts'


/** A placeholder x-api-key for the ceiling, shaped like a burnrate key (br_<12 hex>_<43 chars>). */
const CEILING_KEY = `br_000000000000_${'x'.repeat(43)}`

/** burnrate settings passed through from the environment (printed when set). */
const PASSED_ENV = ['JOURNAL_FSYNC', 'JOURNAL_MAX_ROWS', 'JOURNAL_LEASE_MS', 'SHIP_INTERVAL_MS', 'SHIP_MAX_ROWS', 'KEY_CACHE_TTL_MS', 'EVENTS_RATE_LIMIT', 'READS_RATE_LIMIT']


interface Options {
  /** The full sizes: 10 M events of history, 20 s phases. */
  full: boolean
  connections: number
  duration: number
  warmup: number
  agents: number
  /** Agents of the REDIS_URL run's cold start after FLUSHALL, each with a history. */
  coldAgents: number
  cpuProfDir: string | null
}

function options(): Options {
  const { values } = parseArgs({
    options: { full: { type: 'boolean' }, connections: { type: 'string' }, duration: { type: 'string' }, warmup: { type: 'string' }, agents: { type: 'string' }, 'cold-agents': { type: 'string' } },
    strict: true,
  })
  const num = (name: string, raw: string | undefined, fallback: number, min: number, max: number) => {
    const n = raw === undefined || raw === '' ? fallback : Number(raw)
    if (!Number.isFinite(n) || n < min || n > max) throw new Error(`${name} must be a number from ${min} to ${max} (got ${raw})`)
    return n
  }
  const env = process.env
  const full = values.full === true
  return {
    full,
    connections: Math.round(num('connections', values.connections ?? env.BENCH_CONNECTIONS, 50, 1, 1000)),
    duration: num('duration', values.duration ?? env.BENCH_DURATION, full ? 20 : 10, 1, 600),
    warmup: num('warmup', values.warmup ?? env.BENCH_WARMUP, 2, 0, 600),
    agents: Math.round(num('agents', values.agents ?? env.BENCH_AGENTS, DEFAULT_AGENTS, 1, 1_000_000)),
    coldAgents: Math.round(num('cold-agents', values['cold-agents'] ?? env.BENCH_COLD_AGENTS, 2000, 1, 100_000)),
    cpuProfDir: env.BENCH_CPU_PROF ? resolve(env.BENCH_CPU_PROF) : null,
  }
}

/** The ceiling server: its URL is the first line of its stdout. */
async function startCeiling(): Promise<{ child: ChildProcess; url: string }> {
  const child = track(spawn(NODE, [join(ROOT, 'bench', 'ceiling.ts')], { stdio: ['ignore', 'pipe', 'inherit'] }))
  const lines = createInterface({ input: child.stdout! })
  const [line] = (await beforeExit(child, 'the ceiling URL', START_TIMEOUT_MS, once(lines, 'line'))) as [string]
  lines.close()
  child.stdout!.resume()
  return { child, url: line.trim() }
}

/** Client addresses of the wide unknown-key flood. */
const FLOOD_ADDRESSES = 1000

/** bench/flood.ts against `url` for `seconds`: made-up keys, 10 connections, from `addresses` client addresses. */
async function flood(url: string, seconds: number, addresses = 1): Promise<{ requestsPerSec: number; statusCodes: Record<string, number>; errors: number }> {
  const out = await run(
    [join(ROOT, 'bench', 'flood.ts'), '--url', url, '--connections', '10', '--duration', String(seconds), '--addresses', String(addresses)],
    process.env,
    `flood against ${url}`,
    (seconds + 60) * 1000,
  )
  return JSON.parse(out.trim().split('\n').at(-1)!) as { requestsPerSec: number; statusCodes: Record<string, number>; errors: number }
}

// ---------------------------------------------------------------------------------------
// burnrate's own metrics (METRICS_PORT): what the write path did during a phase

/**
 * INSERTs of events per second between two scrapes (the shipper's batches), and the p99 of the acknowledgement-to-readable lag: the upper
 * edge of the histogram bucket that holds it ("> 300" past the last one).
 */
function writePath(before: Map<string, number>, after: Map<string, number>, seconds: number) {
  const delta = (name: string) => (after.get(name) ?? 0) - (before.get(name) ?? 0)
  const shipped = after.has('burnrate_ship_lag_seconds_count') && delta('burnrate_ship_batches_total') > 0
  const inserts = delta('burnrate_ship_batches_total')
  const lagP99 = shipped ? bucketQuantile(before, after, 'burnrate_ship_lag_seconds', 0.99) : 'n/a'
  const source = shipped ? 'the journal shipper' : 'none in this phase'
  return { insertsPerSec: inserts / seconds, lagP99, source }
}

// ---------------------------------------------------------------------------------------
// Output

async function logStats(logFile: string): Promise<{ lines: number; warnings: string[] }> {
  let lines = 0
  const warnings: string[] = []
  for await (const line of createInterface({ input: createReadStream(logFile) })) {
    lines++
    const level = /"level":(\d+)/.exec(line)?.[1]
    if (level !== undefined && Number(level) >= 40 && warnings.length < 5) warnings.push(line)
  }
  return { lines, warnings }
}

// ---------------------------------------------------------------------------------------
// The REDIS_URL run's Redis figures (bench/redis-figures.ts) and its cold start after FLUSHALL

type Timed = LoadSummary & { cpuUsPerRequest: number | null; cpuUsPerEvent: number | null }

/** burnrate's CPU and redis-server's per request of the warm phase, and their sum against the embedded warm phase's burnrate alone. */
function cpuPerRequest(r: RedisModeResult, embedded: Timed) {
  const burnrate = r.warm.cpuUsPerRequest
  const redis = r.warmRedis?.cpuUsPerRequest ?? null
  const sum = burnrate !== null && redis !== null ? burnrate + redis : null
  return { burnrate, redis, sum, toEmbedded: sum !== null && embedded.cpuUsPerRequest ? sum / embedded.cpuUsPerRequest : null }
}

/**
 * A phase's Redis time per event (every command, a script's own counted once) against its
 * target, and the events each FCALL of the record function carried (the group commit).
 */
function redisPerEventLine(name: string, c: RedisCost): string {
  return (
    `${name}: Redis ${fmt(c.redisUsecPerEvent, 1)} µs per event (target ≤ ${REDIS_US_PER_EVENT_TARGET} µs/event), ` +
    `${c.eventsPerCall === null ? 'n/a' : fmt(c.eventsPerCall, 2)} events per script call (${fmt(c.events)} events, ${fmt(c.fcalls)} FCALLs; INFO commandstats, reset just before the phase)`
  )
}

function redisCostLines(r: RedisModeResult, embedded: Timed): void {
  const w = r.warmRedis
  if (!w) return
  const perEvent = (n: number, digits = 1) => (w.events > 0 ? fmt(n / w.events, digits) : 'n/a')
  const us = (n: number | null, digits = 0) => (n === null ? 'n/a' : `${fmt(n, digits)} µs`)
  for (const [name, c] of [['warm saturation', w], [`saturation, batches of ${BATCH}`, r.batchRedis]] as const) console.log(redisPerEventLine(`REDIS_URL ${name}`, c))
  console.log(
    `REDIS_URL warm saturation, Redis's time in scripts: ${fmt(w.usecPerEvent, 1)} µs per event,` +
      ` ${fmt(w.callsPerEvent, 2)} script calls per event (FCALL/EVALSHA/EVAL: ${fmt(w.scripts.calls)} calls, ${fmt(w.scripts.usec)} µs over ${fmt(w.events)} events)`,
  )
  const s = r.scripts
  console.log(
    `REDIS_URL what each call runs (SLOWLOG, every command of one event for each of ${fmt(s.events)} warm agents${s.complete ? '' : '; the log overflowed: the pass\'s end only'}):`,
  )
  const sample = (n: number, digits = 2) => (s.events > 0 ? fmt(n / s.events, digits) : 'n/a')
  const calls = (x: ScriptStat) =>
    Object.entries(x.commands)
      .sort((a, b) => b[1] - a[1])
      .map(([c, n]) => `${c} ${fmt(n / x.calls, 1)}`)
      .join(', ')
  // Every script; burnrate's commands of its own (the shipper's) when they come once in a hundred events or more.
  for (const x of s.byScript.filter((x) => x.script || x.calls >= s.events / 100)) {
    console.log(`  ${x.name}: ${sample(x.calls)} calls per event${Object.keys(x.commands).length ? `, each calling ${calls(x)}` : ''}`)
  }
  console.log('REDIS_URL warm saturation, every INFO commandstats line (a script\'s commands are counted in its own time too):')
  console.log(
    table([
      ['  command', 'calls', 'calls/event', 'µs', 'µs/event'],
      ...w.commandstats.map((c) => [`  ${c.command}`, fmt(c.calls), perEvent(c.calls, 2), fmt(c.usec), perEvent(c.usec)]),
    ]),
  )
  const cpu = cpuPerRequest(r, embedded)
  console.log(`REDIS_URL CPU per request, warm saturation: burnrate ${us(cpu.burnrate)} + redis-server ${us(cpu.redis)} = ${us(cpu.sum)}`)
  console.log(
    `REDIS_URL CPU per request (burnrate + Redis) / embedded burnrate CPU per request: ${cpu.toEmbedded === null ? 'n/a' : fmt(cpu.toEmbedded, 2)}` +
      ` (${us(cpu.sum)} against ${us(embedded.cpuUsPerRequest)} in the embedded warm phase of this run; target ≤ 1.3)`,
  )
}

function coldStartLines(
  r: RedisModeResult,
  earlier: Array<[string, LoadSummary]>,
  header: (title: string) => string[],
  row: (name: string, s: LoadSummary, toCeiling: boolean) => string[],
): void {
  const c = r.coldStart
  const nth = ['1st', '2nd', '3rd']
  console.log(
    `\nREDIS_URL cold start with a history: ${fmt(c.agents)} agents of one user, ${c.history.length} events each (in ClickHouse ${fmt(c.shippedS, 1)} s after the last), then FLUSHALL under the running burnrate`,
  )
  console.log(
    table([
      header('REDIS_URL cold start phase'),
      ...c.history.map((h, i) => row(`history, ${nth[i] ?? `${i + 1}th`} event of each agent${i === 0 ? ' (new, no history)' : ''}`, h, false)),
      row('after FLUSHALL, 1st event of each agent', c.flushed, false),
    ]),
  )
  const brief = (s: LoadSummary) => `p50 ${fmt(s.latencyMs.p50, 1)} ms, p99 ${fmt(s.latencyMs.p99, 1)} ms, max ${fmt(s.latencyMs.max, 1)} ms, ${fmt(s.requestsPerSec)} req/s`
  console.log(`REDIS_URL cold start after FLUSHALL: ${brief(c.flushed)} (target: p99 ≤ 250 ms)`)
  for (const [name, s] of [[`the same ${fmt(c.agents)} agents new (history, 1st event)`, c.history[0]!] as [string, LoadSummary], ...earlier]) {
    console.log(`  against ${name}, ${fmt(s.agents)} agents: ${brief(s)}`)
  }
  const loaderRow = (name: string, l: LoaderFigures) => [
    name,
    fmt(l.batches),
    l.batches ? fmt(l.agents / l.batches, 1) : '-',
    fmt(l.queriesPerBatch, 1),
    fmt(l.rowsPerBatch, 1),
    fmt(l.batchMs.p50, 0),
    fmt(l.batchMs.p99, 0),
    fmt(l.batchMs.max, 0),
    fmt(l.others),
  ]
  console.log(
    table([
      ['agent loader (ClickHouse queries traced)', 'batches', 'agents/batch', 'queries/batch', 'rows/batch', 'batch p50 ms', 'p99 ms', 'max ms', 'other queries'],
      loaderRow(`REDIS_URL cold, ${fmt(r.cold.agents)} new agents`, r.loader.cold),
      loaderRow(`cold start, ${fmt(c.agents)} new agents`, r.loader.newAgents),
      loaderRow(`after FLUSHALL, ${fmt(c.agents)} with history`, r.loader.flushed),
    ]),
  )
  const a = c.after
  console.log(
    `after FLUSHALL: the journal's instance ${a.registered ? 'registered again (its lease renewal)' : 'NOT registered again'};` +
      ` the partition count ${a.partitions === null ? 'not recorded again (a next instance with another REDIS_PARTITIONS would not be refused)' : `recorded: ${a.partitions}`}`,
  )
  console.log(
    `check: ${a.shippedS === null ? 'FAIL' : 'ok '} REDIS_URL after FLUSHALL the pass's events ` +
      (a.shippedS === null ? 'NOT in ClickHouse within the wait: the journal does not ship after a flush' : `in ClickHouse ${fmt(a.shippedS, 1)} s after it (the journal ships on)`),
  )
}

/**
 * The batch phase against the warm one of the same target: its events/s ÷ the warm phase's
 * requests/s (one event each), and burnrate's CPU per event in each.
 */
function batchLine(name: string, batch: Timed, warm: Timed): string {
  const events = batch.eventsPerSec ?? 0
  const e = batch.events
  const problems = e ? Object.entries(e.problems).map(([status, n]) => `${fmt(n)} × ${status}`) : []
  const cpu = (n: number | null) => (n === null ? 'n/a' : `${fmt(n, 1)} µs`)
  return (
    `${name} batches of ${BATCH}: ${fmt(events)} events/s (${fmt(batch.requestsPerSec)} requests/s) = ${ratio(events, warm.requestsPerSec)}x the warm phase's` +
    ` ${fmt(warm.requestsPerSec)} one-event requests/s (target ≥ 5x); events ${fmt(e?.stored ?? 0)} stored, ${fmt(e?.duplicate ?? 0)} duplicate,` +
    ` ${problems.length ? problems.join(', ') : 'no problems'}; burnrate's CPU per event ${cpu(batch.cpuUsPerEvent)} against ${cpu(warm.cpuUsPerRequest)} per warm request`
  )
}

/** Each master's share of the FCALL time (the hot state's functions) over a phase. */
function shares(masters: MasterCost[]): number[] {
  const total = masters.reduce((n, m) => n + m.fcall.usec, 0)
  return masters.map((m) => (total > 0 ? m.fcall.usec / total : 0))
}

/** USERS users at saturation on the single Redis and on the cluster: events/s, and each master's share of the script time. */
function usersLines(single: UsersResult, cluster: UsersResult): void {
  const row = (name: string, u: UsersResult) => {
    const share = shares(u.masters)
    const usec = u.masters.reduce((n, m) => n + m.usec, 0)
    const fcalls = u.masters.reduce((n, m) => n + m.fcall.calls, 0)
    return [
      name,
      fmt(u.saturation.requestsPerSec),
      fmt(u.saturation.latencyMs.p99, 1),
      u.saturation.cpuUsPerRequest === null ? '-' : fmt(u.saturation.cpuUsPerRequest, 0),
      u.saturation.ok > 0 ? fmt(usec / u.saturation.ok, 1) : '-',
      fcalls > 0 ? fmt(u.saturation.ok / fcalls, 2) : '-',
      u.masters.map((m, i) => `${m.node} ${fmt(share[i]! * 100, 0)} %`).join(', '),
    ]
  }
  console.log(`\n${single.users} users (an API key each, the agents spread over them), saturation, single Redis against the cluster:`)
  console.log(
    table([
      ['users phase', 'events/s', 'p99 ms', 'CPU µs/req', 'Redis µs/event', 'events/FCALL', "each master's share of the FCALL time"],
      row('REDIS_URL, one redis-server', single),
      row('REDIS_CLUSTER_NODES, 3 masters', cluster),
    ]),
  )
  console.log(
    `cluster / single Redis, ${single.users} users: ${ratio(cluster.saturation.requestsPerSec, single.saturation.requestsPerSec)} of the events/s` +
      ` (two cores: the masters share them, so the throughput cannot rise; the spread over the masters is the point)`,
  )
}

// ---------------------------------------------------------------------------------------

async function main(): Promise<number> {
  const opts = options()
  console.log(
    `burnrate bench: POST /events from ${fmt(opts.agents)} agents, ${opts.connections} connections, ` +
      `${opts.duration} s per timed phase, ${opts.warmup} s warmups, Node ${process.versions.node}`,
  )
  const dir = await mkdtemp(join(tmpdir(), 'burnrate-bench-'))
  // Agents no earlier run has sent either: a BENCH_REDIS_URL database keeps the hot state of
  // earlier runs, which would make the cold phase warm.
  const agentPrefix = `bench-${randomBytes(3).toString('hex')}-agent-`
  // Ctrl-C: stop what was started and remove the temporary directory before going.
  const interrupted = (signal: NodeJS.Signals) => {
    console.error(`\n${signal}: stopping the servers`)
    void Promise.all([...children].map((child) => stop(child, `pid ${child.pid}`)))
      .then(() => rm(dir, { recursive: true, force: true }))
      .finally(() => process.exit(130))
  }
  process.once('SIGINT', interrupted)
  process.once('SIGTERM', interrupted)
  try {
    // 1. The ceiling: saturation, then half of it.
    const ceiling = await startCeiling()
    console.log(`ceiling  at ${ceiling.url}: loading…`)
    const cSat = await load(ceiling.url, CEILING_KEY, opts, { agentPrefix, warmup: opts.warmup, load: 'saturation' })
    const cHalf = await load(ceiling.url, CEILING_KEY, opts, { agentPrefix, warmup: opts.warmup, load: { rate: halfOf(cSat) } })
    await stop(ceiling.child, 'the ceiling')

    // 2. burnrate, embedded stores on a fresh DATA_DIR.
    // CONFIG_RATE_LIMIT: the alert-level phase configures every one of its agents.
    // TRUST_PROXY: the wide flood names its addresses in X-Forwarded-For (the load sends none).
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: join(dir, 'data'), PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', METRICS_PORT: '0', CONFIG_RATE_LIMIT: '100000000', TRUST_PROXY: 'true' }
    for (const name of STORE_ENV) delete env[name]
    // The production shape's hot state, on purpose only: never a REDIS_URL left in the shell.
    if (process.env.BENCH_REDIS_URL) env.REDIS_URL = process.env.BENCH_REDIS_URL
    const passed = [...PASSED_ENV, 'REDIS_URL'].filter((name) => env[name]).map((name) => `${name}=${env[name]}`)
    const logFile = join(dir, 'burnrate.log')
    const burnrate = await startBurnrate(env, logFile, opts.cpuProfDir)
    const apiKey = await createKey(env, 'bench')
    console.log(`burnrate at ${burnrate.url}${passed.length ? ` (${passed.join(' ')})` : ''}: loading…`)
    // The warmup runs on agents of its own, so every measured event of the pass is an agent's first.
    const bCold = await load(burnrate.url, apiKey, opts, { agentPrefix, warmup: opts.warmup, load: 'once-per-agent' })
    // Straight after, on the same agents, every one of them known now: no warmup needed.
    const before = await scrape(burnrate.metrics)
    const pid = burnrate.child.pid
    const bWarm = await withCpu(pid, load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation' }))
    const writes = writePath(before, await scrape(burnrate.metrics), bWarm.durationS)
    // Right after, the same saturation on the same agents and key in POST /events/batch
    // requests of BATCH events each: what a client that sends its events in batches gets.
    const bBatch = await withCpu(pid, load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', batch: BATCH }))
    // The same saturation with every call reported as the OpenAI SDK's usage object.
    // Then the token fields once more: the share is taken against the mean of the phases
    // before and after it, so a drift of the machine or of the server over the run (the
    // journal and ClickHouse growing, a neighbour's load) counts against neither.
    const bUsage = await withCpu(pid, load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', usageObjects: true }))
    // The same saturation under every budget rule at once, none of which
    // acts in the phase: a user of its own whose fleet has a budget, five alert levels and a
    // velocity limit over the widest window, on agents with the same each. Every event
    // evaluates ten levels and two budgets and reads up to 120 minute buckets for the two
    // velocity windows. Agents of their own, configured and made known first, so the
    // token-field phases keep the defaults.
    const policyKey = await createKey(env, 'bench-policy', 'bench-policy')
    const policy = { alert_at: [0.5, 0.6, 0.7, 0.8, 0.9], velocity_limit_usd: 100_000, velocity_window_minutes: 60 }
    await postJson(burnrate.url, policyKey, '/config/fleet', { cost_threshold_usd: 1_000_000, ...policy })
    const alertPrefix = `alerts-${agentPrefix}`
    await configureAgents(burnrate.url, policyKey, alertPrefix, opts.agents, { cost_threshold_usd: 100_000, ...policy })
    const bAlertsCold = await load(burnrate.url, policyKey, opts, { agentPrefix: alertPrefix, warmup: 0, load: 'once-per-agent' })
    const bAlerts = await withCpu(pid, load(burnrate.url, policyKey, opts, { agentPrefix: alertPrefix, warmup: 0, load: 'saturation' }))
    // A budget hold before each call instead of its event, for the same agents,
    // with a TTL that outlasts the run: every hold granted stays open, and the fleet then
    // holds exactly the worst case of each (checked below).
    // A month and a rolling 30 days on every agent and the fleet of a user of their own.
    const periodsKey = await createKey(env, 'bench-periods', 'bench-periods')
    const bPeriods = await periodBudgetsPhase(burnrate.url, periodsKey, pid, opts, `periods-${agentPrefix}`)
    const heldBefore = (await getJson<{ held_usd: number }>(burnrate.url, apiKey, '/fleet')).held_usd
    const bHolds = await withCpu(pid, load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', holds: true }))
    const heldAfter = (await getJson<{ held_usd: number }>(burnrate.url, apiKey, '/fleet')).held_usd
    const bFlatAgain = await withCpu(pid, load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation' }))
    // Every request for one agent: its state is the one everybody touches.
    const bHot = await load(burnrate.url, apiKey, opts, { agentPrefix: `hot-${agentPrefix}`, warmup: 0, load: 'saturation', agents: 1 })
    const bHalf = await load(burnrate.url, apiKey, opts, { agentPrefix, warmup: opts.warmup, load: { rate: halfOf(bWarm) } })
    // The same half load while a flood of made-up keys arrives beside it: the
    // fleet's latency must stay within 2x of the phase before.
    const [bFlood, flooded] = await Promise.all([
      load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: { rate: halfOf(bWarm) } }),
      flood(burnrate.url, opts.duration),
    ])
    // Again from 1,000 addresses (X-Forwarded-For; this burnrate has TRUST_PROXY): none is
    // ever refused for its failures, so every made-up key is verified.
    const [bFloodWide, floodedWide] = await Promise.all([
      load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: { rate: halfOf(bWarm) } }),
      flood(burnrate.url, opts.duration, FLOOD_ADDRESSES),
    ])
    const stored = (await storedLlmCalls(burnrate.url, apiKey)) + (await storedLlmCalls(burnrate.url, policyKey)) + (await storedLlmCalls(burnrate.url, periodsKey))
    await stop(burnrate.child, 'burnrate')
    const log = await logStats(logFile)

    // 3. The figures.
    const row = (name: string, s: LoadSummary) => [
      name,
      s.rate === null ? '-' : fmt(s.rate),
      fmt(s.requestsPerSec),
      fmt(s.latencyMs.p50, 1),
      fmt(s.latencyMs.p99, 1),
      fmt(s.latencyMs.max, 1),
      fmt(s.ok),
      fmt(s.non2xx),
      fmt(s.errors),
    ]
    console.log()
    console.log(
      table([
        ['phase', 'offered', 'req/s', 'p50 ms', 'p99 ms', 'max ms', '2xx', 'non-2xx', 'errors'],
        row('ceiling   saturation', cSat),
        row('ceiling   50 % of saturation', cHalf),
        row('burnrate  saturation, cold (1 event/agent)', bCold),
        row('burnrate  saturation, warm', bWarm),
        row(`burnrate  saturation, batches of ${BATCH}`, bBatch),
        row('burnrate  saturation, usage objects', bUsage),
        row('burnrate  saturation, every budget rule', bAlerts),
        row('burnrate  saturation, period budgets', bPeriods.saturation),
        row('burnrate  saturation, POST /holds', bHolds),
        row('burnrate  saturation, token fields again', bFlatAgain),
        row('burnrate  saturation, one hot agent', bHot),
        row('burnrate  50 % of saturation', bHalf),
        row('burnrate  50 %, unknown-key flood beside', bFlood),
        row(`burnrate  50 %, the flood from ${fmt(FLOOD_ADDRESSES)} addresses`, bFloodWide),
      ]),
    )
    console.log()
    // Each burnrate phase against the ceiling's phase of the same kind.
    const ratios = (name: string, b: LoadSummary, c: LoadSummary, throughput: boolean) => [
      name,
      throughput ? ratio(b.requestsPerSec, c.requestsPerSec) : '-',
      ratio(b.latencyMs.p50, c.latencyMs.p50),
      ratio(b.latencyMs.p99, c.latencyMs.p99),
      ratio(b.latencyMs.max, c.latencyMs.max),
    ]
    console.log(
      table([
        ['burnrate/ceiling', 'req/s', 'p50', 'p99', 'max'],
        ratios('saturation, cold', bCold, cSat, true),
        ratios('saturation, warm', bWarm, cSat, true),
        ratios('saturation, usage objects', bUsage, cSat, true),
        ratios('saturation, one hot agent', bHot, cSat, true),
        ratios('50 % of saturation', bHalf, cHalf, false),
      ]),
    )
    console.log(batchLine('burnrate', bBatch, bWarm))
    console.log(
      `write path, warm saturation: ${fmt(writes.insertsPerSec, 2)} ClickHouse INSERTs of events per second` +
        ` (${writes.source}); acknowledgement to readable in ClickHouse p99 ${writes.lagP99} s`,
    )
    const flatMean = (bWarm.requestsPerSec + bFlatAgain.requestsPerSec) / 2
    const cpuFlat = bWarm.cpuUsPerRequest != null && bFlatAgain.cpuUsPerRequest != null ? (bWarm.cpuUsPerRequest + bFlatAgain.cpuUsPerRequest) / 2 : null
    for (const [what, b] of [
      ['usage objects', bUsage],
      ['every budget rule (alerts, fleet, velocity)', bAlerts],
      ['period budgets (a month and 30 days, agents and fleet)', bPeriods.saturation],
    ] as const) {
      console.log(
        `${what}: ${ratio(b.requestsPerSec, flatMean)} of the token fields' throughput in this run` +
          ` (the mean of the phases before and after it; target ≥ 0.90)` +
          (cpuFlat !== null && b.cpuUsPerRequest != null
            ? `; burnrate's CPU per request ${fmt(b.cpuUsPerRequest, 0)} µs against ${fmt(cpuFlat, 0)} µs: ${ratio(cpuFlat, b.cpuUsPerRequest)} of the token fields' requests per CPU second`
            : ''),
      )
    }
    console.log(
      `POST /holds: ${ratio(bHolds.requestsPerSec, flatMean)} of POST /events' throughput in this run (target ≥ 0.80)` +
        (cpuFlat !== null && bHolds.cpuUsPerRequest != null ? `; burnrate's CPU per request ${fmt(bHolds.cpuUsPerRequest, 0)} µs against ${fmt(cpuFlat, 0)} µs` : ''),
    )
    for (const [f, b, from] of [
      [flooded, bFlood, 'one address'],
      [floodedWide, bFloodWide, `${fmt(FLOOD_ADDRESSES)} addresses`],
    ] as const) {
      const codes = Object.entries(f.statusCodes).map(([code, n]) => `${fmt(n)} × ${code}`).join(', ')
      console.log(
        `unknown-key flood: ${fmt(f.requestsPerSec)} req/s from ${from} (${codes || 'no answers'}, ${fmt(f.errors)} errors);` +
          ` the fleet's p99 beside it ${ratio(b.latencyMs.p99, bHalf.latencyMs.p99)}x of the 50 % phase without (target ≤ 2)`,
      )
    }
    console.log(
      `fixed-rate load generator: requests issued up to ${fmt(cHalf.lateMs ?? 0, 1)} ms (ceiling) and ` +
        `${fmt(bHalf.lateMs ?? 0, 1)} ms (burnrate) after their due time`,
    )
    console.log(`burnrate log: ${fmt(log.lines)} lines, ${log.warnings.length === 0 ? 'no warnings or errors' : 'warnings/errors, first ones:'}`)
    for (const w of log.warnings) console.log(`  ${w}`)

    // 4. The check: every acknowledged event is stored once; events cut off when autocannon
    //    stopped (sent, unanswered) may or may not have been stored, so they bound the excess.
    const loads = [bCold, bWarm, bBatch, bUsage, bAlertsCold, bAlerts, bPeriods.cold, bPeriods.saturation, bFlatAgain, bHot, bHalf, bFlood, bFloodWide]
    const acked = loads.reduce((sum, b) => sum + acknowledged(b), 0)
    const cut = loads.reduce((sum, b) => sum + unanswered(b), 0)
    const excess = stored - acked
    const storedOk = excess >= 0 && excess <= cut
    const failed = [cSat, cHalf, ...loads, bHolds].reduce((sum, s) => sum + failures(s), 0)
    // Every hold answered was granted and is open (none expires within the run): the fleet
    // holds the worst case, 0.0075 USD, of each, and at most the cut-off ones more.
    const heldHolds = Math.round((heldAfter - heldBefore) / 0.0075)
    const heldOk = heldHolds >= bHolds.ok && heldHolds <= bHolds.ok + cutOff(bHolds)
    console.log(
      `check: ${storedOk ? 'ok ' : 'FAIL'} stored llm_calls ${fmt(stored)} = ${fmt(acked)} acknowledged (2xx, warmups included)` +
        ` + ${fmt(excess)} (allowed 0…${fmt(cut)}: the events of requests cut off unanswered at the end of a run)`,
    )
    console.log(`check: ${failed === 0 ? 'ok ' : 'FAIL'} ${fmt(failed)} non-2xx responses or errors (all phases, warmups included)`)
    console.log(`check: ${heldOk ? 'ok ' : 'FAIL'} the fleet holds ${fmt(heldHolds)} worst cases = ${fmt(bHolds.ok)} holds answered (+ at most ${fmt(cutOff(bHolds))} cut off)`)

    // 5. The Redis hot state (bench/redis-mode.ts), unless the phases above ran on
    //    BENCH_REDIS_URL already: on a redis-server of the run's own with AOF, then on a
    //    Redis Cluster of its own, compared with each other in the same run.
    let redisRun: RedisModeResult | null = null
    let clusterRun: ClusterModeResult | null = null
    if (!process.env.BENCH_REDIS_URL) {
      // A phase of a store run: throughput (and, at saturation, its ratio to the ceiling's),
      // latency, burnrate's CPU per answered request where measured, and failures.
      const storeRow = (name: string, s: LoadSummary & { cpuUsPerRequest?: number | null }, toCeiling: boolean) => [
        name,
        fmt(s.requestsPerSec),
        toCeiling ? ratio(s.requestsPerSec, cSat.requestsPerSec) : '-',
        fmt(s.latencyMs.p50, 1),
        fmt(s.latencyMs.p99, 1),
        fmt(s.latencyMs.max, 1),
        s.cpuUsPerRequest == null ? '-' : fmt(s.cpuUsPerRequest, 0),
        fmt(failures(s)),
      ]
      const storeHeader = (title: string) => [title, 'req/s', 'ratio to ceiling', 'p50 ms', 'p99 ms', 'max ms', 'CPU µs/req', 'non-2xx+errors']
      const storeChecks = (name: string, result: StoreRunResult) => {
        const c = result.check
        console.log(
          `check: ${c.ok ? 'ok ' : 'FAIL'} ${name} stored llm_calls ${fmt(c.stored)} = ${fmt(c.acked)} acknowledged` +
            ` + ${fmt(c.stored - c.acked)} (allowed 0…${fmt(c.cutOff)}: the events of requests cut off unanswered at the end of a run)`,
        )
        console.log(`check: ${result.failed === 0 ? 'ok ' : 'FAIL'} ${name} ${fmt(result.failed)} non-2xx responses or errors (all phases, warmups included)`)
      }

      console.log('\nREDIS_URL: a redis-server of the run\'s own (AOF, appendfsync everysec)…')
      redisRun = await redisMode(join(dir, 'redis-mode'), opts, `redis-${agentPrefix}`)
      const r = redisRun
      console.log(
        table([
          storeHeader('REDIS_URL phase'),
          storeRow('saturation, cold (1 event/agent)', r.cold, true),
          storeRow('saturation, warm', r.warm, true),
          storeRow(`saturation, batches of ${BATCH} (requests)`, r.batch, false),
          storeRow(`50 % of saturation (${fmt(r.half.rate ?? 0)} offered)`, r.half, false),
          storeRow('POST /holds, saturation', r.holds, true),
          storeRow('period budgets, saturation', r.periods.saturation, true),
        ]),
      )
      console.log(batchLine('REDIS_URL', r.batch, r.warm))
      console.log(`REDIS_URL POST /holds: ${ratio(r.holds.requestsPerSec, r.warm.requestsPerSec)} of POST /events' warm throughput (target ≥ 0.80)`)
      console.log(
        `REDIS_URL period budgets (a month and 30 days, agents and fleet): ${ratio(r.periods.saturation.requestsPerSec, r.warm.requestsPerSec)} of the warm token fields' throughput (target ≥ 0.90)` +
          (r.periods.saturation.cpuUsPerRequest != null && r.warm.cpuUsPerRequest != null ? `; burnrate's CPU per request ${fmt(r.periods.saturation.cpuUsPerRequest, 0)} µs against ${fmt(r.warm.cpuUsPerRequest, 0)} µs` : '') +
          `; Redis holds ${fmt(r.periods.memory.bytesPerAgent)} bytes per such agent (:s, :w and :d, ${fmt(r.periods.memory.agents)} agents)`,
      )
      console.log(
        `Redis: ${fmt(r.memory.bytesPerAgent)} bytes per agent (${fmt(r.memory.agents)} agents), ${fmt(r.memory.bytesPerId, 1)} bytes per remembered event id (${fmt(r.memory.ids)} ids)`,
      )
      redisCostLines(r, bWarm)
      coldStartLines(r, [['burnrate embedded, saturation, cold', bCold], ['REDIS_URL, saturation, cold', r.cold]], storeHeader, storeRow)
      storeChecks('REDIS_URL', r)

      console.log('\nREDIS_CLUSTER_NODES: a Redis Cluster of the run\'s own (3 masters with a replica each, AOF, appendfsync everysec)…')
      clusterRun = await clusterMode(join(dir, 'cluster-mode'), opts, `cluster-${agentPrefix}`)
      const c = clusterRun
      console.log(
        table([
          storeHeader('REDIS_CLUSTER_NODES phase'),
          storeRow('saturation, cold (1 event/agent)', c.cold, true),
          storeRow('saturation, warm', c.warm, true),
          storeRow('saturation, warm, REDIS_WAIT_REPLICAS=1', c.warmWait, true),
        ]),
      )
      // Both against a phase of the same kind measured minutes apart in this run: the
      // single Redis's warm phase, and the cluster's own without the wait.
      const cpu = (a: number | null, b: number | null) => (a !== null && b !== null ? `; burnrate's CPU per request ${fmt(a, 0)} µs against ${fmt(b, 0)} µs` : '')
      console.log(
        `cluster / single Redis, warm saturation: ${ratio(c.warm.requestsPerSec, r.warm.requestsPerSec)} of REDIS_URL's throughput in this run,` +
          ` p99 ${ratio(c.warm.latencyMs.p99, r.warm.latencyMs.p99)}x${cpu(c.warm.cpuUsPerRequest, r.warm.cpuUsPerRequest)}`,
      )
      console.log(
        `cluster, REDIS_WAIT_REPLICAS=1 / without, warm saturation: ${ratio(c.warmWait.requestsPerSec, c.warm.requestsPerSec)} of the throughput,` +
          ` p50 ${ratio(c.warmWait.latencyMs.p50, c.warm.latencyMs.p50)}x, p99 ${ratio(c.warmWait.latencyMs.p99, c.warm.latencyMs.p99)}x${cpu(c.warmWait.cpuUsPerRequest, c.warm.cpuUsPerRequest)}`,
      )
      usersLines(r.users, c.users)
      storeChecks('REDIS_CLUSTER_NODES', c)
    }

    // 6. History (bench/history.ts): start-up, reads and ingest with a seeded window against an empty store.
    const events = opts.full ? 10_000_000 : 1_000_000
    console.log(`\nhistory: ${fmt(events)} events over 10,000 agents against an empty store…`)
    const hist = await history({ events, agents: 10_000, rate: 500, duration: opts.full ? 15 : 5 })
    console.log(historyTable(hist))

    // 7. The write path with a ClickHouse server that goes away and comes back (bench/write-path.ts).
    console.log('\nwrite path: ClickHouse over HTTP, steady, down, back…')
    const wp = await writePathScenario({ rate: 1000, duration: opts.full ? 15 : 5 })
    console.log(writePathTable(wp))

    // 8. Every figure, in a file of its own and as one markdown table.
    const f: Figure[] = [
      { figure: 'ceiling saturation', value: cSat.requestsPerSec, unit: 'req/s' },
      { figure: 'ceiling p99 at 50 %', value: cHalf.latencyMs.p99, unit: 'ms' },
      ...[
        ['ingest saturation, cold (1 event/agent)', bCold],
        ['ingest saturation, warm', bWarm],
        ['ingest saturation, usage objects', bUsage],
        ['ingest saturation, one hot agent', bHot],
      ].map(([name, b]) => ({ figure: name as string, value: (b as LoadSummary).requestsPerSec, unit: 'req/s', ratio: (b as LoadSummary).requestsPerSec / cSat.requestsPerSec })),
      { figure: 'ingest CPU per request, warm saturation (burnrate)', value: bWarm.cpuUsPerRequest, unit: 'µs' },
      { figure: `ingest saturation, batches of ${BATCH}`, value: bBatch.eventsPerSec, unit: 'events/s', ratio: (bBatch.eventsPerSec ?? 0) / bWarm.requestsPerSec },
      { figure: `ingest CPU per event, batches of ${BATCH} (burnrate)`, value: bBatch.cpuUsPerEvent, unit: 'µs' },
      { figure: 'ingest p50 at 50 %', value: bHalf.latencyMs.p50, unit: 'ms', ratio: bHalf.latencyMs.p50 / cHalf.latencyMs.p50 },
      { figure: 'ingest p99 at 50 %', value: bHalf.latencyMs.p99, unit: 'ms', ratio: bHalf.latencyMs.p99 / cHalf.latencyMs.p99 },
      { figure: 'ingest max at 50 %', value: bHalf.latencyMs.max, unit: 'ms', ratio: bHalf.latencyMs.max / cHalf.latencyMs.max },
      { figure: 'usage objects / token fields, throughput', value: bUsage.requestsPerSec / flatMean, unit: 'ratio' },
      { figure: 'every budget rule / token fields, throughput', value: bAlerts.requestsPerSec / flatMean, unit: 'ratio' },
      { figure: 'POST /holds / POST /events, throughput', value: bHolds.requestsPerSec / flatMean, unit: 'ratio' },
      { figure: 'period budgets / token fields, throughput', value: bPeriods.saturation.requestsPerSec / flatMean, unit: 'ratio' },
      { figure: 'ClickHouse INSERTs of events, warm saturation', value: writes.insertsPerSec, unit: '/s' },
      { figure: 'fleet p99 with an unknown-key flood beside / without', value: bFlood.latencyMs.p99 / bHalf.latencyMs.p99, unit: 'ratio' },
      { figure: `fleet p99 with the flood from ${FLOOD_ADDRESSES} addresses beside / without`, value: bFloodWide.latencyMs.p99 / bHalf.latencyMs.p99, unit: 'ratio' },
      ...historyFigures(hist),
      ...writePathFigures(wp),
    ]
    if (redisRun) {
      const r = redisRun
      f.push(
        { figure: 'REDIS_URL ingest saturation, cold', value: r.cold.requestsPerSec, unit: 'req/s', ratio: r.cold.requestsPerSec / cSat.requestsPerSec },
        { figure: 'REDIS_URL ingest saturation, warm', value: r.warm.requestsPerSec, unit: 'req/s', ratio: r.warm.requestsPerSec / cSat.requestsPerSec },
        { figure: 'REDIS_URL ingest p50 at 50 %', value: r.half.latencyMs.p50, unit: 'ms', ratio: r.half.latencyMs.p50 / cHalf.latencyMs.p50 },
        { figure: 'REDIS_URL ingest p99 at 50 %', value: r.half.latencyMs.p99, unit: 'ms', ratio: r.half.latencyMs.p99 / cHalf.latencyMs.p99 },
        { figure: 'Redis memory per agent', value: r.memory.bytesPerAgent, unit: 'B' },
        { figure: 'Redis memory per remembered event id', value: r.memory.bytesPerId, unit: 'B' },
        { figure: 'REDIS_URL POST /holds / POST /events, throughput', value: r.holds.requestsPerSec / r.warm.requestsPerSec, unit: 'ratio' },
        { figure: 'REDIS_URL period budgets / token fields, throughput', value: r.periods.saturation.requestsPerSec / r.warm.requestsPerSec, unit: 'ratio' },
        { figure: 'Redis memory per agent with a month and a 30-day window', value: r.periods.memory.bytesPerAgent, unit: 'B' },
        { figure: `REDIS_URL ingest saturation, batches of ${BATCH}`, value: r.batch.eventsPerSec, unit: 'events/s', ratio: (r.batch.eventsPerSec ?? 0) / r.warm.requestsPerSec },
        { figure: `REDIS_URL CPU per event, batches of ${BATCH} (burnrate)`, value: r.batch.cpuUsPerEvent, unit: 'µs' },
        { figure: `REDIS_URL Redis time per event, batches of ${BATCH}`, value: r.batchRedis.redisUsecPerEvent, unit: 'µs' },
        { figure: `REDIS_URL events per script call, batches of ${BATCH}`, value: r.batchRedis.eventsPerCall, unit: 'events' },
        { figure: `REDIS_URL ${r.users.users} users, saturation`, value: r.users.saturation.requestsPerSec, unit: 'events/s' },
      )
      if (r.warmRedis) {
        const cpu = cpuPerRequest(r, bWarm)
        f.push(
          { figure: 'REDIS_URL Redis time in scripts per event, warm saturation', value: r.warmRedis.usecPerEvent, unit: 'µs' },
          { figure: 'REDIS_URL script calls per event, warm saturation', value: r.warmRedis.callsPerEvent, unit: 'calls' },
          { figure: 'REDIS_URL Redis time per event, warm saturation', value: r.warmRedis.redisUsecPerEvent, unit: 'µs' },
          { figure: 'REDIS_URL events per script call, warm saturation', value: r.warmRedis.eventsPerCall, unit: 'events' },
          { figure: 'REDIS_URL CPU per request, warm saturation: burnrate', value: cpu.burnrate, unit: 'µs' },
          { figure: 'REDIS_URL CPU per request, warm saturation: redis-server', value: cpu.redis, unit: 'µs' },
          { figure: 'REDIS_URL CPU per request, warm saturation: burnrate + redis-server', value: cpu.sum, unit: 'µs' },
          { figure: 'REDIS_URL (burnrate + Redis) / embedded burnrate, CPU per request', value: cpu.toEmbedded, unit: 'ratio' },
        )
      }
      const cs = r.coldStart
      const n = fmt(cs.agents)
      f.push(
        { figure: `REDIS_URL ${n} new agents (no history), req/s`, value: cs.history[0]!.requestsPerSec, unit: 'req/s', ratio: cs.history[0]!.requestsPerSec / cSat.requestsPerSec },
        { figure: `REDIS_URL ${n} new agents (no history), p99`, value: cs.history[0]!.latencyMs.p99, unit: 'ms' },
        { figure: `REDIS_URL cold start after FLUSHALL, ${n} agents with history, req/s`, value: cs.flushed.requestsPerSec, unit: 'req/s', ratio: cs.flushed.requestsPerSec / cSat.requestsPerSec },
        { figure: `REDIS_URL cold start after FLUSHALL, ${n} agents with history, p50`, value: cs.flushed.latencyMs.p50, unit: 'ms' },
        { figure: `REDIS_URL cold start after FLUSHALL, ${n} agents with history, p99`, value: cs.flushed.latencyMs.p99, unit: 'ms' },
        { figure: `REDIS_URL cold start after FLUSHALL, ${n} agents with history, max`, value: cs.flushed.latencyMs.max, unit: 'ms' },
        ...([
          [`${n} new agents (no history)`, r.loader.newAgents],
          [`cold start after FLUSHALL, ${n} agents with history`, r.loader.flushed],
        ] as const).flatMap(([name, l]) => [
          { figure: `REDIS_URL ${name}: agent loader batches`, value: l.batches, unit: 'batches' },
          { figure: `REDIS_URL ${name}: agents per loader batch`, value: l.batches ? l.agents / l.batches : null, unit: 'agents' },
          { figure: `REDIS_URL ${name}: loader batch p50`, value: l.batchMs.p50, unit: 'ms' },
        ]),
      )
      if (clusterRun) {
        const c = clusterRun
        f.push(
          { figure: 'REDIS_CLUSTER_NODES ingest saturation, cold', value: c.cold.requestsPerSec, unit: 'req/s', ratio: c.cold.requestsPerSec / cSat.requestsPerSec },
          { figure: 'REDIS_CLUSTER_NODES ingest saturation, warm', value: c.warm.requestsPerSec, unit: 'req/s', ratio: c.warm.requestsPerSec / cSat.requestsPerSec },
          { figure: 'REDIS_CLUSTER_NODES ingest saturation, warm, REDIS_WAIT_REPLICAS=1', value: c.warmWait.requestsPerSec, unit: 'req/s', ratio: c.warmWait.requestsPerSec / cSat.requestsPerSec },
          { figure: 'cluster / REDIS_URL, warm throughput', value: c.warm.requestsPerSec / r.warm.requestsPerSec, unit: 'ratio' },
          { figure: 'cluster REDIS_WAIT_REPLICAS=1 / without, warm throughput', value: c.warmWait.requestsPerSec / c.warm.requestsPerSec, unit: 'ratio' },
          { figure: `REDIS_CLUSTER_NODES ${c.users.users} users, saturation`, value: c.users.saturation.requestsPerSec, unit: 'events/s', ratio: c.users.saturation.requestsPerSec / r.users.saturation.requestsPerSec },
          { figure: `REDIS_CLUSTER_NODES ${c.users.users} users, largest master's share of the script time`, value: Math.max(...shares(c.users.masters)), unit: 'ratio' },
        )
      }
    } else if (process.env.BENCH_REDIS_URL) {
      const mem = await redisMemory(process.env.BENCH_REDIS_URL)
      console.log(`Redis: ${fmt(mem.bytesPerAgent)} bytes per agent (${fmt(mem.agents)} agents), ${fmt(mem.bytesPerId, 1)} bytes per remembered event id (${fmt(mem.ids)} ids)`)
      f.push({ figure: 'Redis memory per agent', value: mem.bytesPerAgent, unit: 'B' }, { figure: 'Redis memory per remembered event id', value: mem.bytesPerId, unit: 'B' })
    }
    const details = redisRun
      ? {
          'REDIS_URL warm saturation, Redis': redisRun.warmRedis,
          'REDIS_URL scripts (SLOWLOG pass)': redisRun.scripts,
          [`REDIS_URL saturation, batches of ${BATCH}, Redis`]: redisRun.batchRedis,
          [`REDIS_URL and REDIS_CLUSTER_NODES, ${redisRun.users.users} users, each master`]: { single: redisRun.users.masters, cluster: clusterRun?.users.masters ?? null },
          'REDIS_URL cold start': redisRun.coldStart,
          'REDIS_URL agent loader (traced)': redisRun.loader,
        }
      : {}
    const file = await writeResults(opts, f, details)
    console.log(`\n${markdown(f)}\n\nwritten to ${file}`)

    if (opts.cpuProfDir) {
      const files = (await readdir(opts.cpuProfDir)).filter((f) => f.endsWith('.cpuprofile')).sort()
      const latest = files.at(-1)
      if (latest) {
        console.log(`\nburnrate CPU profile ${join(opts.cpuProfDir, latest)}:`)
        console.log(summarizeProfile(JSON.parse(readFileSync(join(opts.cpuProfDir, latest), 'utf8')), 25))
      }
    }
    const storeRunsOk = [redisRun, clusterRun].every((s) => s === null || (s.check.ok && s.failed === 0)) && (redisRun === null || redisRun.coldStart.after.shippedS !== null)
    return storedOk && failed === 0 && heldOk && wp.check.ok && storeRunsOk ? 0 : 1
  } finally {
    await Promise.all([...children].map((child) => stop(child, `pid ${child.pid}`)))
    await rm(dir, { recursive: true, force: true })
  }
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (err: unknown) => {
    console.error(`bench failed: ${err instanceof Error ? err.message : String(err)}`)
    process.exitCode = 1
  },
)
