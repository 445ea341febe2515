/**
 * OTLP: spans per second through POST /v1/traces against events per second through
 * POST /events/batch, one embedded burnrate, the same calls in the same run.
 *
 *   node bench/otlp.ts [--seconds 10] [--batch 512] [--concurrency 4] [--agents 1000] [--rounds 2] [--cpu-prof DIR]
 *
 * Each request carries `batch` model calls of gpt-4o (1000 in, 500 out) of agents taken in
 * turn: as OTLP, an ExportTraceServiceRequest in binary protobuf (the exporters' default) of
 * `batch` GenAI chat spans, each of a fresh span id; as events, a POST /events/batch of
 * `batch` llm_calls, each with a fresh event_id. Phases alternate (events, spans, events,
 * spans …), `concurrency` requests in flight for `seconds` each; the ratio is each spans phase
 * against the mean of the events phases around it. Prints a table and a JSON line (the last
 * line). Not part of `npm run bench`.
 */
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { TRACES } from '../src/otlp/protocol.ts'
import { STORE_ENV, children, createKey, fmt, startBurnrate, stop, table } from './processes.ts'

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    batch: { type: 'string', default: '512' },
    concurrency: { type: 'string', default: '4' },
    agents: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '2' },
    // A directory for burnrate's V8 CPU profile (node --cpu-prof), read with bench/cpu-profile.ts.
    'cpu-prof': { type: 'string' },
  },
})
const seconds = Number(values.seconds)
const batch = Number(values.batch)
const concurrency = Number(values.concurrency)
const agents = Number(values.agents)
const rounds = Number(values.rounds)

let next = 0
const agentId = () => `otlp-agent-${next++ % agents}`

function eventsBody(): string {
  return JSON.stringify({
    events: Array.from({ length: batch }, () => ({ agent_id: agentId(), event_type: 'llm_call', event_id: randomUUID(), run_id: 'bench-run', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500 })),
  })
}

const str = (key: string, v: string) => ({ key, value: { stringValue: v } })
const int = (key: string, v: number) => ({ key, value: { intValue: v } })

function spansBody(): Uint8Array {
  const traceId = randomBytes(16)
  const spans = Array.from({ length: batch }, () => ({
    traceId,
    spanId: randomBytes(8),
    name: 'chat gpt-4o',
    kind: 3,
    startTimeUnixNano: 1,
    endTimeUnixNano: 2,
    attributes: [
      str('gen_ai.operation.name', 'chat'),
      str('gen_ai.provider.name', 'openai'),
      str('gen_ai.request.model', 'gpt-4o'),
      str('gen_ai.response.model', 'gpt-4o'),
      str('gen_ai.agent.id', agentId()),
      int('gen_ai.usage.input_tokens', 1000),
      int('gen_ai.usage.output_tokens', 500),
    ],
  }))
  return TRACES.request.encode(TRACES.request.fromObject({ resourceSpans: [{ resource: { attributes: [str('service.name', 'bench')] }, scopeSpans: [{ spans }] }] })).finish()
}

/** `concurrency` loops posting fresh bodies for `seconds`: calls per second, and requests that failed. */
async function phase(url: string, key: string, kind: 'events' | 'spans'): Promise<{ callsPerSec: number; failed: number }> {
  const until = performance.now() + seconds * 1000
  let calls = 0
  let failed = 0
  const started = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) {
        const res =
          kind === 'events'
            ? await fetch(`${url}/events/batch`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: eventsBody() })
            : await fetch(`${url}/v1/traces`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/x-protobuf' }, body: spansBody() })
        await res.arrayBuffer()
        if (res.status === 200) calls += batch
        else failed++
      }
    }),
  )
  return { callsPerSec: calls / ((performance.now() - started) / 1000), failed }
}

const dataDir = await mkdtemp(join(tmpdir(), 'burnrate-bench-otlp-'))
const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'info' }
for (const name of STORE_ENV) delete env[name]
const burnrate = await startBurnrate(env, join(dataDir, 'burnrate.log'), values['cpu-prof'] ?? null)
try {
  const key = await createKey(env, 'otlp')
  // Warm: every agent known, the JIT warm, both routes.
  await phase(burnrate.url, key, 'events')
  await phase(burnrate.url, key, 'spans')
  const events: number[] = []
  const spans: number[] = []
  let failed = 0
  for (let r = 0; r < rounds; r++) {
    const e = await phase(burnrate.url, key, 'events')
    const s = await phase(burnrate.url, key, 'spans')
    events.push(e.callsPerSec)
    spans.push(s.callsPerSec)
    failed += e.failed + s.failed
  }
  events.push((await phase(burnrate.url, key, 'events')).callsPerSec)
  const rows = [['round', 'events/s (POST /events/batch, mean around)', 'spans/s (POST /v1/traces)', 'ratio (target ≥ 0.5)']]
  const ratios = spans.map((s, r) => s / ((events[r]! + events[r + 1]!) / 2))
  spans.forEach((s, r) => rows.push([String(r + 1), fmt((events[r]! + events[r + 1]!) / 2), fmt(s), ratios[r]!.toFixed(2)]))
  console.log(`OTLP: ${batch} calls a request, ${concurrency} in flight, ${seconds} s phases, ${agents} agents; ${failed} requests failed`)
  console.log(table(rows))
  console.log(JSON.stringify({ batch, concurrency, seconds, agents, events, spans, ratios, failed }))
} finally {
  await stop(burnrate.child, 'burnrate')
  for (const child of children) child.kill('SIGKILL')
  await rm(dataDir, { recursive: true, force: true })
}
