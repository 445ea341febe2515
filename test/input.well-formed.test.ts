import { randomUUID } from 'node:crypto'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MAX_DEPTH } from '../src/schemas/well-formed.ts'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'
import { deploymentModes } from './helpers/redis.ts'

/**
 * Strings that are not well-formed Unicode and data nested too deep are refused at
 * the edge, with a 400 naming the field, in every string field of every body, and change
 * nothing; well-formed strings are stored exactly as sent. Both modes: what is refused never
 * reaches the hot state, the journal or ClickHouse, whichever they are.
 */
const { modes, stop } = deploymentModes()
afterAll(stop)

/** A string holding one lone surrogate (high or low), between ASCII text. */
const withLoneSurrogate = fc
  .tuple(fc.string({ maxLength: 8 }), fc.integer({ min: 0xd800, max: 0xdfff }), fc.string({ maxLength: 8 }))
  .map(([a, unit, b]) => `${a}${String.fromCharCode(unit)}${b}`)

/** Where a string can go in each body, and the field the answer must name. */
const PLACES: Array<{ path: string; field: string; body: (s: string) => Record<string, unknown> }> = [
  { path: '/events', field: 'agent_id', body: (s) => llmCall(s) },
  { path: '/events', field: 'model', body: (s) => llmCall('a', { model: s }) },
  { path: '/events', field: 'tool_name', body: (s) => ({ agent_id: 'a', event_type: 'tool_call', tool_name: s }) },
  { path: '/events', field: 'event_id', body: (s) => llmCall('a', { event_id: s }) },
  { path: '/events', field: 'metadata.k', body: (s) => llmCall('a', { metadata: { k: s } }) },
  { path: '/events', field: 'metadata.list.1', body: (s) => llmCall('a', { metadata: { list: ['ok', s] } }) },
  { path: '/events', field: 'metadata', body: (s) => llmCall('a', { metadata: { [s]: 1 } }) },
  { path: '/config', field: 'agent_id', body: (s) => ({ agent_id: s, cost_threshold_usd: 1 }) },
  { path: '/config', field: 'slack_webhook_url', body: (s) => ({ agent_id: 'a', slack_webhook_url: `https://hooks.example.com/${s}` }) },
  { path: '/config/pause', field: 'agent_id', body: (s) => ({ agent_id: s, is_paused: true }) },
]

describe.each(modes)('request data at the edge (%s)', (_mode, modeEnv) => {
  let h: Harness
  beforeAll(async () => {
    // One key sends every case of a property: its config budget (60 a minute by default)
    // must not be what refuses one of them.
    h = await startHarness({ env: { ...(await modeEnv()), CONFIG_RATE_LIMIT: '100000', READS_RATE_LIMIT: '100000' } })
  })
  afterAll(() => h?.close())

  /** Nothing at all of the user's is stored or counted. */
  async function nothingStored(key: string) {
    expect((await h.get('/agents', key)).json().agents).toEqual([])
    expect((await h.get('/agents/events', key)).json().events).toEqual([])
  }

  it('refuses a lone surrogate in every string field, keys included, naming the field, and stores nothing', async () => {
    const key = await h.key(unique('u'))
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...PLACES), withLoneSurrogate, async (place, s) => {
        const res = await h.post(place.path, place.body(s), key)
        expect(res.statusCode).toBe(400)
        const body = res.json()
        expect(body.code).toBe('invalid_body')
        // A key at fault is named by its own escaped text, under its parent.
        expect(body.errors[0].field.startsWith(place.field)).toBe(true)
        expect(body.errors[0].message).toMatch(/well-formed Unicode/)
      }),
      { numRuns: 150 },
    )
    await nothingStored(key)
  })

  it(`accepts nesting up to ${MAX_DEPTH} levels and refuses one more, at any depth the body allows, without recursion`, async () => {
    const key = await h.key(unique('u'))
    // The body is level 1 and metadata level 2: metadata may hold MAX_DEPTH - 2 levels below
    // it. The JSON is written as text: JSON.stringify itself would overflow on the deep ones.
    const nested = (levels: number) => {
      let open = ''
      let close = ''
      for (let i = 0; i < levels; i++) {
        open += i % 2 ? '[' : '{"n":'
        close = (i % 2 ? ']' : '}') + close
      }
      return `${open}"leaf"${close}`
    }
    const at = (levels: number) =>
      h.app.inject({
        method: 'POST',
        url: '/events',
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
        payload: `{"agent_id":"deep","event_type":"agent_start","metadata":{"n":${nested(levels)}}}`,
      })
    expect((await at(MAX_DEPTH - 2)).statusCode).toBe(200)
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: MAX_DEPTH - 1, max: 5000 }), async (levels) => {
        const res = await at(levels)
        expect(res.statusCode).toBe(400)
        expect(res.json().errors[0].message).toBe(`nests deeper than ${MAX_DEPTH} levels`)
      }),
      { numRuns: 30 },
    )
    expect((await h.get('/agents/events', key)).json().events).toEqual([expect.objectContaining({ agent_id: 'deep' })])
  })

  it('refuses a body that is not valid UTF-8 rather than storing replacement characters', async () => {
    const key = await h.key(unique('u'))
    for (const bad of [[0xff], [0xc3], [0xed, 0xa0, 0x80], [0xe2, 0x82]]) {
      const payload = Buffer.concat([Buffer.from('{"agent_id":"a'), Buffer.from(bad), Buffer.from('","event_type":"agent_start"}')])
      const res = await h.app.inject({ method: 'POST', url: '/events', headers: { 'x-api-key': key, 'content-type': 'application/json' }, payload })
      expect(res.statusCode).toBe(400)
      expect(res.json()).toMatchObject({ code: 'invalid_json', detail: 'the body is not valid UTF-8' })
    }
    await nothingStored(key)
  })

  it('stores well-formed strings of any script exactly as sent, astral characters included', async () => {
    const key = await h.key(unique('u'))
    // No control characters: agent ids refuse them, the other fields keep them.
    // (A "__proto__" key is refused as prototype poisoning, its own class of input.)
    // eslint-disable-next-line no-control-regex
    const text = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 }).filter((s) => !/[\u0000-\u001f\u007f-\u009f]/.test(s) && s !== '__proto__')
    const sent = new Map<string, { agent_id: string; tool_name: string; metadata: string }>()
    await fc.assert(
      fc.asyncProperty(text, text, text, async (agent, tool, value) => {
        const event_id = randomUUID()
        const res = await h.post('/events', { agent_id: agent, event_type: 'tool_call', tool_name: tool, event_id, metadata: { [value]: value } }, key)
        expect(res.statusCode).toBe(200)
        sent.set(event_id, { agent_id: agent, tool_name: tool, metadata: JSON.stringify({ [value]: value }) })
      }),
      { numRuns: 40 },
    )
    const stored = (await h.get('/agents/events?limit=1000', key)).json().events as Array<{ event_id: string; agent_id: string; tool_name: string; metadata: unknown }>
    expect(stored).toHaveLength(sent.size)
    for (const e of stored) {
      const s = sent.get(e.event_id)!
      expect(e.agent_id).toBe(s.agent_id)
      expect(e.tool_name).toBe(s.tool_name)
      expect(JSON.stringify(e.metadata)).toBe(s.metadata)
    }
  })

  it("fails no other user's request: one malformed request among 90 valid ones of another user", async () => {
    const [good, bad] = [await h.key(unique('u')), await h.key(unique('u'))]
    const ids = Array.from({ length: 90 }, () => randomUUID())
    const replies = await Promise.all([
      ...ids.slice(0, 45).map((event_id) => h.post('/events', llmCall('ok', { event_id }), good)),
      h.post('/events', llmCall('\ud800'), bad),
      ...ids.slice(45).map((event_id) => h.post('/events', llmCall('ok', { event_id }), good)),
    ])
    expect(replies.filter((r) => r.statusCode === 400)).toHaveLength(1)
    expect(replies.filter((r) => r.statusCode === 200)).toHaveLength(90)
    const stored = (await h.get('/agents/events?limit=1000', good)).json().events.map((e: { event_id: string }) => e.event_id)
    expect(stored.sort()).toEqual([...ids].sort())
    await nothingStored(bad)
  })
})
