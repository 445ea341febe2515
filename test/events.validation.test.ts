import { randomUUID } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ProblemCode } from '../src/errors.ts'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h.close())

/** What a user can see of their stored data: every event and the agent list with totals. */
async function snapshot(key: string) {
  const events = await h.get('/agents/events?limit=1000', key)
  const agents = await h.get('/agents', key)
  expect(events.statusCode).toBe(200)
  expect(agents.statusCode).toBe(200)
  return { events: events.json().events, agents: agents.json().agents }
}

/** A user with one stored llm_call for agent 'a', so "unchanged" is compared against real data. */
async function seededUser(opts: { rateLimit?: number } = {}) {
  const key = await h.key(unique('u'), opts)
  const res = await h.post('/events', llmCall('a'), key)
  expect(res.statusCode).toBe(200)
  const before = await snapshot(key)
  expect(before.events).toHaveLength(1)
  expect(before.agents).toEqual([expect.objectContaining({ agent_id: 'a', llm_calls: 1, total_cost_usd: LLM_CALL_USD })])
  return { key, before }
}

/** Asserts an RFC 9457 problem with `code` (and `status` from the catalogue); returns the body. */
function expectProblem(res: LightMyRequestResponse, status: number, code: ProblemCode) {
  expect(res.statusCode, res.body).toBe(status)
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
  const body = res.json()
  expect(body).toMatchObject({ status, code, type: `urn:burnrate:problem:${code}` })
  expect(typeof body.title).toBe('string')
  expect(typeof body.detail).toBe('string')
  expect(body.detail.length).toBeGreaterThan(0)
  return body
}

function fieldsOf(body: { errors?: { field: string; message: string }[] }): string[] {
  expect(Array.isArray(body.errors)).toBe(true)
  for (const e of body.errors!) expect(typeof e.message).toBe('string')
  return body.errors!.map((e) => e.field)
}

/** The next valid event still prices on top of the untouched total: the hot state did not move either. */
async function expectHotTotalUnchanged(key: string) {
  const res = await h.post('/events', llmCall('a'), key)
  expect(res.statusCode).toBe(200)
  expect(res.json().total_cost_24h).toBe(2 * LLM_CALL_USD)
}

const base = { agent_id: 'a', event_type: 'agent_start' }

describe('POST /events rejects an invalid body with a 400 naming the field, and stores nothing', () => {
  const cases: { name: string; body: unknown; field: string }[] = [
    { name: 'missing agent_id', body: { event_type: 'agent_start' }, field: 'agent_id' },
    { name: "agent_id ''", body: { ...base, agent_id: '' }, field: 'agent_id' },
    { name: 'agent_id of 129 characters', body: { ...base, agent_id: 'x'.repeat(129) }, field: 'agent_id' },
    { name: 'agent_id with BEL (\\u0007)', body: { ...base, agent_id: 'a\u0007b' }, field: 'agent_id' },
    { name: 'agent_id with a newline', body: { ...base, agent_id: 'a\nb' }, field: 'agent_id' },
    { name: 'agent_id a number', body: { ...base, agent_id: 42 }, field: 'agent_id' },
    { name: 'unknown event_type', body: { ...base, event_type: 'llm_cal' }, field: 'event_type' },
    { name: 'missing event_type', body: { agent_id: 'a' }, field: 'event_type' },
    { name: 'llm_call without model', body: { agent_id: 'a', event_type: 'llm_call', input_tokens: 10 }, field: 'model' },
    { name: 'tool_call without tool_name', body: { agent_id: 'a', event_type: 'tool_call' }, field: 'tool_name' },
    { name: 'tool_call with tool_name null', body: { agent_id: 'a', event_type: 'tool_call', tool_name: null }, field: 'tool_name' },
    { name: 'negative input_tokens', body: llmCall('a', { input_tokens: -1 }), field: 'input_tokens' },
    { name: 'fractional output_tokens', body: llmCall('a', { output_tokens: 1.5 }), field: 'output_tokens' },
    { name: 'input_tokens above 1e9', body: llmCall('a', { input_tokens: 1e9 + 1 }), field: 'input_tokens' },
    { name: 'input_tokens a string ("5")', body: llmCall('a', { input_tokens: '5' }), field: 'input_tokens' },
    { name: 'model of 257 characters', body: llmCall('a', { model: 'm'.repeat(257) }), field: 'model' },
    { name: 'tool_name of 257 characters', body: { agent_id: 'a', event_type: 'tool_call', tool_name: 't'.repeat(257) }, field: 'tool_name' },
    { name: 'metadata an array', body: { ...base, metadata: [1, 2] }, field: 'metadata' },
    { name: 'metadata a string', body: { ...base, metadata: 'x' }, field: 'metadata' },
    { name: 'metadata over 16 KiB serialized', body: { ...base, metadata: { blob: 'x'.repeat(16 * 1024) } }, field: 'metadata' },
    { name: 'an unknown top-level field', body: { ...base, cost_usd: 0 }, field: 'cost_usd' },
    { name: 'event_id not a UUID', body: { ...base, event_id: 'not-a-uuid' }, field: 'event_id' },
    { name: "run_id ''", body: { ...base, run_id: '' }, field: 'run_id' },
    { name: 'run_id of 129 characters', body: { ...base, run_id: 'r'.repeat(129) }, field: 'run_id' },
    { name: 'run_id with a tab', body: { ...base, run_id: 'r\tun' }, field: 'run_id' },
    { name: 'run_id a number', body: { ...base, run_id: 7 }, field: 'run_id' },
    {
      name: 'cache_read_tokens + cache_write_tokens > input_tokens',
      body: llmCall('a', { input_tokens: 100, cache_read_tokens: 60, cache_write_tokens: 41 }),
      field: 'cache_read_tokens',
    },
    { name: 'a JSON array', body: [base], field: '(body)' },
    { name: 'null', body: null, field: '(body)' },
    { name: 'a JSON string', body: 'agent_start', field: '(body)' },
  ]

  it.each(cases)('$name → 400 invalid_body naming $field', async ({ body, field }) => {
    const { key, before } = await seededUser()
    const problem = expectProblem(await h.post('/events', body, key), 400, 'invalid_body')
    expect(fieldsOf(problem)).toContain(field)
    expect(await snapshot(key)).toEqual(before)
    await expectHotTotalUnchanged(key)
  })

  // zod 4 leaves issue.input unset unless reportInput is on, so `issue.input === undefined`
  // holds for every invalid_type issue; src/routes/parse.ts looks at the input itself, so a
  // present field of the wrong type is not reported as "is required" (a misleading detail).
  it('says a present field of the wrong type has the wrong type, not that it is required', async () => {
    const key = await h.key(unique('u'))
    const problem = expectProblem(await h.post('/events', llmCall('a', { input_tokens: '5' }), key), 400, 'invalid_body')
    expect(problem.errors).toEqual([{ field: 'input_tokens', message: expect.not.stringMatching(/required/) }])
  })

  it('says a missing required field is required', async () => {
    const key = await h.key(unique('u'))
    const problem = expectProblem(await h.post('/events', { event_type: 'agent_start' }, key), 400, 'invalid_body')
    expect(problem.errors).toEqual([{ field: 'agent_id', message: 'is required' }])
  })

  it('names every offending field of one body, not only the first', async () => {
    const { key, before } = await seededUser()
    const problem = expectProblem(
      await h.post('/events', { agent_id: '', event_type: 'nope', input_tokens: -5, extra: 1 }, key),
      400,
      'invalid_body',
    )
    expect(fieldsOf(problem)).toEqual(expect.arrayContaining(['agent_id', 'event_type', 'input_tokens', 'extra']))
    expect(await snapshot(key)).toEqual(before)
  })
})

describe('POST /events accepts the values at the edge of each rule', () => {
  it.each([
    { name: 'agent_id of 128 characters', body: { ...base, agent_id: 'x'.repeat(128) }, agent: 'x'.repeat(128) },
    { name: 'agent_id of 1 character', body: { ...base, agent_id: 'z' }, agent: 'z' },
    { name: 'agent_id with spaces and unicode', body: { ...base, agent_id: 'agent é 🚀' }, agent: 'agent é 🚀' },
    { name: 'model of 256 characters', body: llmCall('a', { model: 'm'.repeat(256) }), agent: 'a' },
    { name: 'tokens of exactly 1e9', body: llmCall('a', { input_tokens: 1e9, output_tokens: 1e9 }), agent: 'a' },
    { name: 'tokens of 0', body: llmCall('a', { input_tokens: 0, output_tokens: 0 }), agent: 'a' },
    { name: 'cache tokens equal to input_tokens', body: llmCall('a', { input_tokens: 100, cache_read_tokens: 60, cache_write_tokens: 40 }), agent: 'a' },
    { name: 'metadata of exactly 16 KiB serialized', body: { ...base, metadata: { b: 'x'.repeat(16 * 1024 - '{"b":""}'.length) } }, agent: 'a' },
    { name: 'an uppercase UUID event_id', body: { ...base, event_id: randomUUID().toUpperCase() }, agent: 'a' },
    { name: 'run_id of 128 characters', body: { ...base, run_id: 'r'.repeat(128) }, agent: 'a' },
  ])('$name', async ({ body, agent }) => {
    const key = await h.key(unique('u'))
    const res = await h.post('/events', body, key)
    expect(res.statusCode, res.body).toBe(200)
    expect(res.json().ok).toBe(true)
    const events = (await h.get('/agents/events', key)).json().events
    expect(events).toHaveLength(1)
    expect(events[0].agent_id).toBe(agent)
    expect(events[0].event_id).toBe(res.json().event_id)
  })

  it('prices 1e9 input and 1e9 output tokens of gpt-4o exactly (2500 + 10000 USD)', async () => {
    const key = await h.key(unique('u'))
    const res = await h.post('/events', llmCall('a', { input_tokens: 1e9, output_tokens: 1e9 }), key)
    expect(res.json()).toMatchObject({ cost_usd: 12_500, total_cost_24h: 12_500, paused: true })
  })
})

describe('POST /events rejects a body that is not a JSON object', () => {
  const raw = (key: string, payload: string, contentType = 'application/json') =>
    h.app.inject({ method: 'POST', url: '/events', headers: { 'x-api-key': key, 'content-type': contentType }, payload })

  it('invalid JSON → 400 invalid_json', async () => {
    const { key, before } = await seededUser()
    expectProblem(await raw(key, '{"agent_id": "a", "event_type": '), 400, 'invalid_json')
    expect(await snapshot(key)).toEqual(before)
  })

  it('an empty body with content-type application/json → 400 invalid_json', async () => {
    const { key, before } = await seededUser()
    expectProblem(await raw(key, ''), 400, 'invalid_json')
    expect(await snapshot(key)).toEqual(before)
  })

  it('a body over 64 KiB → 413 payload_too_large', async () => {
    const { key, before } = await seededUser()
    const payload = JSON.stringify({ ...base, metadata: { blob: 'x'.repeat(65_536) } })
    expect(Buffer.byteLength(payload)).toBeGreaterThan(65_536)
    expectProblem(await raw(key, payload), 413, 'payload_too_large')
    expect(await snapshot(key)).toEqual(before)
  })

  it('a body of exactly 64 KiB is not refused as too large (it fails only the metadata rule)', async () => {
    const { key, before } = await seededUser()
    const shell = JSON.stringify({ ...base, metadata: { blob: '' } })
    const payload = JSON.stringify({ ...base, metadata: { blob: 'x'.repeat(65_536 - shell.length) } })
    expect(Buffer.byteLength(payload)).toBe(65_536)
    const problem = expectProblem(await raw(key, payload), 400, 'invalid_body')
    expect(fieldsOf(problem)).toEqual(['metadata'])
    expect(await snapshot(key)).toEqual(before)
  })

  // BUG (src/app.ts buildApp): Fastify's built-in text/plain parser is left registered, so a
  // text/plain body reaches the route as a string and is answered 400 invalid_body, not 415.
  it('content-type text/plain → 415 unsupported_media_type', async () => {
    const { key, before } = await seededUser()
    expectProblem(await raw(key, JSON.stringify(base), 'text/plain'), 415, 'unsupported_media_type')
    expect(await snapshot(key)).toEqual(before)
  })

  it('content-type application/x-www-form-urlencoded → 415 unsupported_media_type', async () => {
    const { key, before } = await seededUser()
    expectProblem(await raw(key, 'agent_id=a&event_type=agent_start', 'application/x-www-form-urlencoded'), 415, 'unsupported_media_type')
    expect(await snapshot(key)).toEqual(before)
  })

  it('application/json with a charset parameter is accepted', async () => {
    const key = await h.key(unique('u'))
    const res = await raw(key, JSON.stringify(base), 'application/json; charset=utf-8')
    expect(res.statusCode, res.body).toBe(200)
    expect((await h.get('/agents/events', key)).json().events).toHaveLength(1)
  })

  it.each([
    { name: '__proto__', payload: '{"__proto__": {"x": 1}, "agent_id": "a", "event_type": "agent_start"}' },
    { name: 'constructor.prototype', payload: '{"constructor": {"prototype": {"x": 1}}, "agent_id": "a", "event_type": "agent_start"}' },
    { name: 'nested __proto__ in metadata', payload: '{"agent_id": "a", "event_type": "agent_start", "metadata": {"__proto__": {"x": 1}}}' },
  ])('a prototype-poisoning body ($name) → 400 and nothing stored', async ({ payload }) => {
    const { key, before } = await seededUser()
    expectProblem(await raw(key, payload), 400, 'invalid_json')
    expect(await snapshot(key)).toEqual(before)
    expect(({} as Record<string, unknown>).x).toBeUndefined()
    await expectHotTotalUnchanged(key)
  })
})

describe('authentication', () => {
  const send = (headers: Record<string, string>) =>
    h.app.inject({ method: 'POST', url: '/events', headers: { 'content-type': 'application/json', ...headers }, payload: JSON.stringify(llmCall('a')) })

  it('a request without x-api-key → 401 unauthorized', async () => {
    expectProblem(await send({}), 401, 'unauthorized')
    expectProblem(await h.get('/agents', null), 401, 'unauthorized')
  })

  it('an empty x-api-key → 401 unauthorized', async () => {
    expectProblem(await send({ 'x-api-key': '' }), 401, 'unauthorized')
  })

  it('an unknown key (malformed, or well-formed but never issued) → 401 unauthorized', async () => {
    expectProblem(await send({ 'x-api-key': 'nope' }), 401, 'unauthorized')
    const real = await h.key(unique('u'))
    const forged = real.slice(0, -4) + (real.endsWith('AAAA') ? 'BBBB' : 'AAAA')
    expectProblem(await send({ 'x-api-key': forged }), 401, 'unauthorized')
    expectProblem(await h.get('/agents', forged), 401, 'unauthorized')
  })

  it('a revoked key → 401 unauthorized on writes and reads, and stores nothing', async () => {
    const user = unique('u')
    const { record, key } = await h.services.keys.create(user, { rateLimit: 1_000_000 })
    expect((await send({ 'x-api-key': key })).statusCode).toBe(200)
    const other = await h.key(user) // a second key of the same user, to look at the data
    const before = await snapshot(other)
    expect(before.events).toHaveLength(1)

    const revoked = await h.services.keys.revoke(record.keyId)
    expect(revoked?.revokedAt).not.toBeNull()
    expectProblem(await send({ 'x-api-key': key }), 401, 'unauthorized')
    expectProblem(await h.get('/agents', key), 401, 'unauthorized')
    expectProblem(await h.post('/config', { agent_id: 'a', cost_threshold_usd: 1 }, key), 401, 'unauthorized')
    expect(await snapshot(other)).toEqual(before)
  })

  it('the health endpoints answer without a key', async () => {
    const res = await h.get('/healthz', null)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ ok: true })
  })
})

describe('unknown routes', () => {
  it.each([
    { method: 'GET' as const, url: '/nope' },
    { method: 'POST' as const, url: '/event' },
    { method: 'GET' as const, url: '/agents/a/b/c' },
  ])('$method $url → 404 not_found problem+json', async ({ method, url }) => {
    const key = await h.key(unique('u'))
    const body = expectProblem(await h.app.inject({ method, url, headers: { 'x-api-key': key } }), 404, 'not_found')
    expect(body.detail).toContain(url)
  })
})

describe('POST /config rejects an invalid body and changes nothing', () => {
  const good = { agent_id: 'a', cost_threshold_usd: 3, slack_webhook_url: 'https://hooks.example.com/services/T000/B000/abcdefghijklmnop' }

  it.each([
    { name: 'cost_threshold_usd negative', body: { agent_id: 'a', cost_threshold_usd: -1 }, field: 'cost_threshold_usd' },
    { name: 'cost_threshold_usd a string', body: { agent_id: 'a', cost_threshold_usd: '5' }, field: 'cost_threshold_usd' },
    { name: 'an unknown field', body: { agent_id: 'a', budget: 5 }, field: 'budget' },
    { name: 'missing agent_id', body: { cost_threshold_usd: 5 }, field: 'agent_id' },
    { name: 'agent_id of 129 characters', body: { agent_id: 'x'.repeat(129) }, field: 'agent_id' },
    { name: "slack_webhook_url 'ftp://x'", body: { agent_id: 'a', slack_webhook_url: 'ftp://x' }, field: 'slack_webhook_url' },
    { name: 'slack_webhook_url not a URL', body: { agent_id: 'a', slack_webhook_url: 'hooks.example.com' }, field: 'slack_webhook_url' },
    {
      name: 'chat_webhook_url disagreeing with slack_webhook_url',
      body: { agent_id: 'a', slack_webhook_url: 'https://hooks.example.com/one', chat_webhook_url: 'https://hooks.example.com/two' },
      field: 'chat_webhook_url',
    },
    { name: 'auto_resume a string', body: { agent_id: 'a', auto_resume: 'true' }, field: 'auto_resume' },
  ])('$name → 400 invalid_body naming $field', async ({ body, field }) => {
    const key = await h.key(unique('u'))
    expect((await h.post('/config', good, key)).statusCode).toBe(200)
    const before = (await h.get('/agents/a', key)).json()
    expect(before.config).toMatchObject({ cost_threshold_usd: 3 })

    const problem = expectProblem(await h.post('/config', body, key), 400, 'invalid_body')
    expect(fieldsOf(problem)).toContain(field)
    expect((await h.get('/agents/a', key)).json()).toEqual(before)
  })

  it('an invalid first config of an agent creates no config (the agent stays unknown)', async () => {
    const key = await h.key(unique('u'))
    expectProblem(await h.post('/config', { agent_id: 'a', slack_webhook_url: 'ftp://x' }, key), 400, 'invalid_body')
    expectProblem(await h.get('/agents/a', key), 404, 'agent_not_found')
  })

  it('chat_webhook_url equal to slack_webhook_url is accepted', async () => {
    const key = await h.key(unique('u'))
    const url = 'https://hooks.example.com/services/T000/B000/abcdefghijklmnop'
    expect((await h.post('/config', { agent_id: 'a', slack_webhook_url: url, chat_webhook_url: url }, key)).statusCode).toBe(200)
    expect((await h.get('/agents/a', key)).json().config.slack_webhook_url).toBe('https://hooks.example.com/…mnop')
  })
})

describe('POST /config/pause rejects an invalid body and changes nothing', () => {
  it.each([
    { name: 'missing is_paused', body: { agent_id: 'a' }, field: 'is_paused' },
    { name: 'is_paused "yes"', body: { agent_id: 'a', is_paused: 'yes' }, field: 'is_paused' },
    { name: 'is_paused 1', body: { agent_id: 'a', is_paused: 1 }, field: 'is_paused' },
    { name: 'missing agent_id', body: { is_paused: true }, field: 'agent_id' },
    { name: 'an unknown field', body: { agent_id: 'a', is_paused: true, reason: 'x' }, field: 'reason' },
  ])('$name → 400 invalid_body naming $field', async ({ body, field }) => {
    const { key, before } = await seededUser()
    expect(before.agents[0].is_paused).toBe(false)
    const problem = expectProblem(await h.post('/config/pause', body, key), 400, 'invalid_body')
    expect(fieldsOf(problem)).toContain(field)
    expect(await snapshot(key)).toEqual(before)
    expect((await h.post('/events', llmCall('a'), key)).json().paused).toBe(false)
  })
})

describe('query validation', () => {
  it.each(['0', '1001', 'abc', '1.5', '-1', '1e3', ''])('GET /agents/events?limit=%s → 400 invalid_query naming limit', async (limit) => {
    const { key } = await seededUser()
    const problem = expectProblem(await h.get(`/agents/events?limit=${limit}`, key), 400, 'invalid_query')
    expect(fieldsOf(problem)).toEqual(['limit'])
  })

  it('GET /agents/events?limit=1000 and ?limit=1 are accepted and bound the result', async () => {
    const key = await h.key(unique('u'))
    for (let i = 0; i < 3; i++) expect((await h.post('/events', llmCall('a'), key)).statusCode).toBe(200)
    const all = await h.get('/agents/events?limit=1000', key)
    expect(all.statusCode).toBe(200)
    expect(all.json().events).toHaveLength(3)
    const one = await h.get('/agents/events?limit=1', key)
    expect(one.statusCode).toBe(200)
    expect(one.json().events).toEqual([all.json().events[0]])
  })

  it('an unknown query parameter → 400 invalid_query naming it', async () => {
    const { key } = await seededUser()
    const problem = expectProblem(await h.get('/agents/events?lmit=5', key), 400, 'invalid_query')
    expect(fieldsOf(problem)).toContain('lmit')
  })

  it.each(['0', '721', '-1', 'abc', '2.5'])('GET /agents/a/hourly?hours=%s → 400 invalid_query naming hours', async (hours) => {
    const { key } = await seededUser()
    const problem = expectProblem(await h.get(`/agents/a/hourly?hours=${hours}`, key), 400, 'invalid_query')
    expect(fieldsOf(problem)).toEqual(['hours'])
  })

  it('GET /agents/a/hourly?hours=720 returns 720 consecutive UTC hour buckets ending at the current hour', async () => {
    const { key } = await seededUser()
    const res = await h.get('/agents/a/hourly?hours=720', key)
    expect(res.statusCode).toBe(200)
    const body = res.json()
    expect(body.hours).toBe(720)
    expect(body.buckets).toHaveLength(720)
    const hours = body.buckets.map((b: { hour: string }) => Date.parse(b.hour))
    for (let i = 1; i < hours.length; i++) expect(hours[i] - hours[i - 1]).toBe(3_600_000)
    expect(hours.at(-1)).toBe(Math.floor(Date.now() / 3_600_000) * 3_600_000)
    const total = body.buckets.reduce((s: number, b: { cost_usd: number }) => s + b.cost_usd, 0)
    expect(total).toBe(LLM_CALL_USD)
  })

  // BUG (src/app.ts buildApp): Fastify's default maxParamLength is 100, so an id over 100
  // characters never reaches the route: Fastify answers 414 with its own application/json body.
  it('GET /agents/{id} with a 129-character id → 400 invalid_query problem naming agent_id', async () => {
    const { key } = await seededUser()
    const problem = expectProblem(await h.get(`/agents/${'x'.repeat(129)}`, key), 400, 'invalid_query')
    expect(fieldsOf(problem)).toEqual(['agent_id'])
  })

  // BUG (same cause): agent ids of 101..128 characters are valid (POST /events accepts them)
  // but GET /agents/{id} and /hourly answer 414 for them.
  it('an agent with a 128-character id (accepted by POST /events) can be read by GET /agents/{id} and /hourly', async () => {
    const key = await h.key(unique('u'))
    const id = 'x'.repeat(128)
    expect((await h.post('/events', llmCall(id), key)).statusCode).toBe(200)
    const detail = await h.get(`/agents/${id}`, key)
    expect(detail.statusCode, detail.body).toBe(200)
    expect(detail.json()).toMatchObject({ agent_id: id, llm_calls: 1, total_cost_usd: LLM_CALL_USD })
    const hourly = await h.get(`/agents/${id}/hourly`, key)
    expect(hourly.statusCode, hourly.body).toBe(200)
    expect(hourly.json().buckets).toHaveLength(24)
  })

  it('an agent with a 100-character id (within Fastify\'s default param length) can be read', async () => {
    const key = await h.key(unique('u'))
    const id = 'y'.repeat(100)
    expect((await h.post('/events', llmCall(id), key)).statusCode).toBe(200)
    const detail = await h.get(`/agents/${id}`, key)
    expect(detail.statusCode, detail.body).toBe(200)
    expect(detail.json()).toMatchObject({ agent_id: id, llm_calls: 1, total_cost_usd: LLM_CALL_USD })
  })

  // BUG (src/app.ts buildApp, no `frameworkErrors`): a malformed percent-escape in the path is
  // answered by Fastify itself (400 FST_ERR_BAD_URL, application/json), not as problem+json.
  it('GET /agents/{id} with a malformed percent-escape → 400 problem+json', async () => {
    const { key } = await seededUser()
    const res = await h.get('/agents/%zz', key)
    expect(res.statusCode).toBe(400)
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
  })

  it('GET /agents/{id} with a control character in the id → 400 invalid_query', async () => {
    const { key } = await seededUser()
    const problem = expectProblem(await h.get('/agents/a%07b', key), 400, 'invalid_query')
    expect(fieldsOf(problem)).toEqual(['agent_id'])
  })
})
