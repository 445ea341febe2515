/**
 * The load generator, run in its own process by bench/run.ts (so it never shares an event
 * loop with the orchestrator or the server under test):
 *
 *   BENCH_API_KEY=… node bench/load.ts --url http://127.0.0.1:PORT [--connections 50] [--duration 10]
 *     [--warmup 2] [--agents 1000] [--agent-prefix bench-agent-] [--rate <req/s> | --once-per-agent | --batch N]
 *
 * Sends POST <url>/events with content-type application/json and x-api-key, the load a fleet
 * sends whatever the target: every request an llm_call for the next of `agents` agents in
 * turn (so consecutive requests, and the requests in flight together, are for different
 * agents), with a fresh client event_id. First for `warmup` seconds on agents of their own
 * (`warmup-<prefix><i>`, so a warmup never makes the measured agents known to the server;
 * reported apart, not measured), then for `duration` seconds on `<prefix><i>`.
 *
 * Without --rate, saturation: autocannon, each connection sending its next request as soon
 * as the previous one is answered. --once-per-agent instead stops after exactly one event
 * for each agent, however long that takes (on a server that has not seen them: how fast it
 * takes in a fleet it does not know yet). With --rate, a fixed offered rate of that many
 * requests per second over at most `connections` connections (bench/fixed-rate.ts:
 * autocannon's overallRate sends in bursts). Prints one JSON summary (LoadSummary) on stdout.
 * With --holds, POST <url>/holds instead: a budget hold for the same call
 * (holdBody), for the same agents in the same order.
 *
 * With --batch N (saturation only), every request is a POST <url>/events/batch of N such
 * events, the next N agents in turn, each event its own event_id; the summary adds the
 * events: per second, and each result of the answers counted (stored, duplicate, problem).
 *
 * BENCH_API_KEYS (comma-separated) instead of BENCH_API_KEY spreads the load over several
 * keys (several users): agent i is always sent with key i mod the number of keys, so each
 * agent belongs to one user.
 */
import { randomUUID } from 'node:crypto'
import { parseArgs } from 'node:util'
import autocannon from 'autocannon'
import { fixedRate } from './fixed-rate.ts'

export const DEFAULT_AGENTS = 1000
export const DEFAULT_AGENT_PREFIX = 'bench-agent-'

/** Each agent's current run, as its client names it: a new run every RUN_EVENTS events of the agent. */
const runs = new Map<string, { id: string; left: number }>()
const RUN_EVENTS = 20

function runOf(agentId: string): string {
  let run = runs.get(agentId)
  if (!run || run.left === 0) runs.set(agentId, (run = { id: randomUUID(), left: RUN_EVENTS }))
  run.left--
  return run.id
}

/**
 * gpt-4o at 1000 input and 500 output tokens: 0.0075 USD, the ceiling's constant cost_usd.
 * A fresh event_id every time, as a client sends it, so no two requests are duplicates, and
 * the run_id of the agent's current run, as the clients send it between start() and end().
 */
export function benchBody(agentId: string, usageObject = false): string {
  const counts = usageObject
    ? // The same call as an OpenAI SDK reports it: priced by the price library.
      { provider: 'openai', api_flavor: 'chat', usage: { prompt_tokens: 1000, completion_tokens: 500, total_tokens: 1500, prompt_tokens_details: { cached_tokens: 0 } } }
    : { input_tokens: 1000, output_tokens: 500 }
  return JSON.stringify({ agent_id: agentId, event_type: 'llm_call', event_id: randomUUID(), run_id: runOf(agentId), model: 'gpt-4o', ...counts })
}

/** POST /holds for the call benchBody reports: its worst case, 1000 in and at most 500 out, is 0.0075 USD. */
export const HOLD_TTL_SECONDS = 3600
export function holdBody(agentId: string): string {
  return JSON.stringify({ agent_id: agentId, model: 'gpt-4o', input_tokens: 1000, max_output_tokens: 500, ttl_seconds: HOLD_TTL_SECONDS })
}

export interface Counts {
  /** Responses with a 2xx status. */
  ok: number
  non2xx: number
  /** Requests that got no response: connection errors, timeouts included. */
  errors: number
  timeouts: number
  /** Requests written; those still unanswered when the run stopped were cut off. */
  sent: number
}

/** The results of POST /events/batch answers, one per event: what a phase of batches counts. */
export interface EventCounts {
  /** Answered ok: true without `duplicate`: stored now. */
  stored: number
  /** Answered ok: true with `duplicate: true` (none expected: every event_id is fresh). */
  duplicate: number
  /** Answered ok: false, by status. */
  problems: Record<string, number>
}

/** One run's figures (the warmup's or the measured one's). */
interface Measured extends Counts {
  durationS: number
  /** 2xx responses per second. */
  requestsPerSec: number
  latencyMs: { mean: number; p50: number; p97_5: number; p99: number; max: number }
  statusCodes: Record<string, number>
  /** Fixed rate only: the most a request was issued after its due time (the generator falling behind). */
  lateMs: number | null
  /** --batch only: the events of the 2xx answers, by result. */
  events: EventCounts | null
}

export interface LoadSummary extends Measured {
  url: string
  connections: number
  agents: number
  agentPrefix: string
  /** The offered rate (req/s) of a fixed-rate run; null at saturation. */
  rate: number | null
  /** Events per request (POST /events/batch); null for POST /events and POST /holds. */
  batch: number | null
  /** --batch only: events answered ok (stored or duplicate) per second of the measured run. */
  eventsPerSec: number | null
  /** API keys (users) the load was spread over. */
  keys: number
  /** The warmup run before the measurement (null without one); its requests reach the server too. */
  warmup: (Counts & { durationS: number; events: EventCounts | null }) | null
  /** When the measured run started and ended (epoch ms, this machine's clock): what the server did meanwhile is the phase's. */
  startedAt: number
  endedAt: number
}

const MAX_CONNECTIONS = 1000
const MAX_SECONDS = 600
const MAX_AGENTS = 1_000_000
const MAX_RATE = 1_000_000
/** POST /events/batch takes at most this many events. */
const MAX_BATCH = 1000
/** A request unanswered this long counts as an error (a timeout). */
export const REQUEST_TIMEOUT_S = 10

/**
 * Saturation: autocannon, `connections` requests always in flight, for `seconds` or until
 * `amount` requests are sent.
 */
async function saturation(
  url: URL,
  headers: Record<string, string>,
  next: () => Next,
  connections: number,
  length: { seconds: number } | { amount: number },
  batched = false,
): Promise<Measured> {
  const events: EventCounts | null = batched ? { stored: 0, duplicate: 0, problems: {} } : null
  // Each 2xx answer of a batch: one result per event, in the request's order.
  const onResponse = (status: number, body: string) => {
    if (!events || status < 200 || status >= 300) return
    for (const r of (JSON.parse(body) as { results: Array<{ ok: boolean; duplicate?: boolean; status?: number }> }).results) {
      if (!r.ok) events.problems[String(r.status)] = (events.problems[String(r.status)] ?? 0) + 1
      else if (r.duplicate) events.duplicate++
      else events.stored++
    }
  }
  // Without a callback autocannon returns its tracker, an event emitter that is also the result's promise.
  const run = autocannon({
    url: url.href,
    method: 'POST',
    headers,
    // autocannon rebuilds a request that has a setupRequest before each send.
    requests: [
      {
        method: 'POST',
        setupRequest: (req) => {
          const n = next()
          return { ...req, headers: { ...headers, 'x-api-key': n.key }, body: n.body }
        },
        ...(events ? { onResponse } : {}),
      },
    ],
    // autocannon refuses more connections than requests.
    connections: 'amount' in length ? Math.min(connections, length.amount) : connections,
    pipelining: 1,
    ...('amount' in length ? { amount: length.amount } : { duration: length.seconds }),
    timeout: REQUEST_TIMEOUT_S,
  }) as Promise<autocannon.Result> & autocannon.Instance
  // autocannon ends a run on its next one-second tick, so its own duration of a run bounded by
  // `amount` is rounded up to whole seconds: such a run lasts until its last answer.
  const started = performance.now()
  let answered = started
  run.on('response', () => (answered = performance.now()))
  const r = await run
  const durationS = 'amount' in length ? (answered - started) / 1000 : r.duration
  return {
    ok: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    sent: r.requests.sent,
    durationS,
    // Not autocannon's average of per-second counts, which a run shorter than a second has none of.
    requestsPerSec: durationS > 0 ? r['2xx'] / durationS : 0,
    latencyMs: { mean: r.latency.average, p50: r.latency.p50, p97_5: r.latency.p97_5, p99: r.latency.p99, max: r.latency.max },
    statusCodes: Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, s]) => [code, s.count ?? 0])),
    lateMs: null,
    events,
  }
}

/** A fixed offered rate (bench/fixed-rate.ts); latencies in fractions of a ms, autocannon's in whole ms. */
async function atRate(url: URL, headers: Record<string, string>, body: () => string, connections: number, seconds: number, rate: number): Promise<Measured> {
  const r = await fixedRate({ url, headers, body, rate, seconds, connections, timeoutMs: REQUEST_TIMEOUT_S * 1000 })
  const l = r.latenciesMs
  // Nearest rank.
  const percentile = (p: number) => (l.length === 0 ? 0 : l[Math.min(l.length - 1, Math.max(0, Math.ceil((p / 100) * l.length) - 1))]!)
  return {
    ok: r.ok,
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    sent: r.sent,
    durationS: r.durationS,
    requestsPerSec: r.durationS > 0 ? r.ok / r.durationS : 0,
    latencyMs: {
      mean: l.length === 0 ? 0 : l.reduce((sum, v) => sum + v, 0) / l.length,
      p50: percentile(50),
      p97_5: percentile(97.5),
      p99: percentile(99),
      max: percentile(100),
    },
    statusCodes: r.statusCodes,
    lateMs: r.lateMs,
    events: null,
  }
}

function boundedNumber(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  const n = raw === undefined ? fallback : Number(raw)
  if (!Number.isFinite(n) || n < min || n > max) throw new Error(`--${name} must be a number from ${min} to ${max} (got ${raw})`)
  return n
}

/** The next request: its body, and the key it is sent with. */
interface Next {
  key: string
  body: string
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      url: { type: 'string' },
      connections: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      agents: { type: 'string' },
      'agent-prefix': { type: 'string' },
      rate: { type: 'string' },
      'once-per-agent': { type: 'boolean' },
      'usage-objects': { type: 'boolean' },
      holds: { type: 'boolean' },
      batch: { type: 'string' },
    },
    strict: true,
  })
  if (!values.url) throw new Error('--url is required')
  const base = new URL(values.url)
  if (base.hostname !== '127.0.0.1') throw new Error(`refusing to load anything but 127.0.0.1 (got ${base.hostname})`)
  const connections = Math.round(boundedNumber('connections', values.connections, 50, 1, MAX_CONNECTIONS))
  const duration = boundedNumber('duration', values.duration, 10, 1, MAX_SECONDS)
  const warmup = boundedNumber('warmup', values.warmup, 2, 0, MAX_SECONDS)
  const agents = Math.round(boundedNumber('agents', values.agents, DEFAULT_AGENTS, 1, MAX_AGENTS))
  const prefix = values['agent-prefix'] ?? DEFAULT_AGENT_PREFIX
  const rate = values.rate === undefined ? null : Math.round(boundedNumber('rate', values.rate, 0, 1, MAX_RATE))
  const oncePerAgent = values['once-per-agent'] === true
  if (oncePerAgent && rate !== null) throw new Error('--once-per-agent is a saturation run: not with --rate')
  const holds = values.holds === true
  const batch = values.batch === undefined ? null : Math.round(boundedNumber('batch', values.batch, 1, 1, MAX_BATCH))
  if (batch !== null && (rate !== null || oncePerAgent || holds)) throw new Error('--batch is a timed saturation run of POST /events/batch: not with --rate, --once-per-agent or --holds')
  const keys = (process.env.BENCH_API_KEYS || process.env.BENCH_API_KEY || '').split(',').filter((k) => k !== '')
  if (keys.length === 0) throw new Error('BENCH_API_KEY (or BENCH_API_KEYS, comma-separated) is required: the x-api-key header')
  // fixed-rate.ts sends one set of headers; a batch's events are one request's, so one key's.
  if (keys.length > 1 && (rate !== null || batch !== null)) throw new Error('several API keys only at saturation, one event per request')

  const url = new URL(holds ? '/holds' : batch !== null ? '/events/batch' : '/events', base)
  const headers = { 'content-type': 'application/json', 'x-api-key': keys[0]! }
  const one = (agentId: string) => (holds ? holdBody(agentId) : benchBody(agentId, values['usage-objects'] === true))
  // One counter for all connections: event n is for agent n mod `agents`, sent with that agent's key.
  const requests = (agentPrefix: string): (() => Next) => {
    let n = 0
    if (batch === null) {
      return () => {
        const agent = n++ % agents
        return { key: keys[agent % keys.length]!, body: one(`${agentPrefix}${agent}`) }
      }
    }
    return () => {
      const events = Array.from({ length: batch }, () => one(`${agentPrefix}${n++ % agents}`))
      return { key: keys[0]!, body: `{"events":[${events.join(',')}]}` }
    }
  }
  const timed = (agentPrefix: string, seconds: number) => {
    const next = requests(agentPrefix)
    return rate === null ? saturation(url, headers, next, connections, { seconds }, batch !== null) : atRate(url, headers, () => next().body, connections, seconds, rate)
  }

  let warm: LoadSummary['warmup'] = null
  if (warmup > 0) {
    const w = await timed(`warmup-${prefix}`, warmup)
    warm = { ok: w.ok, non2xx: w.non2xx, errors: w.errors, timeouts: w.timeouts, sent: w.sent, durationS: w.durationS, events: w.events }
  }
  const startedAt = Date.now()
  const measured = oncePerAgent ? await saturation(url, headers, requests(prefix), connections, { amount: agents }) : await timed(prefix, duration)
  const endedAt = Date.now()
  const eventsPerSec = measured.events && measured.durationS > 0 ? (measured.events.stored + measured.events.duplicate) / measured.durationS : null
  const summary: LoadSummary = { url: base.origin, connections, agents, agentPrefix: prefix, rate, batch, eventsPerSec, keys: keys.length, ...measured, warmup: warm, startedAt, endedAt }
  process.stdout.write(`${JSON.stringify(summary)}\n`)
}

if (import.meta.main) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err)
    process.exitCode = 1
  })
}
