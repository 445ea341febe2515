/**
 * The load generator, run in its own process by bench/run.ts (so it never shares an event
 * loop with the orchestrator or the server under test):
 *
 *   BENCH_API_KEY=… node bench/load.ts --url http://127.0.0.1:PORT [--connections 50] [--duration 10] [--warmup 2]
 *
 * Sends POST <url>/events with content-type application/json and x-api-key, cycling through
 * the same few llm_call bodies (no event_id) whatever the target, first for `warmup` seconds
 * (reported apart, not measured), then for `duration` seconds. Prints one JSON summary
 * (LoadSummary) on stdout.
 */
import { parseArgs } from 'node:util'
import autocannon from 'autocannon'

/** The agents the load is spread over; the same for every target. */
export const BENCH_AGENTS = 5

/** gpt-4o at 1000 input and 500 output tokens: 0.0075 USD, the ceiling's constant cost_usd. */
export function benchBody(i: number): string {
  return JSON.stringify({ agent_id: `bench-agent-${i}`, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500 })
}

export interface Counts {
  /** Responses with a 2xx status. */
  ok: number
  non2xx: number
  /** Connection errors, timeouts included (autocannon's count). */
  errors: number
  timeouts: number
  /** Requests written; those still unanswered when the run stopped were cut off. */
  sent: number
}

export interface LoadSummary extends Counts {
  url: string
  connections: number
  durationS: number
  requestsPerSec: number
  latencyMs: { mean: number; p50: number; p97_5: number; p99: number; max: number }
  statusCodes: Record<string, number>
  /** The warmup run before the measurement (null without one); its requests reach the server too. */
  warmup: (Counts & { durationS: number }) | null
}

const MAX_CONNECTIONS = 1000
const MAX_SECONDS = 600

function counts(r: autocannon.Result): Counts {
  return { ok: r['2xx'], non2xx: r.non2xx, errors: r.errors, timeouts: r.timeouts, sent: r.requests.sent }
}

function boundedNumber(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  const n = raw === undefined ? fallback : Number(raw)
  if (!Number.isFinite(n) || n < min || n > max) throw new Error(`--${name} must be a number from ${min} to ${max} (got ${raw})`)
  return n
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      url: { type: 'string' },
      connections: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
    },
    strict: true,
  })
  if (!values.url) throw new Error('--url is required')
  const base = new URL(values.url)
  if (base.hostname !== '127.0.0.1') throw new Error(`refusing to load anything but 127.0.0.1 (got ${base.hostname})`)
  const connections = Math.round(boundedNumber('connections', values.connections, 50, 1, MAX_CONNECTIONS))
  const duration = boundedNumber('duration', values.duration, 10, 1, MAX_SECONDS)
  const warmup = boundedNumber('warmup', values.warmup, 2, 0, MAX_SECONDS)
  const apiKey = process.env.BENCH_API_KEY
  if (!apiKey) throw new Error('BENCH_API_KEY is required (the x-api-key header)')

  const options = (seconds: number): autocannon.Options => ({
    url: new URL('/events', base).href,
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
    // Each connection cycles through these in order.
    requests: Array.from({ length: BENCH_AGENTS }, (_, i) => ({ method: 'POST' as const, body: benchBody(i) })),
    connections,
    pipelining: 1,
    duration: seconds,
    timeout: 10,
  })

  let warm: LoadSummary['warmup'] = null
  if (warmup > 0) {
    const w = await autocannon(options(warmup))
    warm = { ...counts(w), durationS: w.duration }
  }
  const r = await autocannon(options(duration))
  const statusCodes = Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, s]) => [code, s.count ?? 0]))
  const summary: LoadSummary = {
    url: base.origin,
    connections,
    durationS: r.duration,
    requestsPerSec: r.requests.average,
    latencyMs: { mean: r.latency.average, p50: r.latency.p50, p97_5: r.latency.p97_5, p99: r.latency.p99, max: r.latency.max },
    ...counts(r),
    statusCodes,
    warmup: warm,
  }
  process.stdout.write(`${JSON.stringify(summary)}\n`)
}

if (import.meta.main) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err)
    process.exitCode = 1
  })
}
