/**
 * What a phase costs the run's redis-server (REDIS_URL, bench/redis-mode.ts), measured from
 * outside burnrate: INFO commandstats between a CONFIG RESETSTAT and the end of the phase,
 * redis-server's own CPU time from /proc, and, in a short pass of its own, which Lua script
 * each EVALSHA or FCALL ran and what it called (SLOWLOG, every command logged with its
 * arguments); the same counters on each master of a cluster. And what a
 * cold phase asked ClickHouse: the agent loader's batches, from the queries
 * bench/trace-clickhouse.ts traced in burnrate.
 */
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type { Redis } from 'ioredis'
import { LIBRARY } from '../src/hot-state/scripts.ts'
import { RedisJournal } from '../src/journal/redis-streams.ts'
import { cpuSeconds } from './processes.ts'
import type { TracedQuery } from './trace-clickhouse.ts'

/** One line of INFO commandstats (`cmdstat_<command>:calls=…,usec=…`). */
export interface CommandStat {
  command: string
  calls: number
  usec: number
}

/**
 * The commands that run a Lua script. Redis counts the commands a script calls in their own
 * lines too (cmdstat_incr, cmdstat_xadd, …), and their time inside the script's: summing
 * every line would count it twice.
 */
const SCRIPT_COMMANDS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro'])

export function commandstats(info: string): CommandStat[] {
  return [...info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)]
    .map((m) => ({ command: m[1]!, calls: Number(m[2]), usec: Number(m[3]) }))
    .sort((a, b) => b.usec - a.usec)
}

/** What Redis spent on a phase, per event it acknowledged. */
export interface RedisCost {
  /** Events the phase acknowledged, its warmup's included. */
  events: number
  /** Every line of INFO commandstats over the phase, the most time first. */
  commandstats: CommandStat[]
  /** The script commands (FCALL, EVALSHA, EVAL and their _ro variants): calls and µs inside Redis. */
  scripts: { calls: number; usec: number }
  /** scripts.usec ÷ events: Redis's time running scripts per event. */
  usecPerEvent: number
  callsPerEvent: number
  /**
   * FCALL calls: the hot state's functions. In a phase of POST /events alone every one is
   * the record function's (the SLOWLOG pass names them; the journal's scripts are EVALSHA).
   */
  fcalls: number
  /** events ÷ fcalls: the events one call of the record function carried (the group commit); null without a call. */
  eventsPerCall: number | null
  /**
   * Every command's µs ÷ events, the commands a script calls counted once (in the script's
   * time, not in their own lines too), the bench's own CONFIG RESETSTAT left out: Redis's
   * time per event, whatever ran it.
   */
  redisUsecPerEvent: number
  /** redis-server's user + system CPU over the phase ÷ events (its AOF writes, sockets and background threads too); null off Linux or unknown. */
  cpuUsPerRequest: number | null
}

/** Redis's time per event the figures are held to: the group commit's target. */
export const REDIS_US_PER_EVENT_TARGET = 20

/**
 * The commands a Lua script of burnrate's calls (redis.call / redis.pcall in the hot state's
 * library and the journal's and the rate limiter's scripts): Redis counts each in its own
 * INFO commandstats line as well as in the script's time. A command also sent on its own
 * (the shipper's XLEN) is left out with them: a few a second, against thousands of events.
 */
function scriptedCommands(): Set<string> {
  const texts = [LIBRARY.code, ...[...definedScripts().values()].map((d) => d.lua)]
  return new Set(texts.flatMap((t) => [...t.matchAll(/redis\.p?call\(\s*['"]([A-Za-z]+)['"]/g)].map((m) => m[1]!.toLowerCase())))
}

/** A phase's INFO commandstats lines, per event. */
export function costOf(stats: CommandStat[], events: number, cpuUs: number | null): RedisCost {
  const scripted = scriptedCommands()
  const scripts = stats.filter((s) => SCRIPT_COMMANDS.has(s.command)).reduce((a, s) => ({ calls: a.calls + s.calls, usec: a.usec + s.usec }), { calls: 0, usec: 0 })
  const fcalls = stats.filter((s) => s.command === 'fcall').reduce((n, s) => n + s.calls, 0)
  const usec = stats.filter((s) => !scripted.has(s.command) && !s.command.startsWith('config|')).reduce((n, s) => n + s.usec, 0)
  return {
    events,
    commandstats: stats,
    scripts,
    usecPerEvent: events > 0 ? scripts.usec / events : 0,
    callsPerEvent: events > 0 ? scripts.calls / events : 0,
    fcalls,
    eventsPerCall: fcalls > 0 ? events / fcalls : null,
    redisUsecPerEvent: events > 0 ? usec / events : 0,
    cpuUsPerRequest: cpuUs === null || events === 0 ? null : cpuUs / events,
  }
}

/**
 * Starts measuring the run's redis-server (CONFIG RESETSTAT, its CPU time so far); the
 * function returned ends it, for the `events` the phase acknowledged.
 */
export async function measureRedis(client: Redis): Promise<(events: number) => Promise<RedisCost>> {
  const pid = Number(/process_id:(\d+)/.exec(await client.info('server'))?.[1])
  await client.config('RESETSTAT')
  const cpu0 = cpuSeconds(pid)
  return async (events) => {
    const cpu1 = cpuSeconds(pid)
    const stats = commandstats(await client.info('commandstats'))
    return costOf(stats, events, cpu0 === null || cpu1 === null ? null : (cpu1 - cpu0) * 1e6)
  }
}

/** One master's share of a phase: its address, and what it spent. */
export interface MasterCost {
  node: string
  /** Its FCALL line (the hot state's functions): calls and µs. */
  fcall: { calls: number; usec: number }
  /** Every command's µs on it, the commands a script calls counted once. */
  usec: number
}

/**
 * The same on each master of a cluster: CONFIG RESETSTAT on every one, and, at the end, each
 * one's INFO commandstats (its FCALL line, and all its time). Run on a single Redis, one
 * master: the same figures, to set beside them.
 */
export async function measureMasters(masters: Array<{ node: string; client: Redis }>): Promise<() => Promise<MasterCost[]>> {
  await Promise.all(masters.map((m) => m.client.config('RESETSTAT')))
  return async () =>
    Promise.all(
      masters.map(async (m) => {
        const cost = costOf(commandstats(await m.client.info('commandstats')), 1, null)
        const fcall = cost.commandstats.find((c) => c.command === 'fcall')
        return { node: m.node, fcall: { calls: fcall?.calls ?? 0, usec: fcall?.usec ?? 0 }, usec: cost.redisUsecPerEvent }
      }),
    )
}

/** A Lua script a client defines (ioredis defineCommand): its name and text. */
interface DefinedScript {
  name: string
  lua: string
}

/**
 * The Lua scripts burnrate's journal and its rate limiter define, by SHA1: ioredis runs a
 * defineCommand'ed script by EVALSHA of its text's SHA1. Each owner is built on a stand-in
 * client that only records what it is asked to define, so the names and texts are the
 * code's own, whatever it defines today. A script none of them defines shows as its SHA.
 * (The hot state's scripts are functions of a library, FCALLed by name.)
 */
export function definedScripts(): Map<string, DefinedScript> {
  const scripts = new Map<string, DefinedScript>()
  const recorder = (owner: string) => ({
    defineCommand: (name: string, d: { lua: string }) => scripts.set(createHash('sha1').update(d.lua).digest('hex'), { name: `${owner}${name}`, lua: d.lua }),
  })
  try {
    new RedisJournal({ redis: recorder('') as never, instance: 'names', partitions: 1, maxRows: 1 })
  } catch {
    // Named by SHA, then.
  }
  try {
    const RedisStore = createRequire(import.meta.url)('@fastify/rate-limit/store/RedisStore.js') as new (c: boolean, e: boolean, redis: unknown) => unknown
    new RedisStore(false, false, recorder(RATE_LIMITER))
  } catch {
    // Named by SHA, then.
  }
  return scripts
}

/** @fastify/rate-limit's Redis store (the limits of the routes other than POST /events and the holds): its scripts' names start with this. */
export const RATE_LIMITER = '@fastify/rate-limit '

/** A script (or a command) in a SLOWLOG sample: its calls, and the commands a script called. */
export interface ScriptStat {
  name: string
  /** A script run (EVALSHA, EVAL), or a command of its own. */
  script: boolean
  calls: number
  /** The commands the script called (Redis logs them apart, from its Lua client), over all its calls. */
  commands: Record<string, number>
}

/** A SLOWLOG entry: id, unix time, µs, the arguments (a long one shortened), the client's address and name. */
type SlowlogEntry = [number, number, number, string[], string, string]

/**
 * Every command Redis runs while `pass` runs, and what it ran (the script's SHA of an
 * EVALSHA), from the SLOWLOG with a threshold of 0 µs; then the SLOWLOG is set back. Its
 * times are not used: a script's includes logging every command it calls, so this is a pass
 * of its own, not the measured phase, and what it gives is which scripts run and what they
 * call. `entries` bounds the log; `complete` says whether it held the whole pass (otherwise
 * the oldest entries were dropped and the sample is the pass's end).
 */
export async function sampleScripts<T>(client: Redis, entries: number, pass: () => Promise<T>): Promise<{ result: T; byScript: ScriptStat[]; complete: boolean }> {
  const [, threshold] = (await client.config('GET', 'slowlog-log-slower-than')) as [string, string]
  const [, maxLen] = (await client.config('GET', 'slowlog-max-len')) as [string, string]
  await client.config('SET', 'slowlog-max-len', String(entries))
  await client.slowlog('RESET')
  await client.config('SET', 'slowlog-log-slower-than', '0')
  let result: T
  let log: SlowlogEntry[]
  try {
    result = await pass()
  } finally {
    await client.config('SET', 'slowlog-log-slower-than', threshold)
    log = (await client.call('SLOWLOG', 'GET', '-1')) as SlowlogEntry[]
    await client.config('SET', 'slowlog-max-len', maxLen)
    await client.slowlog('RESET')
  }
  const scripts = definedScripts()
  const by = new Map<string, ScriptStat>()
  // Oldest first. A command a script called is logged (from the Lua client, address "?:0")
  // when it returns, before the script itself: the ones since the last top-level command
  // are the next script's.
  let called: string[] = []
  for (const [, , , argv, address] of log.toReversed()) {
    const command = String(argv[0]).toLowerCase()
    if (address === '?:0') {
      called.push(command)
      continue
    }
    // The SLOWLOG's own commands and CONFIG SET around the pass are the bench's, not burnrate's.
    if (command === 'slowlog' || command === 'config') continue
    const script = SCRIPT_COMMANDS.has(command)
    const sha = String(argv[1])
    const name =
      command === 'evalsha' || command === 'evalsha_ro'
        ? (scripts.get(sha)?.name ?? `script ${sha.slice(0, 12)}`)
        : command === 'fcall' || command === 'fcall_ro'
          ? `hot state ${sha.replace(`${LIBRARY.name}_`, '')}` // the function's name: the hot state's library
          : command
    const s = by.get(name) ?? { name, script, calls: 0, commands: {} }
    s.calls++
    if (script) for (const c of called) s.commands[c] = (s.commands[c] ?? 0) + 1
    called = []
    by.set(name, s)
  }
  return { result: result!, byScript: [...by.values()].sort((a, b) => b.calls - a.calls), complete: log.length < entries }
}

/** What burnrate asked ClickHouse during a phase (bench/trace-clickhouse.ts), and what its agent loader's batches were. */
export interface LoaderFigures {
  /** Batches of the agent loader: queries issued together that ask for agents (or a user's fleet). */
  batches: number
  /** Agents asked for over those batches (each batch's longest list). */
  agents: number
  /** ClickHouse queries per batch. */
  queriesPerBatch: number
  /** Rows the batches' queries returned, per batch: the agents' history. */
  rowsPerBatch: number
  /** From a batch's queries issued to the last one's rows parsed (ms). */
  batchMs: { p50: number; p99: number; max: number }
  /** Sum of every batch's time (ms): with batches run side by side, more than the phase lasted. */
  batchMsSum: number
  /** Other queries in the phase (an API key looked up again, a read). */
  others: number
}

/** The loader's batches in the trace `lines` between `from` and `to` (epoch ms): those issued in the phase. */
export function loaderFigures(lines: readonly TracedQuery[], from: number, to: number): LoaderFigures {
  const inPhase = lines.filter((q) => q.at >= from && q.at <= to)
  const byBatch = new Map<number, TracedQuery[]>()
  for (const q of inPhase) {
    if (q.refs === 0) continue
    const b = byBatch.get(q.batch) ?? []
    b.push(q)
    byBatch.set(q.batch, b)
  }
  const batches = [...byBatch.values()]
  const times = batches.map((b) => Math.max(...b.map((q) => q.ms))).sort((a, b) => a - b)
  // Nearest rank.
  const at = (p: number) => (times.length === 0 ? 0 : times[Math.min(times.length - 1, Math.max(0, Math.ceil((p / 100) * times.length) - 1))]!)
  const queries = batches.reduce((n, b) => n + b.length, 0)
  return {
    batches: batches.length,
    agents: batches.reduce((n, b) => n + Math.max(...b.map((q) => q.refs)), 0),
    queriesPerBatch: batches.length ? queries / batches.length : 0,
    rowsPerBatch: batches.length ? batches.reduce((n, b) => n + b.reduce((r, q) => r + q.rows, 0), 0) / batches.length : 0,
    batchMs: { p50: at(50), p99: at(99), max: at(100) },
    batchMsSum: times.reduce((s, t) => s + t, 0),
    others: inPhase.length - queries,
  }
}

/** The trace file's lines (none when it was not written: no query made). */
export function readTrace(file: string): TracedQuery[] {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch {
    return []
  }
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as TracedQuery)
}
