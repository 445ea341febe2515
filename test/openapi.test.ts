import { randomUUID } from 'node:crypto'
import { Validator } from '@seriousme/openapi-schema-validator'
import { Ajv2020 } from 'ajv/dist/2020.js'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildApp } from '../src/app.ts'
import { PROBLEMS } from '../src/errors.ts'
import { OPENAPI_DOCUMENT, ROUTES, errorsOf } from '../src/openapi.ts'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * GET /openapi.json is a valid OpenAPI 3.1 document (checked by a validator of
 * the specification's own schemas), it describes every route the app serves, every error
 * each route answers is in it, and what the routes really answer matches what it says.
 */
let h: Harness
let app: FastifyInstance
const served: Array<{ method: string; url: string }> = []
beforeAll(async () => {
  h = await startHarness({ env: { CONFIG_RATE_LIMIT: '100000' } })
  // The same services, in an app of its own that reports its routes as they are added.
  app = await buildApp({ ...h.services, onRoute: (r) => void [r.method].flat().forEach((method) => served.push({ method, url: r.url })) })
  await app.ready()
})
afterAll(async () => {
  await app?.close()
  await h?.close()
})

type Doc = typeof OPENAPI_DOCUMENT
type Operation = { responses: Record<string, { content: Record<string, { schema: object }> }>; security?: unknown[] }
const operationOf = (doc: Doc, method: string, path: string) => (doc.paths[path] as Record<string, Operation> | undefined)?.[method.toLowerCase()]

describe('the OpenAPI document', () => {
  it('is served at /openapi.json without a key, and is valid OpenAPI 3.1', async () => {
    const res = await app.inject({ method: 'GET', url: '/openapi.json' })
    expect(res.statusCode).toBe(200)
    const doc = res.json() as Doc
    expect(doc.openapi).toBe('3.1.0')
    const result = await new Validator().validate(doc as never)
    expect(result.errors ?? []).toEqual([])
    expect(result.valid).toBe(true)
  })

  it('describes every route the app serves, and nothing it does not', async () => {
    // Not the API: the dashboard's files, the document itself and its reference page.
    const own = (url: string) => url === '/' || url.startsWith('/assets/') || url === '/openapi.json' || url === '/reference' || url.startsWith('/reference/')
    const api = served
      .filter((r) => r.method !== 'HEAD' && !own(r.url))
      .map((r) => `${r.method} ${r.url.replace(/:(\w+)/g, '{$1}')}`)
      .sort()
    expect(api).toEqual(ROUTES.map((r) => `${r.method.toUpperCase()} ${r.path}`).sort())
  })

  it('lists every problem the service answers under some route, with its status', () => {
    const documented = new Set<string>()
    for (const route of ROUTES) {
      for (const [status, codes] of errorsOf(route)) {
        const op = operationOf(OPENAPI_DOCUMENT, route.method, route.path)!
        expect(op.responses[status], `${route.method} ${route.path} ${status}`).toBeDefined()
        for (const code of codes) documented.add(code)
      }
    }
    // not_found and method_not_allowed are for URLs that are no route.
    const routeless = new Set(['not_found', 'method_not_allowed'])
    expect(Object.keys(PROBLEMS).filter((c) => !routeless.has(c) && !documented.has(c))).toEqual([])
  })

  it('says what the routes really answer: every answer, success or problem, matches its documented schema', async () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true })
    ajv.addFormat('uuid', /^[0-9a-f-]{36}$/i)
    ajv.addFormat('date-time', (s: string) => !Number.isNaN(Date.parse(s)))
    const key = await h.key(unique('u'))
    const other = await h.key(unique('u'))
    const headers = (k: string | null) => (k ? { 'x-api-key': k } : {})
    const call = (method: string, url: string, body?: unknown, k: string | null = key) =>
      app.inject({ method: method as 'GET', url, headers: { ...headers(k), ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, ...(body === undefined ? {} : { payload: JSON.stringify(body) }) })
    const checked: string[] = []
    const conforms = async (method: string, path: string, res: LightMyRequestResponse) => {
      const op = operationOf(OPENAPI_DOCUMENT, method, path)
      const response = op?.responses[String(res.statusCode)]
      expect(response, `${method} ${path} answered ${res.statusCode}, which it does not document: ${res.body}`).toBeDefined()
      const content = Object.entries(response!.content) as Array<[string, { schema: object }]>
      // A file answer (GET /export, an OTLP answer): one of its documented media types, as bytes.
      const file = content.find(([type, { schema }]) => 'contentMediaType' in schema && String(res.headers['content-type']).startsWith(type))
      if (file) {
        checked.push(`${method} ${path} ${res.statusCode}`)
        return
      }
      const [[type, { schema }]] = content as [[string, { schema: object }]]
      expect(res.headers['content-type']).toContain(type)
      const validate = ajv.compile(schema)
      expect(validate(res.json()), `${method} ${path} ${res.statusCode}: ${ajv.errorsText(validate.errors)}\n${res.body}`).toBe(true)
      checked.push(`${method} ${path} ${res.statusCode}`)
    }

    const hold = await call('POST', '/holds', { agent_id: 'a', model: 'gpt-4o', input_tokens: 10, max_output_tokens: 10 })
    const holdId = hold.json().hold_id as string
    const othersHold = (await call('POST', '/holds', { agent_id: 'z', model: 'gpt-4o', input_tokens: 10, max_output_tokens: 10 })).json().hold_id as string
    await h.post('/config/fleet', { cost_threshold_usd: 100, alert_at: [0.5] }, key)
    const cases: Array<[string, string, string, unknown?, (string | null)?]> = [
      ['GET', '/healthz', '/healthz'],
      ['GET', '/readyz', '/readyz'],
      ['POST', '/events', '/events', llmCall('a', { event_id: randomUUID(), metadata: { run: 1 }, run_id: 'run-1' })],
      ['POST', '/events', '/events', llmCall('a', { hold_id: holdId })],
      ['POST', '/events', '/events', llmCall('a', { hold_id: othersHold })],
      ['POST', '/events', '/events', { agent_id: 'a', event_type: 'llm_call' }],
      ['POST', '/events', '/events', llmCall('a'), null],
      ['POST', '/events/batch', '/events/batch', { events: [llmCall('a'), { agent_id: 'a', event_type: 'llm_call' }, llmCall('a', { hold_id: othersHold })] }],
      ['POST', '/events/batch', '/events/batch', { events: [] }],
      ['POST', '/v1/traces', '/v1/traces', { resourceSpans: [] }],
      ['POST', '/v1/logs', '/v1/logs', { resourceLogs: [] }],
      ['POST', '/holds', '/holds', { agent_id: 'a', model: 'gpt-4o', input_tokens: 10, max_output_tokens: 10 }],
      ['POST', '/holds', '/holds', { agent_id: 'a', model: 'gpt-4o', input_tokens: 10, max_output_tokens: 1e9 }],
      ['POST', '/holds', '/holds', { agent_id: 'a', model: 'gpt-4o', ttl_seconds: 0 }],
      ['DELETE', '/holds/{hold_id}', `/holds/${hold.json().hold_id as string}`, undefined, other],
      ['DELETE', '/holds/{hold_id}', '/holds/not-a-uuid'],
      ['POST', '/config', '/config', { agent_id: 'a', cost_threshold_usd: 5, slack_webhook_url: 'https://hooks.slack.com/services/T/B/x' }],
      ['POST', '/config', '/config', { agent_id: 'a', cost_threshold_usd: -1 }],
      ['POST', '/config/pause', '/config/pause', { agent_id: 'b', is_paused: true }],
      ['POST', '/config/fleet', '/config/fleet', { cost_threshold_usd: 100 }],
      ['POST', '/config/fleet/pause', '/config/fleet/pause', { is_paused: false }],
      ['GET', '/agents', '/agents'],
      ['GET', '/agents', '/agents?limit=3'],
      ['GET', '/agents/events', '/agents/events?limit=5'],
      ['GET', '/agents/{agent_id}', '/agents/a'],
      ['GET', '/agents/{agent_id}', '/agents/nobody'],
      ['GET', '/agents/{agent_id}/hourly', '/agents/a/hourly?hours=3'],
      ['GET', '/agents/{agent_id}/runs', '/agents/a/runs?limit=5'],
      ['GET', '/agents/{agent_id}/runs', '/agents/a/runs?cursor=not-a-cursor'],
      ['GET', '/agents/{agent_id}/runs', '/agents/nobody/runs'],
      ['GET', '/runs/{run_id}', '/runs/run-1?limit=5'],
      ['GET', '/runs/{run_id}', '/runs/no-such-run'],
      ['GET', '/fleet', '/fleet'],
      ['GET', '/costs', '/costs?group_by=metadata.run&group_by=model'],
      ['GET', '/costs', '/costs?group_by=nope'],
      ['GET', '/costs/dimensions', '/costs/dimensions?limit=5'],
      ['GET', '/costs/dimensions', '/costs/dimensions?limit=0'],
      ['GET', '/audit', '/audit?limit=5'],
      ['GET', '/audit', '/audit?scope=nope'],
      ['GET', '/export', '/export'],
      ['GET', '/export', '/export?format=parquet'],
      ['GET', '/export', '/export?format=xml'],
    ]
    for (const [method, path, url, body, k] of cases) {
      if (url.startsWith('/agents') || url.startsWith('/runs') || url.startsWith('/audit') || url.startsWith('/costs') || url.startsWith('/export') || url === '/fleet') await h.flush()
      await conforms(method, path, await call(method, url, body, k === undefined ? key : k))
    }
    // Each route was checked, and with its errors as well as its success.
    expect(new Set(checked.map((c) => c.split(' ').slice(0, 2).join(' '))).size).toBe(ROUTES.length)
    for (const status of ['200', '400', '401', '404']) expect(checked.some((c) => c.endsWith(` ${status}`)), status).toBe(true)
  })

  it('has a browsable reference page, served without a key', async () => {
    const page = await app.inject({ method: 'GET', url: '/reference/' })
    expect(page.statusCode).toBe(200)
    expect(page.headers['content-type']).toContain('text/html')
    expect(page.headers['content-security-policy']).toBeDefined()
    expect((await app.inject({ method: 'GET', url: '/reference/json' })).json()).toEqual(OPENAPI_DOCUMENT)
  })
})
