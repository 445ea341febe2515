import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { Cluster, type ChainableCommander } from 'ioredis'
import { z } from 'zod'
import type { RedisClient } from '../storage/redis.ts'
import { STREAM_LUA } from '../journal/stream-lua.ts'
import { METER_IDS, periodKey, periodOfMeter, type PeriodMeterId, type ResolvedMeter } from './meters.ts'

/**
 * The Redis hot state's Lua scripts, each described once: its file, the names of its keys
 * and the shape of its answer. The description builds everything positional: the table
 * that names the keys for the script (K.<name>, set by state.lua begin()), the key list of
 * the call, and the check of the answer. Arguments travel as one JSON object (ARGV[1], A.<name> in Lua), plus rows and
 * fingerprints as ARGV[2..], which the script appends as they are. Every script answers a
 * JSON object (cjson): a control answer (state.lua control()), or its result.
 *
 * JSON both ways costs the script about 2 µs per event at the bench's load (cjson's decode
 * and encode, measured against positional arrays with INFO commandstats), a small part of
 * the step, and it names every value: a missing or misplaced one is an error at the
 * boundary instead of a number read from the wrong slot.
 */
export interface ScriptSpec<R> {
  /** Its file under lua/, and its function's name in the library. */
  file: string
  /** Its keys, by the names the script reads them by, in the order they are passed. */
  keys: readonly string[]
  /** Its result (a control answer is told apart before this is checked). */
  result: z.ZodType<R>
}

/** A control answer: what must happen before the script can act (nothing changed). */
export interface Control {
  control: 'FENCED' | 'FULL' | 'NEEDS_LOAD' | 'STALE' | 'HOLD_OF_ANOTHER_AGENT'
  detail: { keys?: string[]; stale?: Array<{ key: string; pv: number; policy?: string }>; hold?: string }
}

// cjson writes an empty table as {}: a list that may be empty accepts that as [].
const list = <T extends z.ZodType>(item: T) => z.preprocess((v) => (isEmptyObject(v) ? [] : v), z.array(item))
const isEmptyObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === 0
/** Money and other integers the scripts send as text (cjson keeps 14 significant digits of a number). */
const int = z.string().regex(/^-?\d+$/).transform(Number)

const controlSchema = z.strictObject({
  control: z.enum(['FENCED', 'FULL', 'NEEDS_LOAD', 'STALE', 'HOLD_OF_ANOTHER_AGENT']),
  detail: z.preprocess(
    (v) => (isEmptyObject(v) ? {} : v),
    z.strictObject({
      keys: list(z.string()).optional(),
      stale: list(z.strictObject({ key: z.string(), pv: int, policy: z.string().optional() })).optional(),
      hold: z.string().optional(),
    }),
  ),
})

const transition = z.strictObject({
  scope: z.string(),
  reason: z.union([z.enum([...METER_IDS, 'manual', 'auto_resume', 'override_cleared', 'threshold_changed']), z.custom<PeriodMeterId>((v) => typeof v === 'string' && periodOfMeter(v) !== null)]),
  paused: z.boolean(),
  override: z.boolean(),
  total: int,
  held: int,
  version: int,
  meter: z.number().int(),
  spent: int.optional(),
})
export type TransitionReply = z.output<typeof transition>


/** lua/state.lua charge(): an API key's budget after a charge. */
const rate = z.strictObject({ max: z.number().int(), current: z.number().int(), ttl: z.number().int() })
export type RateReply = z.output<typeof rate>
const limited = z.strictObject({ limited: rate })

// The counted answer first: almost every event's, and a union tries its options in order (a
// failed try costs zod its issues).
const recorded = z.union([
  z.strictObject({
    counted: z.boolean(),
    cost: int,
    total: int,
    reason: z.string(),
    fleet_reason: z.string(),
    exhausts: int.optional(),
    transitions: list(transition).optional(),
    alerts: list(z.strictObject({ scope: z.string(), meter: z.number().int(), level: z.number().int(), spent: int, version: int })).optional(),
    ignored: z.strictObject({ since: int, calls: int, nano: int, version: int }).optional(),
    fleet_exhausts: int.optional(),
    fleet_last_hour: int.optional(),
    rate: rate.optional(),
    periods: list(int).optional(),
    last_hour: int.optional(),
    run_stopped: z.literal(true).optional(),
    run_stop: z.strictObject({ spent: int, held: int, version: int }).optional(),
  }),
  limited,
  z.strictObject({ error: z.literal('HOLD_OF_ANOTHER_AGENT') }),
])
export type RecordedReply = z.output<typeof recorded>

const pause = z.strictObject({ paused: z.boolean(), reason: z.string(), override: z.boolean() })

/** A state as the scripts take it (lua/state.lua read_states). */
export interface StateArgs {
  /** Its key id: its keys are base + id + ':s' and so on. */
  id: string
  /** The version of the policy its meters were resolved from. */
  pv: number
  /** Its meters: an index (from 1) into the call's lists of meters. */
  meters: number
  user: string
  /** '' for a fleet. */
  agent: string
  /** Its daily budget, which the projection aims at; absent: none. */
  budget?: number
  /** A fleet's: its user's agent index. */
  index?: string
  /** An agent's run budget; absent: none (its runs are not kept). */
  run_budget?: number
}

/** A resolved meter (meters.ts ResolvedMeter) as lua/rules.lua reads it; a false flag is left out. */
export interface LuaMeter {
  id: string
  limit: number
  /** The first minute of its window, resolved for the call's moment. */
  from: number
  minutes: number
  alert_at: readonly number[]
  auto_resume?: true
  holds?: true
  /** A period budget's: the key of its tally (tallyCode), and whether it is a rolling window of days. */
  tally?: number
  rolling?: true
}

/**
 * The key of a period's tally in a state (lua/state.lua period_spent()): a negative number
 * (window tallies are keyed by their positive length in minutes) that names the period's
 * spec, so a tally counted for one month in one zone is never read as another's. The same on
 * every instance: a 31-bit FNV-1a of meters.ts periodKey.
 */
export function tallyCode(m: Pick<ResolvedMeter, 'period'>): number {
  let h = 0x811c9dc5
  for (const c of periodKey(m)) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0
  return -((h & 0x7fffffff) + 1)
}

/** A state as a read answers it (lua/read.lua). */
const stateRead = z.strictObject({
  total: int,
  calls: int,
  active: z.boolean(),
  last_minute: int,
  pause: pause.extend({ since: int }),
  held: int,
  ignored: z.strictObject({ since: int, calls: int, nano: int, flagged: z.boolean() }),
  transition: transition.optional(),
  exhausts: int.optional(),
  periods: list(int).optional(),
  last_hour: int.optional(),
})

export const SCRIPTS = {
  record: {
    file: 'record',
    keys: ['journal', 'fenced', 'ids'],
    result: z.strictObject({ events: list(recorded) }),
  },
  read: {
    file: 'read',
    keys: ['journal', 'fenced'],
    result: z.strictObject({ states: z.array(stateRead) }),
  },
  setPolicy: {
    file: 'set_policy',
    keys: ['journal', 'fenced'],
    result: z.strictObject({ pv: int, transition: transition.optional() }),
  },
  setPaused: {
    file: 'set_paused',
    keys: ['journal', 'fenced'],
    result: z.preprocess((v) => (isEmptyObject(v) ? {} : v), z.strictObject({ transition: transition.optional() })),
  },
  hold: {
    file: 'hold',
    keys: ['journal', 'fenced'],
    result: z.union([
      limited,
      z.strictObject({
        refusal: z.enum(['paused', 'budget', 'fleet_budget', 'period_budget', 'fleet_period_budget', 'run_budget']).optional(),
        run_stopped: z.boolean().optional(),
        agent: z.strictObject({ pause, spent: list(int), held: int }),
        fleet: z.strictObject({ pause, spent: list(int), held: int }),
        transitions: list(transition),
        rate: rate.optional(),
      }),
    ]),
  },
  release: {
    file: 'release',
    keys: ['fleet'],
    result: z.union([
      limited,
      z.preprocess((v) => (isEmptyObject(v) ? {} : v), z.strictObject({ released: z.strictObject({ amount: int, agent_id: z.string() }).optional(), rate: rate.optional() })),
    ]),
  },
  load: {
    file: 'load',
    keys: ['ids'],
    result: z.strictObject({ installed: list(z.boolean()) }),
  },
  agents: {
    file: 'agents',
    keys: ['index'],
    result: z.strictObject({ agents: list(z.string()) }),
  },
  agentsLoad: {
    file: 'agents_load',
    keys: ['index'],
    result: z.preprocess(() => ({}), z.strictObject({})),
  },
} as const satisfies Record<string, ScriptSpec<unknown>>

export type ScriptName = keyof typeof SCRIPTS
export type ScriptResult<N extends ScriptName> = z.output<(typeof SCRIPTS)[N]['result']>

// Read once at start-up: the files of the library.
const lua = (name: string): string => readFileSync(new URL(`./lua/${name}.lua`, import.meta.url), 'utf8')

/**
 * The library Redis runs every script of the hot state as (Redis functions, FUNCTION LOAD):
 * the journal's stream.lua, state.lua and rules.lua, whose functions are made once, when it
 * is loaded, instead of on every call as a script sent by EVAL would remake them (about
 * 15 µs of Redis time a call), and each script as a function of it. Its name carries a
 * hash of its text: instances running different versions each call their own, side by side.
 */
export const LIBRARY = library()

function library(): { name: string; code: string } {
  const files = Object.values(SCRIPTS).map((spec) => [spec, lua(spec.file)] as const)
  const shared = `${STREAM_LUA}\n${lua('state')}\n${lua('rules')}`
  const hash = createHash('sha256').update(shared).update(files.map(([, text]) => text).join('\n')).digest('hex').slice(0, 12)
  const name = `burnrate_${hash}`
  const functions = files.map(([spec, text]) => {
    const keys = spec.keys.map((key, i) => `${key} = KEYS[${i + 1}]`).join(', ')
    return `redis.register_function('${functionName(name, spec)}', function(KEYS, ARGV)\nbegin({ ${keys} }, ARGV)\n${text}\nend)`
  })
  return { name, code: `#!lua name=${name}\n${shared}\n${functions.join('\n')}` }
}

function functionName(library: string, spec: ScriptSpec<unknown>): string {
  return `${library}_${spec.file}`
}

/**
 * Loads the library where calls run: a Redis, or every master of a cluster (replicas get it
 * from their master, and keep it through a failover). Redis keeps it in its AOF and RDB.
 */
export async function loadLibrary(redis: RedisClient): Promise<void> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis]
  await Promise.all(nodes.map((node) => node.function('LOAD', 'REPLACE', LIBRARY.code)))
}

/** Whether a call failed because its Redis does not have the library (a new, restarted or FUNCTION FLUSHed one). */
export function isMissingLibrary(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('ERR Function not found')
}

/** Queues a script on a client or a pipeline: its keys by name, its arguments, and its raw ARGV[2..]. */
export function queueScript<N extends ScriptName>(
  c: RedisClient | ChainableCommander,
  name: N,
  keys: Record<(typeof SCRIPTS)[N]['keys'][number], string>,
  args: object,
  rest: readonly string[] = [],
): unknown {
  const spec: ScriptSpec<unknown> = SCRIPTS[name]
  const named = keys as Record<string, string>
  return c.fcall(functionName(LIBRARY.name, spec), spec.keys.length, ...spec.keys.map((k) => named[k]!), JSON.stringify(args), ...rest)
}

/** Whether a script's raw answer is a control answer (state.lua control() writes that prefix). */
export function isControl(raw: unknown): boolean {
  return typeof raw === 'string' && raw.startsWith('{"control"')
}

/** A script's raw answer, checked: its control answer, or its result. */
export function parseReply<N extends ScriptName>(name: N, raw: unknown): Control | ScriptResult<N> {
  if (typeof raw !== 'string') throw new Error(`script ${name} answered ${typeof raw}, not JSON text`)
  const json: unknown = JSON.parse(raw)
  if (isControl(raw)) return controlSchema.parse(json) as Control
  return SCRIPTS[name].result.parse(json) as ScriptResult<N>
}

export function isControlReply(reply: unknown): reply is Control {
  return typeof reply === 'object' && reply !== null && 'control' in reply
}
