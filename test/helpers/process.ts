import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

/**
 * Real `burnrate` processes for end-to-end tests: the CLI and `burnrate serve` run as
 * children on the Node binary that runs vitest, each on the DATA_DIR a test gives it.
 * This module never loads src/: the test process must not open a data path a child holds
 * (chDB lets one process open it), so tests talk to the children over HTTP and the CLI.
 */

export const BIN = fileURLToPath(new URL('../../bin/burnrate.js', import.meta.url))

/** Variables burnrate reads: a child gets only the ones a test sets, never the runner's. */
const BURNRATE_ENV = [
  'PORT',
  'HOST',
  'DATA_DIR',
  'CLICKHOUSE_URL',
  'CLICKHOUSE_USER',
  'CLICKHOUSE_PASSWORD',
  'CLICKHOUSE_DATABASE',
  'REDIS_URL',
  'LOG_LEVEL',
  'PRICES_FILE',
  'EVENTS_RATE_LIMIT',
  'READS_RATE_LIMIT',
  'CONFIG_RATE_LIMIT',
  'EXPORT_CONCURRENCY',
  'EXPORT_STALL_TIMEOUT_MS',
  'WEBHOOK_ALLOW_PRIVATE',
  'WEBHOOK_TIMEOUT_MS',
  'BATCH_MAX_ROWS',
  'BATCH_MAX_WAIT_MS',
  'JOURNAL_FSYNC',
  'JOURNAL_MAX_ROWS',
  'SHIP_INTERVAL_MS',
  'SHIP_MAX_ROWS',
  'KEY_CACHE_TTL_MS',
  'TRUST_PROXY',
]

function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = { ...process.env }
  for (const name of BURNRATE_ENV) delete base[name]
  return { ...base, ...env }
}

const dataDirs: string[] = []

/** A fresh, empty DATA_DIR under the OS temp directory (removed by cleanup()). */
export function freshDataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'burnrate-e2e-'))
  dataDirs.push(dir)
  return dir
}

export interface ExitStatus {
  code: number | null
  signal: NodeJS.Signals | null
}

// Every child started here, until it has exited: killChildren() ends what a test left.
const live = new Set<ChildProcess>()

function track(child: ChildProcess): Promise<ExitStatus> {
  live.add(child)
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child)
      resolve({ code, signal })
    })
  })
}

/** SIGKILLs every child still running and waits (bounded) for each to be gone. For afterEach/afterAll. */
export async function killChildren(ms = 10_000): Promise<void> {
  const waits = [...live].map(
    (child) =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.kill('SIGKILL')
      }),
  )
  await withDeadline(Promise.all(waits), ms, 'children did not exit after SIGKILL')
}

/** For afterEach: kills what is still running, then removes the DATA_DIRs made so far. */
export async function cleanup(): Promise<void> {
  await killChildren()
  for (const dir of dataDirs.splice(0)) rmSync(dir, { recursive: true, force: true })
}

// Last resort if the runner exits with children still up (a hook that never ran).
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL')
})

/** One pino line of the server's stdout. */
export type LogLine = Record<string, unknown> & { msg?: string; level?: number }

export interface ServerProcess {
  /** http://127.0.0.1:<port>, from the 'burnrate is serving' log line. */
  url: string
  dataDir: string
  child: ChildProcess
  /** Every stdout line so far, parsed (a line that is not JSON is kept as { msg: line }). */
  logs: LogLine[]
  /** stderr so far. */
  stderr(): string
  kill(signal?: NodeJS.Signals): void
  exited: Promise<ExitStatus>
  /** Resolves with the first log line (already seen or still to come) that matches, or rejects at the deadline. */
  waitForLog(match: (line: LogLine) => boolean, ms?: number): Promise<LogLine>
}

/**
 * Starts `burnrate serve` on `dataDir` (PORT=0, HOST=127.0.0.1, LOG_LEVEL=info plus `env`),
 * this checkout's or that of the bin/burnrate.js `bin` names (an earlier release's), and
 * resolves once it logs 'burnrate is serving'. Rejects, with the child killed and its
 * output in the message, if it exits first or is not serving within `ms`.
 */
export async function startServe(dataDir: string, env: Record<string, string> = {}, ms = 20_000, bin = BIN): Promise<ServerProcess> {
  const child = spawn(process.execPath, [bin, 'serve'], {
    // A short shipping interval keeps the tests that read event lists quick (default 1 s).
    env: childEnv({ DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', SHIP_INTERVAL_MS: '50', ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const exited = track(child)
  const logs: LogLine[] = []
  const waiters = new Set<() => void>()
  let stderr = ''
  child.stderr!.setEncoding('utf8')
  child.stderr!.on('data', (chunk: string) => (stderr += chunk))
  const lines = createInterface({ input: child.stdout! })
  lines.on('line', (text) => {
    let line: LogLine
    try {
      const parsed: unknown = JSON.parse(text)
      line = parsed !== null && typeof parsed === 'object' ? (parsed as LogLine) : { msg: text }
    } catch {
      line = { msg: text }
    }
    logs.push(line)
    for (const wake of waiters) wake()
  })
  // stdout is read to its end once the process is gone: no line can come after this.
  const outputDone = new Promise<void>((resolve) => lines.once('close', () => resolve()))

  const waitForLog = (match: (line: LogLine) => boolean, wait = 10_000): Promise<LogLine> =>
    new Promise((resolve, reject) => {
      let checked = 0
      let settled = false
      const finish = () => {
        settled = true
        clearTimeout(timer)
        waiters.delete(check)
      }
      const check = () => {
        if (settled) return
        for (; checked < logs.length; checked++) {
          if (match(logs[checked]!)) {
            finish()
            return resolve(logs[checked]!)
          }
        }
      }
      const fail = (why: string) => {
        if (settled) return
        finish()
        reject(new Error(`${why}\nstdout:\n${logs.map((l) => JSON.stringify(l)).join('\n')}\nstderr:\n${stderr}`))
      }
      const timer = setTimeout(() => fail(`no matching log line within ${wait} ms`), wait)
      waiters.add(check)
      check()
      void outputDone.then(() => {
        check()
        fail('the server exited without that log line')
      })
    })

  try {
    const serving = await waitForLog((l) => l.msg === 'burnrate is serving', ms)
    const url = serving.address
    if (typeof url !== 'string' || !/^http:\/\/127\.0\.0\.1:\d+$/.test(url)) throw new Error(`unexpected address ${String(url)}`)
    return {
      url,
      dataDir,
      child,
      logs,
      stderr: () => stderr,
      kill: (signal = 'SIGTERM') => {
        child.kill(signal)
      },
      exited,
      waitForLog,
    }
  } catch (err) {
    child.kill('SIGKILL')
    await withDeadline(exited, 10_000, 'server did not exit after SIGKILL')
    throw err
  }
}

export interface CliResult {
  code: number | null
  stdout: string
  stderr: string
}

/** Runs `burnrate <args>` (of `bin`) with `env` (DATA_DIR etc.) and collects its output; SIGKILLs it after `ms`. */
export function runCli(args: string[], env: Record<string, string>, ms = 20_000, bin = BIN): Promise<CliResult> {
  const child = spawn(process.execPath, [bin, ...args], { env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })
  const exited = track(child)
  let stdout = ''
  let stderr = ''
  child.stdout!.setEncoding('utf8')
  child.stderr!.setEncoding('utf8')
  child.stdout!.on('data', (c: string) => (stdout += c))
  child.stderr!.on('data', (c: string) => (stderr += c))
  const closed = new Promise<ExitStatus>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`burnrate ${args.join(' ')} did not finish within ${ms} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`))
    }, ms)
    closed.then(({ code }) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
    void exited
  })
}

/** The new key printed by `burnrate keys create` (the last line of its stdout). */
export function lastLine(text: string): string {
  const lines = text.trimEnd().split('\n')
  return lines[lines.length - 1]!.trim()
}

/** `burnrate keys create --user <user> …` on `dataDir`; returns the key and its id, or throws with the output. */
export async function createKey(dataDir: string, user: string, extra: string[] = [], env: Record<string, string> = {}): Promise<{ key: string; keyId: string }> {
  const r = await runCli(['keys', 'create', '--user', user, ...extra], { DATA_DIR: dataDir, ...env })
  const key = lastLine(r.stdout)
  const m = /^br_([0-9a-f]{12})_[A-Za-z0-9_-]{43}$/.exec(key)
  if (r.code !== 0 || !m) throw new Error(`keys create failed (exit ${r.code})\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`)
  return { key, keyId: m[1]! }
}

export interface ApiResponse {
  status: number
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies, asserted field by field
  body: any
}

/**
 * One HTTP request to a running server (JSON in, JSON out), bounded by `ms`. Each request
 * has its own connection (`Connection: close`), so no idle keep-alive connection of the
 * test process outlives it: tests that need keep-alive open their own socket.
 */
export function api(url: string, method: 'GET' | 'POST', path: string, key: string | null, body?: unknown, ms = 10_000): Promise<ApiResponse> {
  const headers: Record<string, string> = {}
  if (key !== null) headers['x-api-key'] = key
  const payload = body === undefined ? undefined : JSON.stringify(body)
  if (payload !== undefined) headers['content-type'] = 'application/json'
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method, headers, agent: false, signal: AbortSignal.timeout(ms) }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (text += c))
      res.on('error', reject)
      res.on('end', () => {
        let parsed: unknown = text
        try {
          parsed = text ? JSON.parse(text) : null
        } catch {
          // not JSON: keep the text
        }
        resolve({ status: res.statusCode!, body: parsed })
      })
    })
    req.on('error', reject)
    req.end(payload)
  })
}

/**
 * Waits until the server's journal holds nothing not yet in ClickHouse (its /readyz says so),
 * so event lists, breakdowns and hourly buckets show every acknowledged event. A server
 * without a journal (REDIS_URL) answers at once.
 */
export async function drained(url: string, ms = 10_000): Promise<void> {
  await waitFor(
    async () => {
      const res = await api(url, 'GET', '/readyz', null)
      return res.status === 200 && (res.body.journal?.rows ?? 0) === 0 ? true : undefined
    },
    ms,
    'the journal to drain into ClickHouse',
  )
}

/** Polls `check` every 25 ms until it returns something other than undefined; throws after `ms`. */
export async function waitFor<T>(check: () => T | undefined | Promise<T | undefined>, ms = 10_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    let last: unknown
    try {
      const value = await check()
      if (value !== undefined) return value
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) throw new Error(`${what} not met within ${ms} ms${last ? `: ${String(last)}` : ''}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

/** `promise`, or a rejection naming `what` after `ms`. */
export function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} (after ${ms} ms)`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

/** Integer nano-USD of a USD amount from a JSON response (costs are whole nano-USD). */
export function nano(usd: number): number {
  return Math.round(usd * 1e9)
}
