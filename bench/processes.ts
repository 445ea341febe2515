/**
 * The bench's child processes and output, shared by its scenarios (bench/run.ts,
 * bench/history.ts): burnrate and helper processes started, tracked and stopped, a
 * process's CPU time, and the tables printed.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { Redis } from 'ioredis'
import { REQUEST_TIMEOUT_S, type Counts, type EventCounts, type LoadSummary } from './load.ts'

export const ROOT = resolve(import.meta.dirname, '..')

/**
 * Settings of the shell that would point a benched burnrate at other stores, wait for
 * replicas, or change its prices: removed from the environment of every burnrate the bench
 * starts, which then gets its own.
 */
export const STORE_ENV = ['CLICKHOUSE_URL', 'CLICKHOUSE_USER', 'CLICKHOUSE_PASSWORD', 'CLICKHOUSE_DATABASE', 'REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_WAIT_REPLICAS', 'REDIS_WAIT_TIMEOUT_MS', 'PRICES_FILE']
export const NODE = process.execPath
export const BURNRATE = join(ROOT, 'bin', 'burnrate.js')

export const START_TIMEOUT_MS = 60_000
const STOP_TIMEOUT_MS = 20_000

// ---------------------------------------------------------------------------------------
// Children

export const children = new Set<ChildProcess>()

export function track(child: ChildProcess): ChildProcess {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}

export function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null
}

/** SIGTERM, then waits for the exit (SIGKILL after STOP_TIMEOUT_MS). */
export async function stop(child: ChildProcess, name: string): Promise<void> {
  if (exited(child)) return
  const exit = once(child, 'exit')
  child.kill('SIGTERM')
  const timer = setTimeout(() => {
    console.error(`${name} did not exit ${STOP_TIMEOUT_MS / 1000} s after SIGTERM; killing it`)
    child.kill('SIGKILL')
  }, STOP_TIMEOUT_MS)
  await exit
  clearTimeout(timer)
}

/** Rejects when `child` exits before `promise` settles, or after `ms`. */
export async function beforeExit<T>(child: ChildProcess, what: string, ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  let onExit: ((code: number | null, signal: NodeJS.Signals | null) => void) | undefined
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms / 1000} s waiting for ${what}`)), ms)
        onExit = (code, signal) => reject(new Error(`exited (${signal ?? code}) while waiting for ${what}`))
        child.once('exit', onExit)
      }),
    ])
  } finally {
    clearTimeout(timer)
    if (onExit) child.off('exit', onExit)
  }
}

/**
 * `burnrate serve` on `dataDir`, logging to `logFile` (a file, not a pipe: reading a log pipe
 * would take CPU from the two cores the measurement runs on). Its address comes from the
 * 'burnrate is serving' line, with the address of its metrics (it runs with METRICS_PORT=0).
 */
export async function startBurnrate(
  env: NodeJS.ProcessEnv,
  logFile: string,
  cpuProfDir: string | null,
  timeoutMs = START_TIMEOUT_MS,
): Promise<{ child: ChildProcess; url: string; metrics: string }> {
  const fd = openSync(logFile, 'a')
  // The log may hold an earlier process's lines (a store started again): only this one's count.
  const from = fstatSync(fd).size
  const args = [...(cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', cpuProfDir] : []), BURNRATE, 'serve']
  const child = track(spawn(NODE, args, { env, stdio: ['ignore', fd, fd] }))
  closeSync(fd)
  const found = (async () => {
    for (;;) {
      for (const line of readFileSync(logFile).subarray(from).toString('utf8').split('\n')) {
        if (!line.includes('burnrate is serving')) continue
        const entry = JSON.parse(line) as { msg?: string; address?: string; metrics?: string }
        if (entry.msg === 'burnrate is serving' && entry.address && entry.metrics) return { url: entry.address, metrics: entry.metrics }
      }
      if (exited(child)) return null
      await new Promise((r) => setTimeout(r, 100))
    }
  })()
  try {
    const serving = await beforeExit(child, "burnrate's 'burnrate is serving' log line", timeoutMs, found)
    if (!serving) throw new Error('burnrate exited before serving')
    return { child, ...serving }
  } catch (err) {
    console.error(`burnrate log (${logFile}), last lines:\n${tail(logFile, 20)}`)
    throw err
  }
}

export function tail(file: string, n: number): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-n).join('\n')
  } catch {
    return '(none)'
  }
}

/** Runs a child to completion and returns its stdout (stderr passes through). */
export async function run(args: string[], env: NodeJS.ProcessEnv, what: string, timeoutMs: number): Promise<string> {
  const child = track(spawn(NODE, args, { env, stdio: ['ignore', 'pipe', 'inherit'] }))
  let out = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk))
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
  const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null]
  clearTimeout(timer)
  if (code !== 0) throw new Error(`${what} failed (${signal ?? `exit ${code}`})`)
  return out
}

/**
 * CPU seconds (user + system) the process `pid` has used, from /proc (Linux), or null. The
 * server's CPU per request is a steadier comparison of two kinds of request than their
 * throughput: the load generator and the rest of the machine share its two cores.
 */
export function cpuSeconds(pid: number | undefined): number | null {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
    return (Number(fields[11]) + Number(fields[12])) / 100 // utime and stime, in clock ticks of 1/100 s
  } catch {
    return null
  }
}

/**
 * `phase` with the CPU microseconds `pid` spent per 2xx answer during it, and per event
 * stored (the same but for a phase of batches), null off Linux.
 */
export async function withCpu(pid: number | undefined, phase: Promise<LoadSummary>): Promise<LoadSummary & { cpuUsPerRequest: number | null; cpuUsPerEvent: number | null }> {
  const before = cpuSeconds(pid)
  const s = await phase
  const after = cpuSeconds(pid)
  const per = (n: number) => (before === null || after === null || n === 0 ? null : ((after - before) * 1e6) / n)
  return { ...s, cpuUsPerRequest: per(s.ok + (s.warmup?.ok ?? 0)), cpuUsPerEvent: per(acknowledged(s)) }
}

export function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
}

export function ratio(a: number, b: number): string {
  return b > 0 ? fmt(a / b, 2) : 'n/a'
}

export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)))
  return rows.map((r) => r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  ')).join('\n')
}


// ---------------------------------------------------------------------------------------
// burnrate's own metrics (METRICS_PORT)

export async function scrape(url: string): Promise<Map<string, number>> {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000) })
  if (!res.ok) throw new Error(`GET ${url} answered ${res.status}`)
  const samples = new Map<string, number>()
  for (const line of (await res.text()).split('\n')) {
    if (line.startsWith('#') || line === '') continue
    const at = line.lastIndexOf(' ')
    samples.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return samples
}

/**
 * The `q` quantile of a histogram's observations between two scrapes, as the upper edge of
 * the bucket that holds it ("≤ 2"; "> 300" past the last one), or 'n/a' with none.
 */
export function bucketQuantile(before: Map<string, number>, after: Map<string, number>, name: string, q: number): string {
  const delta = (key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0)
  const count = delta(`${name}_count`)
  if (count <= 0) return 'n/a'
  const buckets = [...after.keys()]
    .filter((k) => k.startsWith(`${name}_bucket{le="`))
    .map((k) => ({ le: k.slice(k.indexOf('"') + 1, k.lastIndexOf('"')), n: delta(k) }))
  const le = buckets.find((b) => b.n >= q * count)?.le
  return le === undefined ? 'n/a' : le === '+Inf' ? `> ${buckets.at(-2)?.le ?? '?'}` : `≤ ${le}`
}

// ---------------------------------------------------------------------------------------
// Load phases (bench/load.ts in a process of its own)

/** What every phase of a run shares. */
export interface LoadOptions {
  connections: number
  /** Seconds per timed phase. */
  duration: number
  agents: number
}

/** One phase: `warmup` seconds on agents of their own, then the measured load. */
export interface Phase {
  /** Its agents are `<agentPrefix><i>`. */
  agentPrefix: string
  warmup: number
  /**
   * Saturation for `duration` seconds; saturation until each agent has sent one event; or a
   * fixed offered rate (req/s) for `duration` seconds.
   */
  load: 'saturation' | 'once-per-agent' | { rate: number }
  /** Every llm_call as the OpenAI SDK's usage object instead of the token fields. */
  usageObjects?: boolean
  /** Agents the load is spread over, when not the run's (`--agents`). */
  agents?: number
  /** POST /holds for each call instead of POST /events. */
  holds?: boolean
  /** POST /events/batch of this many events per request (a timed saturation only). */
  batch?: number
  /** API keys to spread the agents over (agent i with key i mod their number), instead of the one given. */
  keys?: readonly string[]
}

export async function load(url: string, apiKey: string, opts: LoadOptions, phase: Phase): Promise<LoadSummary> {
  const args = [
    join(ROOT, 'bench', 'load.ts'),
    ...['--url', url, '--connections', String(opts.connections), '--duration', String(opts.duration), '--warmup', String(phase.warmup)],
    ...['--agents', String(phase.agents ?? opts.agents), '--agent-prefix', phase.agentPrefix],
    ...(phase.load === 'once-per-agent' ? ['--once-per-agent'] : []),
    ...(typeof phase.load === 'object' ? ['--rate', String(phase.load.rate)] : []),
    ...(phase.usageObjects ? ['--usage-objects'] : []),
    ...(phase.holds ? ['--holds'] : []),
    ...(phase.batch ? ['--batch', String(phase.batch)] : []),
  ]
  // A pass over the agents is as long as the server takes: bounded by every request timing out.
  const measuredS = phase.load === 'once-per-agent' ? Math.ceil((phase.agents ?? opts.agents) / opts.connections) * REQUEST_TIMEOUT_S : opts.duration
  const timeoutMs = (phase.warmup + measuredS + 60) * 1000
  const env = { ...process.env, BENCH_API_KEY: apiKey, BENCH_API_KEYS: phase.keys?.join(',') ?? '' }
  const out = await run(args, env, `load against ${url}`, timeoutMs)
  const last = out.trim().split('\n').at(-1)
  if (!last) throw new Error(`load against ${url} printed nothing`)
  return JSON.parse(last) as LoadSummary
}

/** Half the throughput a target sustained at saturation: the offered rate of its latency phase. */
export function halfOf(saturation: LoadSummary): number {
  return Math.max(1, Math.round(saturation.requestsPerSec / 2))
}

/**
 * What the Redis hot state holds, after a run with BENCH_REDIS_URL: bytes per agent (its
 * :s and :w keys) and per remembered event id (the id tables, their meta keys included),
 * by MEMORY USAGE over every such key of the database (earlier runs' too: an average).
 */
export async function redisMemory(url: string): Promise<{ agents: number; bytesPerAgent: number; ids: number; bytesPerId: number }> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  await redis.connect()
  try {
    const usage = async (match: string, each: (key: string, bytes: number) => Promise<void> | void) => {
      for await (const keys of redis.scanStream({ match, count: 1000 }) as AsyncIterable<string[]>) {
        const pipe = redis.pipeline()
        for (const key of keys) pipe.memory('USAGE', key, 'SAMPLES', 0)
        const replies = (await pipe.exec()) ?? []
        for (let i = 0; i < keys.length; i++) await each(keys[i]!, Number(replies[i]?.[1] ?? 0))
      }
    }
    let agents = 0
    let agentBytes = 0
    await usage('*:hs:*', (key, bytes) => {
      agentBytes += bytes
      if (key.endsWith(':s')) agents++
    })
    let ids = 0
    let idBytes = 0
    await usage('*}:ids*', async (key, bytes) => {
      idBytes += bytes
      // A bucket of a table (the meta key is `{p}:ids`): a small hash of fingerprints.
      if (!key.endsWith(':ids')) ids += await redis.hlen(key)
    })
    return { agents, bytesPerAgent: agents ? agentBytes / agents : 0, ids, bytesPerId: ids ? idBytes / ids : 0 }
  } finally {
    redis.disconnect()
  }
}


// ---------------------------------------------------------------------------------------
// A burnrate under test: its key, and the correctness check

/** An API key for `user` from burnrate's CLI, with a rate limit no bench reaches. */
export async function createKey(env: NodeJS.ProcessEnv, name: string, user = 'bench'): Promise<string> {
  const out = await run([BURNRATE, 'keys', 'create', '--user', user, '--name', name, '--rate-limit', '100000000'], env, 'burnrate keys create', 60_000)
  const key = out.trim().split('\n').at(-1)?.trim()
  if (!key) throw new Error('burnrate keys create printed no key')
  return key
}

/** POST /config `body` for agents `<prefix>0` … `<prefix>(agents-1)`, 20 at a time (the server needs CONFIG_RATE_LIMIT above `agents`). */
export async function configureAgents(url: string, apiKey: string, prefix: string, agents: number, body: Record<string, unknown>): Promise<void> {
  let next = 0
  const worker = async () => {
    for (let i = next++; i < agents; i = next++) await postJson(url, apiKey, '/config', { agent_id: `${prefix}${i}`, ...body })
  }
  await Promise.all(Array.from({ length: 20 }, worker))
}

/**
 * The period budgets of the period-budget phase: a month in a zone with daylight saving and a
 * rolling 30 days, on every agent and on the fleet, limits no load reaches (none acts).
 */
export const PERIOD_BUDGETS = [
  { period: 'month', limit_usd: 1_000_000, time_zone: 'America/New_York' },
  { window_days: 30, limit_usd: 1_000_000 },
]

/**
 * The phase of a run with period budgets: a user of its own (`apiKey`'s) whose fleet and
 * agents `<prefix>…` have PERIOD_BUDGETS, every agent made known first (one event each), then
 * saturation on them. Against the token fields' saturation of the same run.
 */
export async function periodBudgetsPhase(
  url: string,
  apiKey: string,
  pid: number | undefined,
  opts: LoadOptions,
  prefix: string,
): Promise<{ cold: LoadSummary; saturation: LoadSummary & { cpuUsPerRequest: number | null; cpuUsPerEvent: number | null } }> {
  await postJson(url, apiKey, '/config/fleet', { cost_threshold_usd: 1_000_000, period_budgets: PERIOD_BUDGETS })
  await configureAgents(url, apiKey, prefix, opts.agents, { cost_threshold_usd: 100_000, period_budgets: PERIOD_BUDGETS })
  const cold = await load(url, apiKey, opts, { agentPrefix: prefix, warmup: 0, load: 'once-per-agent' })
  const saturation = await withCpu(pid, load(url, apiKey, opts, { agentPrefix: prefix, warmup: 0, load: 'saturation' }))
  return { cold, saturation }
}

/** POSTs a JSON body with the key; throws unless it is answered 2xx. */
export async function postJson(url: string, apiKey: string, path: string, body: unknown): Promise<void> {
  const res = await fetch(new URL(path, url), {
    method: 'POST',
    headers: { 'x-api-key': apiKey, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  })
  if (!res.ok) throw new Error(`POST ${path} answered ${res.status}: ${await res.text()}`)
}

/** GET a path with the key and its JSON answer; throws unless it is answered 2xx. */
export async function getJson<T>(url: string, apiKey: string, path: string): Promise<T> {
  const res = await fetch(new URL(path, url), { headers: { 'x-api-key': apiKey }, signal: AbortSignal.timeout(10_000) })
  if (!res.ok) throw new Error(`GET ${path} answered ${res.status}: ${await res.text()}`)
  return (await res.json()) as T
}

/** Sum of llm_calls over GET /agents, read until two reads 500 ms apart agree (bounded). */
export async function storedLlmCalls(url: string, apiKey: string): Promise<number> {
  const read = async () => {
    const body = await getJson<{ agents: { llm_calls: number }[] }>(url, apiKey, '/agents')
    return body.agents.reduce((sum, a) => sum + a.llm_calls, 0)
  }
  let previous = await read()
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setTimeout(r, 500))
    const current = await read()
    if (current === previous) return current
    previous = current
  }
  return previous
}

/** Requests written but neither answered nor failed: the ones cut off when a run stopped. */
export function cutOff(c: Counts): number {
  return Math.max(0, c.sent - c.ok - c.non2xx - c.errors)
}

/**
 * The events a phase's answers acknowledged as stored, its warmup's included: its 2xx
 * answers, or for batches the results stored (not a duplicate, not a problem).
 */
export function acknowledged(s: LoadSummary): number {
  const events = (c: { ok: number; events: EventCounts | null }) => (c.events ? c.events.stored : c.ok)
  return events(s) + (s.warmup ? events(s.warmup) : 0)
}

/** The events of the requests a phase cut off (see cutOff), its warmup's included: a batch's events each. */
export function unanswered(s: LoadSummary): number {
  return (cutOff(s) + (s.warmup ? cutOff(s.warmup) : 0)) * (s.batch ?? 1)
}

/** A phase's non-2xx responses, connection errors and timeouts, and a batch's events refused, its warmup's included. */
export function failures(s: LoadSummary): number {
  const refused = (e: EventCounts | null | undefined) => (e ? Object.values(e.problems).reduce((n, k) => n + k, 0) : 0)
  return s.non2xx + s.errors + refused(s.events) + (s.warmup ? s.warmup.non2xx + s.warmup.errors + refused(s.warmup.events) : 0)
}

