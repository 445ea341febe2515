import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRequire } from 'node:module'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { registerInstrumentations } from '@opentelemetry/instrumentation'
import { OpenAIInstrumentation } from '@opentelemetry/instrumentation-openai'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import type OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * The spans a real instrumentation emits: the OpenTelemetry project's OpenAI instrumentation
 * around the `openai` SDK, which calls a local server answering as the Chat Completions API
 * does, its spans exported to POST /v1/traces by the SDK's protobuf exporter. burnrate meters
 * the call from the spans alone, as the instrumentation wrote them. A file of its own: the
 * instrumentation patches the `openai` module of this process.
 */
let h: Harness
let base: string
let api: Server
let apiUrl: string

// The Chat Completions API's answer: the model that served the call and its usage.
const COMPLETION = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1764000000,
  model: 'gpt-4o-2024-08-06',
  choices: [{ index: 0, message: { role: 'assistant', content: 'four', refusal: null }, finish_reason: 'stop', logprobs: null }],
  usage: { prompt_tokens: 1000, completion_tokens: 500, total_tokens: 1500, prompt_tokens_details: { cached_tokens: 0 } },
}

beforeAll(async () => {
  h = await startHarness()
  base = await h.listen()
  api = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(COMPLETION))
    })
  })
  await new Promise<void>((resolve) => api.listen(0, '127.0.0.1', resolve))
  apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}/v1`
})
afterAll(async () => {
  await h?.close()
  await new Promise((resolve) => api?.close(resolve))
})

describe('spans of @opentelemetry/instrumentation-openai', () => {
  it('meter an openai SDK chat completion, priced at the model that served it, to the nano-dollar', async () => {
    const key = await h.key(unique('u'))
    const agent = unique('instrumented')
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ 'service.name': 'svc', 'burnrate.agent_id': agent }),
      spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${base}/v1/traces`, headers: { 'x-api-key': key } }))],
    })
    const instrumentation = new OpenAIInstrumentation()
    const unregister = registerInstrumentations({ instrumentations: [instrumentation], tracerProvider: provider })
    // Loaded after the instrumentation is registered, through require: the instrumentation
    // patches the module as Node loads it.
    const { OpenAI: Client } = createRequire(import.meta.url)('openai') as { OpenAI: typeof OpenAI }
    const client = new Client({ apiKey: 'sk-test', baseURL: apiUrl })
    const answer = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: '2 + 2?' }] })
    expect(answer.usage?.prompt_tokens).toBe(1000)
    await provider.forceFlush()

    // gpt-4o-2024-08-06 at 2.5 / 10 USD per 1M tokens: 1000 in + 500 out.
    const shown = (await h.get(`/agents/${agent}`, key)).json()
    expect(shown).toMatchObject({ llm_calls: 1, total_cost_usd: 0.0075 })
    expect(shown.events[0]).toMatchObject({ event_type: 'llm_call', model: 'gpt-4o-2024-08-06', input_tokens: 1000, output_tokens: 500 })
    expect(shown.events[0].metadata).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai' })
    unregister()
    instrumentation.disable()
    await provider.shutdown()
  })
})
