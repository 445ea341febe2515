/**
 * `npm run bench`: POST /events throughput and latency of burnrate as a ratio of a ceiling
 * (a bare Fastify server, bench/ceiling.ts) measured in the same run with the same load.
 * See bench/README.md.
 *
 *   1. starts the ceiling, loads it (bench/load.ts in its own process), stops it;
 *   2. starts `burnrate serve` on a fresh temporary DATA_DIR, creates an API key with the CLI,
 *      loads it the same way;
 *   3. prints both and the ratios burnrate/ceiling;
 *   4. checks that the events burnrate acknowledged are the ones it stores (GET /agents),
 *      and that no request failed; exits 1 if not.
 *
 * Options (argv wins over env): --connections / BENCH_CONNECTIONS (50), --duration /
 * BENCH_DURATION seconds (10), --warmup / BENCH_WARMUP seconds (2), and BENCH_CPU_PROF=<dir>
 * to run burnrate under `node --cpu-prof` and print where it spent its time.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { closeSync, createReadStream, openSync, readFileSync } from 'node:fs'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { summarizeProfile } from './cpu-profile.ts'
import type { Counts, LoadSummary } from './load.ts'

const ROOT = resolve(import.meta.dirname, '..')
const NODE = process.execPath
const BURNRATE = join(ROOT, 'bin', 'burnrate.js')

/** A placeholder x-api-key for the ceiling, shaped like a burnrate key (br_<12 hex>_<43 chars>). */
const CEILING_KEY = `br_000000000000_${'x'.repeat(43)}`

/** burnrate settings that would point the bench at other stores or change what it measures. */
const STRIPPED_ENV = ['CLICKHOUSE_URL', 'CLICKHOUSE_USER', 'CLICKHOUSE_PASSWORD', 'CLICKHOUSE_DATABASE', 'REDIS_URL', 'PRICES_FILE']
/** burnrate settings passed through from the environment (printed when set). */
const PASSED_ENV = ['BATCH_MAX_ROWS', 'BATCH_MAX_WAIT_MS', 'KEY_CACHE_TTL_MS', 'EVENTS_RATE_LIMIT', 'READS_RATE_LIMIT']

const START_TIMEOUT_MS = 60_000
const STOP_TIMEOUT_MS = 20_000

interface Options {
  connections: number
  duration: number
  warmup: number
  cpuProfDir: string | null
}

function options(): Options {
  const { values } = parseArgs({
    options: { connections: { type: 'string' }, duration: { type: 'string' }, warmup: { type: 'string' } },
    strict: true,
  })
  const num = (name: string, raw: string | undefined, fallback: number, min: number, max: number) => {
    const n = raw === undefined || raw === '' ? fallback : Number(raw)
    if (!Number.isFinite(n) || n < min || n > max) throw new Error(`${name} must be a number from ${min} to ${max} (got ${raw})`)
    return n
  }
  const env = process.env
  return {
    connections: Math.round(num('connections', values.connections ?? env.BENCH_CONNECTIONS, 50, 1, 1000)),
    duration: num('duration', values.duration ?? env.BENCH_DURATION, 10, 1, 600),
    warmup: num('warmup', values.warmup ?? env.BENCH_WARMUP, 2, 0, 600),
    cpuProfDir: env.BENCH_CPU_PROF ? resolve(env.BENCH_CPU_PROF) : null,
  }
}

// ---------------------------------------------------------------------------------------
// Children

const children = new Set<ChildProcess>()

function track(child: ChildProcess): ChildProcess {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null
}

/** SIGTERM, then waits for the exit (SIGKILL after STOP_TIMEOUT_MS). */
async function stop(child: ChildProcess, name: string): Promise<void> {
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
async function beforeExit<T>(child: ChildProcess, what: string, ms: number, promise: Promise<T>): Promise<T> {
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

/** The ceiling server: its URL is the first line of its stdout. */
async function startCeiling(): Promise<{ child: ChildProcess; url: string }> {
  const child = track(spawn(NODE, [join(ROOT, 'bench', 'ceiling.ts')], { stdio: ['ignore', 'pipe', 'inherit'] }))
  const lines = createInterface({ input: child.stdout! })
  const [line] = (await beforeExit(child, 'the ceiling URL', START_TIMEOUT_MS, once(lines, 'line'))) as [string]
  lines.close()
  child.stdout!.resume()
  return { child, url: line.trim() }
}

/**
 * `burnrate serve` on `dataDir`, logging to `logFile` (a file, not a pipe: reading a log pipe
 * would take CPU from the two cores the measurement runs on). Its address comes from the
 * 'burnrate is serving' line.
 */
async function startBurnrate(env: NodeJS.ProcessEnv, logFile: string, cpuProfDir: string | null): Promise<{ child: ChildProcess; url: string }> {
  const fd = openSync(logFile, 'a')
  const args = [...(cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', cpuProfDir] : []), BURNRATE, 'serve']
  const child = track(spawn(NODE, args, { env, stdio: ['ignore', fd, fd] }))
  closeSync(fd)
  const found = (async () => {
    for (;;) {
      for (const line of readFileSync(logFile, 'utf8').split('\n')) {
        if (!line.includes('burnrate is serving')) continue
        const entry = JSON.parse(line) as { msg?: string; address?: string }
        if (entry.msg === 'burnrate is serving' && entry.address) return entry.address
      }
      if (exited(child)) return null
      await new Promise((r) => setTimeout(r, 100))
    }
  })()
  try {
    const url = await beforeExit(child, "burnrate's 'burnrate is serving' log line", START_TIMEOUT_MS, found)
    if (!url) throw new Error('burnrate exited before serving')
    return { child, url }
  } catch (err) {
    console.error(`burnrate log (${logFile}), last lines:\n${tail(logFile, 20)}`)
    throw err
  }
}

function tail(file: string, n: number): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-n).join('\n')
  } catch {
    return '(none)'
  }
}

/** Runs a child to completion and returns its stdout (stderr passes through). */
async function run(args: string[], env: NodeJS.ProcessEnv, what: string, timeoutMs: number): Promise<string> {
  const child = track(spawn(NODE, args, { env, stdio: ['ignore', 'pipe', 'inherit'] }))
  let out = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk))
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
  const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null]
  clearTimeout(timer)
  if (code !== 0) throw new Error(`${what} failed (${signal ?? `exit ${code}`})`)
  return out
}

async function load(url: string, apiKey: string, opts: Options): Promise<LoadSummary> {
  const args = [join(ROOT, 'bench', 'load.ts'), '--url', url, '--connections', String(opts.connections), '--duration', String(opts.duration), '--warmup', String(opts.warmup)]
  const timeoutMs = (opts.duration + opts.warmup + 60) * 1000
  const out = await run(args, { ...process.env, BENCH_API_KEY: apiKey }, `load against ${url}`, timeoutMs)
  const last = out.trim().split('\n').at(-1)
  if (!last) throw new Error(`load against ${url} printed nothing`)
  return JSON.parse(last) as LoadSummary
}

// ---------------------------------------------------------------------------------------
// The correctness check

/** Sum of llm_calls over GET /agents, read until two reads 500 ms apart agree (bounded). */
async function storedLlmCalls(url: string, apiKey: string): Promise<number> {
  const read = async () => {
    const res = await fetch(new URL('/agents', url), { headers: { 'x-api-key': apiKey }, signal: AbortSignal.timeout(10_000) })
    if (!res.ok) throw new Error(`GET /agents answered ${res.status}: ${await res.text()}`)
    const body = (await res.json()) as { agents: { llm_calls: number }[] }
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
function cutOff(c: Counts): number {
  return Math.max(0, c.sent - c.ok - c.non2xx - c.errors)
}

function failures(s: LoadSummary): number {
  return s.non2xx + s.errors + (s.warmup ? s.warmup.non2xx + s.warmup.errors : 0)
}

// ---------------------------------------------------------------------------------------
// Output

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
}

function ratio(a: number, b: number): string {
  return b > 0 ? fmt(a / b, 2) : 'n/a'
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)))
  return rows.map((r) => r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  ')).join('\n')
}

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

async function main(): Promise<number> {
  const opts = options()
  console.log(
    `burnrate bench: POST /events, ${opts.connections} connections, ${opts.warmup} s warmup + ${opts.duration} s per target, Node ${process.versions.node}`,
  )
  const dir = await mkdtemp(join(tmpdir(), 'burnrate-bench-'))
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
    // 1. The ceiling.
    const ceiling = await startCeiling()
    console.log(`ceiling  at ${ceiling.url}: loading…`)
    const c = await load(ceiling.url, CEILING_KEY, opts)
    await stop(ceiling.child, 'the ceiling')

    // 2. burnrate, embedded stores on a fresh DATA_DIR.
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: join(dir, 'data'), PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' }
    for (const name of STRIPPED_ENV) delete env[name]
    // The production shape's hot state, on purpose only: never a REDIS_URL left in the shell.
    if (process.env.BENCH_REDIS_URL) env.REDIS_URL = process.env.BENCH_REDIS_URL
    const passed = [...PASSED_ENV, 'REDIS_URL'].filter((name) => env[name]).map((name) => `${name}=${env[name]}`)
    const logFile = join(dir, 'burnrate.log')
    const burnrate = await startBurnrate(env, logFile, opts.cpuProfDir)
    const keyOut = await run([BURNRATE, 'keys', 'create', '--user', 'bench', '--name', 'bench', '--rate-limit', '100000000'], env, 'burnrate keys create', 60_000)
    const apiKey = keyOut.trim().split('\n').at(-1)?.trim()
    if (!apiKey) throw new Error('burnrate keys create printed no key')
    console.log(`burnrate at ${burnrate.url}${passed.length ? ` (${passed.join(' ')})` : ''}: loading…`)
    const b = await load(burnrate.url, apiKey, opts)
    const stored = await storedLlmCalls(burnrate.url, apiKey)
    await stop(burnrate.child, 'burnrate')
    const log = await logStats(logFile)

    // 3. The figures.
    const row = (name: string, s: LoadSummary) => [
      name,
      fmt(s.requestsPerSec),
      fmt(s.latencyMs.p50, 1),
      fmt(s.latencyMs.p97_5, 1),
      fmt(s.latencyMs.p99, 1),
      fmt(s.ok),
      fmt(s.non2xx),
      fmt(s.errors),
    ]
    console.log()
    console.log(table([['target', 'req/s', 'p50 ms', 'p97.5 ms', 'p99 ms', '2xx', 'non-2xx', 'errors'], row('ceiling', c), row('burnrate', b)]))
    console.log()
    console.log(
      `burnrate/ceiling: throughput ${ratio(b.requestsPerSec, c.requestsPerSec)}` +
        `  p50 latency ${ratio(b.latencyMs.p50, c.latencyMs.p50)}` +
        `  p99 latency ${ratio(b.latencyMs.p99, c.latencyMs.p99)}`,
    )
    console.log(`burnrate log: ${fmt(log.lines)} lines, ${log.warnings.length === 0 ? 'no warnings or errors' : 'warnings/errors, first ones:'}`)
    for (const w of log.warnings) console.log(`  ${w}`)

    // 4. The check: every acknowledged event is stored once; events cut off when autocannon
    //    stopped (sent, unanswered) may or may not have been stored, so they bound the excess.
    const acked = b.ok + (b.warmup?.ok ?? 0)
    const unanswered = cutOff(b) + (b.warmup ? cutOff(b.warmup) : 0)
    const excess = stored - acked
    const storedOk = excess >= 0 && excess <= unanswered
    const failed = failures(c) + failures(b)
    console.log(
      `check: ${storedOk ? 'ok ' : 'FAIL'} stored llm_calls ${fmt(stored)} = ${fmt(acked)} acknowledged (2xx, warmup included)` +
        ` + ${fmt(excess)} (allowed 0…${fmt(unanswered)}: requests cut off unanswered at the end of a run)`,
    )
    console.log(`check: ${failed === 0 ? 'ok ' : 'FAIL'} ${fmt(failed)} non-2xx responses or errors (both targets, warmups included)`)

    if (opts.cpuProfDir) {
      const files = (await readdir(opts.cpuProfDir)).filter((f) => f.endsWith('.cpuprofile')).sort()
      const latest = files.at(-1)
      if (latest) {
        console.log(`\nburnrate CPU profile ${join(opts.cpuProfDir, latest)}:`)
        console.log(summarizeProfile(JSON.parse(readFileSync(join(opts.cpuProfDir, latest), 'utf8')), 25))
      }
    }
    return storedOk && failed === 0 ? 0 : 1
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
