import { gzipSync } from 'node:zlib'
import { SpanKind, type Attributes } from '@opentelemetry/api'
import { OTLPLogExporter as ProtoLogExporter } from '@opentelemetry/exporter-logs-otlp-proto'
import { OTLPLogExporter as JsonLogExporter } from '@opentelemetry/exporter-logs-otlp-http'
import { LoggerProvider, SimpleLogRecordProcessor } from '@opentelemetry/sdk-logs'
import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { CompressionAlgorithm } from '@opentelemetry/otlp-exporter-base'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { BasicTracerProvider, SimpleSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TRACES } from '../src/otlp/protocol.ts'
import { eventIdOf } from '../src/otlp/spans.ts'
import { startHarness, unique, type Harness } from './helpers/harness.ts'
import { startReceiver } from './helpers/receiver.ts'
import { startProxy } from './helpers/proxy.ts'

/**
 * POST /v1/traces with the OpenTelemetry SDK and its own exporters (http/protobuf and
 * http/json, gzip or not), as an agent's process sends its spans: GenAI spans become events
 * priced and counted as POST /events counts them, the rest is ignored, a span sent again
 * counts once, and a bad span is refused alone.
 */
let h: Harness
let base: string

beforeAll(async () => {
  h = await startHarness()
  base = await h.listen()
})
afterAll(async () => {
  await h?.close()
})

/** gpt-4o at 2.5 / 10 USD per 1M tokens (the price library's): 1000 in + 500 out. */
const CHAT_NANO = 7_500_000

type Exporter = 'proto' | 'json'

/** A tracer provider of an agent's process: its resource, and one of the SDK's exporters pointed at burnrate. */
function tracing(key: string, o: { exporter: Exporter; resource?: Attributes; gzip?: boolean; bearer?: boolean }) {
  const headers: Record<string, string> = o.bearer ? { authorization: `Bearer ${key}` } : { 'x-api-key': key }
  const options = { url: `${base}/v1/traces`, headers, compression: o.gzip ? CompressionAlgorithm.GZIP : CompressionAlgorithm.NONE }
  const exporter: SpanExporter = o.exporter === 'proto' ? new ProtoExporter(options) : new JsonExporter(options)
  const provider = new BasicTracerProvider({ resource: resourceFromAttributes({ 'service.name': 'svc', ...o.resource }), spanProcessors: [new SimpleSpanProcessor(exporter)] })
  const tracer = provider.getTracer('test')
  return {
    provider,
    /** One span with these attributes, ended and exported. */
    async span(name: string, attributes: Attributes, kind = SpanKind.CLIENT) {
      const span = tracer.startSpan(name, { kind, attributes })
      span.end()
      await provider.forceFlush()
      return span.spanContext()
    },
  }
}

const chat = (agent: string, extra: Attributes = {}): Attributes => ({
  'gen_ai.operation.name': 'chat',
  'gen_ai.provider.name': 'openai',
  'gen_ai.request.model': 'gpt-4o',
  'gen_ai.agent.name': agent,
  'gen_ai.usage.input_tokens': 1000,
  'gen_ai.usage.output_tokens': 500,
  ...extra,
})

async function agentOf(key: string, agent: string) {
  return (await h.get(`/agents/${encodeURIComponent(agent)}`, key)).json()
}

describe('POST /v1/traces', () => {
  for (const exporter of ['proto', 'json'] as const) {
    for (const gzip of [false, true]) {
      it(`meters a GenAI chat span from the SDK's ${exporter} exporter${gzip ? ', gzipped' : ''} as an llm_call, to the nano-dollar`, async () => {
        const key = await h.key(unique('u'))
        const agent = unique('otel')
        const t = tracing(key, { exporter, gzip })
        const ctx = await t.span('chat gpt-4o', chat(agent))
        const shown = await agentOf(key, agent)
        expect(shown).toMatchObject({ llm_calls: 1, total_cost_usd: CHAT_NANO / 1e9 })
        const event = shown.events[0]
        expect(event).toMatchObject({
          event_id: eventIdOf(ctx.traceId, ctx.spanId, 'llm_call'),
          event_type: 'llm_call',
          model: 'gpt-4o',
          input_tokens: 1000,
          output_tokens: 500,
          run_id: ctx.traceId,
          cost_usd: CHAT_NANO / 1e9,
        })
        expect(event.metadata).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'service.name': 'svc', 'otel.span_id': ctx.spanId })
        await t.provider.shutdown()
      })
    }
  }

  it('reads the older attribute names, cache tokens, tool and agent spans, and ignores (counts) the rest', async () => {
    const key = await h.key(unique('u'))
    const agent = unique('old')
    const t = tracing(key, { exporter: 'proto', bearer: true })
    // gen_ai.system and prompt/completion tokens, as older instrumentations still send them; no operation name.
    await t.span('openai.chat', { 'gen_ai.system': 'openai', 'gen_ai.request.model': 'gpt-4o', 'gen_ai.agent.id': agent, 'gen_ai.usage.prompt_tokens': 1000, 'gen_ai.usage.completion_tokens': 500 })
    await t.span('chat gpt-4o', chat(agent, { 'gen_ai.agent.name': 'ignored-name', 'gen_ai.agent.id': agent, 'gen_ai.usage.cache_read.input_tokens': 400 }))
    await t.span('execute_tool search', { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'search', 'gen_ai.agent.id': agent })
    await t.span('invoke_agent planner', { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.id': agent }, SpanKind.INTERNAL)
    await t.span('GET /health', { 'http.request.method': 'GET' }, SpanKind.SERVER)
    const shown = await agentOf(key, agent)
    // 400 of the second call's input tokens read from the cache at 1.25 USD per 1M instead of 2.5.
    expect(shown.llm_calls).toBe(2)
    expect(shown.total_cost_usd).toBeCloseTo((2 * CHAT_NANO - 400 * 1250) / 1e9, 12)
    expect(shown.events.map((e: { event_type: string }) => e.event_type).sort()).toEqual(['agent_end', 'agent_start', 'llm_call', 'llm_call', 'tool_call'])
    expect(shown.events.find((e: { event_type: string }) => e.event_type === 'tool_call')).toMatchObject({ tool_name: 'search' })
    await t.provider.shutdown()
  })

  it("counts an export once when the exporter sends it again because its first answer was lost", async () => {
    const key = await h.key(unique('u'))
    const agent = unique('cut')
    const proxy = await startProxy(base)
    try {
      // Forwarded and stored, then the connection cut before the answer: the exporter retries.
      proxy.on('POST /v1/traces', { kind: 'cut' }, 1)
      const exporter = new ProtoExporter({ url: `${proxy.url}/v1/traces`, headers: { 'x-api-key': key } })
      const provider = new BasicTracerProvider({ resource: resourceFromAttributes({ 'service.name': 'svc' }), spanProcessors: [new SimpleSpanProcessor(exporter)] })
      provider.getTracer('t').startSpan('chat gpt-4o', { attributes: chat(agent) }).end()
      await provider.forceFlush()
      expect(proxy.count('POST /v1/traces')).toBe(2)
      expect(await agentOf(key, agent)).toMatchObject({ llm_calls: 1, total_cost_usd: CHAT_NANO / 1e9 })
      await provider.shutdown()
    } finally {
      await proxy.close()
    }
  })

  it('counts a span sent again once: its event id comes from its trace and span ids', async () => {
    const key = await h.key(unique('u'))
    const agent = unique('retry')
    const body = TRACES.request.encode(
      TRACES.request.fromObject({
        resourceSpans: [
          {
            resource: { attributes: [{ key: 'service.name', value: { stringValue: 'svc' } }] },
            scopeSpans: [{ spans: [{ traceId: Buffer.alloc(16, 7), spanId: Buffer.alloc(8, 9), name: 'chat', attributes: Object.entries(chat(agent)).map(([k, v]) => ({ key: k, value: typeof v === 'number' ? { intValue: v } : { stringValue: v } })) }] }],
          },
        ],
      }),
    ).finish()
    for (let i = 0; i < 3; i++) {
      const r = await h.app.inject({ method: 'POST', url: '/v1/traces', headers: { 'x-api-key': key, 'content-type': 'application/x-protobuf', 'content-encoding': 'gzip' }, payload: gzipSync(body) })
      expect(r.statusCode).toBe(200)
      expect(TRACES.response.toObject(TRACES.response.decode(r.rawPayload))).toEqual({})
    }
    expect(await agentOf(key, agent)).toMatchObject({ llm_calls: 1, total_cost_usd: CHAT_NANO / 1e9 })
  })

  it('stores the usable spans of a mixed batch and reports the others in partial_success; a body that is no export is a 400 Status', async () => {
    const key = await h.key(unique('u'))
    const agent = unique('mixed')
    const span = (id: number, attributes: Array<{ key: string; value: object }>) => ({ traceId: '0'.repeat(31) + '1', spanId: id.toString(16).padStart(16, '0'), name: 's', attributes })
    const good = Object.entries(chat(agent)).map(([k, v]) => ({ key: k, value: typeof v === 'number' ? { intValue: String(v) } : { stringValue: v } }))
    const body = {
      resourceSpans: [
        {
          resource: { attributes: [] },
          scopeSpans: [
            {
              spans: [
                span(1, good),
                // Tokens as text: refused alone.
                span(2, good.map((a) => (a.key === 'gen_ai.usage.input_tokens' ? { key: a.key, value: { stringValue: 'many' } } : a))),
                // A model call without a model.
                span(3, good.filter((a) => a.key !== 'gen_ai.request.model')),
                // No ids: cannot be counted once.
                { name: 'no ids', attributes: good },
                // An agent named with a lone UTF-16 surrogate: refused as POST /events refuses it.
                span(4, good.map((a) => (a.key === 'gen_ai.agent.name' ? { key: a.key, value: { stringValue: 'bad\ud800' } } : a))),
              ],
            },
          ],
        },
      ],
    }
    const r = await h.app.inject({ method: 'POST', url: '/v1/traces', headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload: JSON.stringify(body) })
    expect(r.statusCode).toBe(200)
    expect(r.json()).toEqual({ partialSuccess: { rejectedSpans: '4', errorMessage: expect.stringContaining('gen_ai.usage.input_tokens must be a whole number of tokens') } })
    expect(await agentOf(key, agent)).toMatchObject({ llm_calls: 1 })

    for (const [type, payload] of [
      ['application/x-protobuf', Buffer.from([0xff, 0xff, 0xff])],
      ['application/json', '{"resourceSpans": 7}'],
      ['application/json', 'not json'],
      ['application/json', Buffer.from([0x7b, 0xff, 0x7d])],
    ] as const) {
      const bad = await h.app.inject({ method: 'POST', url: '/v1/traces', headers: { 'x-api-key': key, 'content-type': type }, payload })
      expect(bad.statusCode).toBe(400)
      if (type === 'application/json') expect(bad.json()).toMatchObject({ code: 3, message: expect.any(String) })
    }
    const gz = await h.app.inject({ method: 'POST', url: '/v1/traces', headers: { 'x-api-key': key, 'content-type': 'application/json', 'content-encoding': 'gzip' }, payload: '{}' })
    expect(gz.statusCode).toBe(400)
  })

  it('counts spans against the budgets in the same step as POST /events: the agent pauses once, with one message', async () => {
    const receiver = await startReceiver()
    try {
      const key = await h.key(unique('u'))
      const agent = unique('spender')
      await h.post('/config', { agent_id: agent, cost_threshold_usd: 0.01, alert_at: [], slack_webhook_url: receiver.url }, key)
      const t = tracing(key, { exporter: 'proto' })
      for (let i = 0; i < 3; i++) await t.span('chat gpt-4o', chat(agent))
      expect(await agentOf(key, agent)).toMatchObject({ llm_calls: 3, is_paused: true, paused_reason: 'budget' })
      await h.services.webhooks.drain()
      expect(receiver.messages.filter((m) => m.text.includes(agent))).toHaveLength(1)
      await t.provider.shutdown()
    } finally {
      await receiver.close()
    }
  })

  it("keeps users apart, and refuses an export without a valid key", async () => {
    const [alice, bob] = [await h.key(unique('alice')), await h.key(unique('bob'))]
    const agent = unique('shared-name')
    const t = tracing(alice, { exporter: 'json' })
    await t.span('chat', chat(agent))
    expect(await agentOf(alice, agent)).toMatchObject({ llm_calls: 1 })
    expect((await h.get(`/agents/${agent}`, bob)).statusCode).toBe(404)
    const r = await h.app.inject({ method: 'POST', url: '/v1/traces', headers: { authorization: 'Bearer br_nope', 'content-type': 'application/json' }, payload: '{}' })
    expect(r.statusCode).toBe(401)
    await t.provider.shutdown()
  })
})

describe('POST /v1/logs', () => {
  /** A logger provider of an agent's process, with one of the SDK's log exporters pointed at burnrate. */
  function logging(key: string, exporter: Exporter, resource: Attributes) {
    const options = { url: `${base}/v1/logs`, headers: { authorization: `Bearer ${key}` } }
    const provider = new LoggerProvider({
      resource: resourceFromAttributes(resource),
      processors: [new SimpleLogRecordProcessor({ exporter: exporter === 'proto' ? new ProtoLogExporter(options) : new JsonLogExporter(options) })],
    })
    return { provider, logger: provider.getLogger('test') }
  }

  for (const exporter of ['proto', 'json'] as const) {
    it(`meters Claude Code's api_request events (${exporter}) from their token counts, cache tokens as parts of the input, its own cost kept beside`, async () => {
      const key = await h.key(unique('u'))
      const { provider, logger } = logging(key, exporter, { 'service.name': 'claude-code', 'burnrate.agent_id': 'dev-laptop' })
      // As Claude Code emits it: the event's name, counts as text, its own estimate of the cost.
      const record = {
        eventName: 'claude_code.api_request',
        body: 'claude_code.api_request',
        attributes: {
          'event.name': 'api_request',
          'session.id': 'sess-1',
          model: 'claude-sonnet-4-5',
          input_tokens: '120',
          output_tokens: '300',
          cache_read_tokens: '1000',
          cache_creation_tokens: '0',
          cost_usd: '0.00516',
          duration_ms: '2300',
        },
      }
      logger.emit(record)
      // Another record, not a model call: ignored.
      logger.emit({ eventName: 'claude_code.user_prompt', body: 'claude_code.user_prompt', attributes: { 'event.name': 'user_prompt', 'session.id': 'sess-1', prompt_length: '42' } })
      await provider.forceFlush()
      // What POST /events charges for the same call, as token fields.
      const same = await h.post('/events', { agent_id: unique('ref'), event_type: 'llm_call', model: 'claude-sonnet-4-5', input_tokens: 1120, output_tokens: 300, cache_read_tokens: 1000, cache_write_tokens: 0 }, key)
      const shown = await agentOf(key, 'dev-laptop')
      expect(shown).toMatchObject({ llm_calls: 1, total_cost_usd: same.json().cost_usd })
      expect(shown.events[0]).toMatchObject({ model: 'claude-sonnet-4-5', input_tokens: 1120, output_tokens: 300, cache_read_tokens: 1000, run_id: 'sess-1' })
      expect(shown.events[0].metadata).toMatchObject({ 'claude_code.cost_usd': 0.00516, 'service.name': 'claude-code' })
      await provider.shutdown()
    })
  }

  it('counts a log record sent again once, and refuses one whose counts are not numbers, alone', async () => {
    const key = await h.key(unique('u'))
    const rec = (tokens: string) => ({
      timeUnixNano: '1764000000000000000',
      eventName: 'claude_code.api_request',
      attributes: [
        { key: 'model', value: { stringValue: 'claude-sonnet-4-5' } },
        { key: 'input_tokens', value: { stringValue: tokens } },
        { key: 'output_tokens', value: { stringValue: '10' } },
      ],
    })
    const body = JSON.stringify({
      resourceLogs: [{ resource: { attributes: [{ key: 'gen_ai.agent.id', value: { stringValue: 'cc' } }] }, scopeLogs: [{ logRecords: [rec('100'), rec('lots')] }] }],
    })
    for (let i = 0; i < 2; i++) {
      const r = await h.app.inject({ method: 'POST', url: '/v1/logs', headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload: body })
      expect(r.statusCode).toBe(200)
      expect(r.json()).toEqual({ partialSuccess: { rejectedLogRecords: '1', errorMessage: expect.stringContaining('input_tokens must be a whole number of tokens') } })
    }
    expect(await agentOf(key, 'cc')).toMatchObject({ llm_calls: 1 })
  })
})
