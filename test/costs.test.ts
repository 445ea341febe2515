import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { startHarness, unique, type Harness } from './helpers/harness.ts'

const HOUR = 3_600_000
const START = Date.UTC(2026, 2, 1, 0, 0, 0)
const clock = new ManualClock(START)
let h: Harness
beforeAll(async () => {
  h = await startHarness({ clock })
})
afterAll(() => h.close())

// Metadata keys an operator may group by, hostile ones among them: SQL, a parameter's
// placeholder, a dot, quotes, unicode. Each is only ever a query parameter.
const KEYS = ['customer', 'feature', "x'); DROP TABLE events; --", '{k0:String}', 'a.b', 'é"🚀\\']
const AGENTS = ['alpha', 'beta', 'gamma']
const MODELS = ['gpt-4o', 'gpt-4o-mini', 'claude-sonnet-4']
const RUNS = ['r1', 'r2', undefined]

interface Sent {
  agent: string
  model: string | null
  run: string | null
  dims: Record<string, string>
  costNano: number
  llmCall: boolean
  input: number
  output: number
  hour: number
}

/** What ClickHouse makes a metadata value a dimension's value: a string as it is, a number or boolean as its JSON text; nothing else. */
function dimsOf(metadata: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(metadata)) {
    if (typeof v === 'string') out[k] = v
    else if (typeof v === 'number' || typeof v === 'boolean') out[k] = JSON.stringify(v)
  }
  return out
}

const metadataValue = fc.oneof(
  fc.constantFrom('acme', 'globex', 'initech', '', '=HYPERLINK("x")', 'a,b\n"c"'),
  fc.integer({ min: -3, max: 3 }),
  fc.constantFrom(1.5, true, false, null),
  fc.constant({ nested: 1 }),
  fc.constant([1, 2]),
)
const eventArb = fc.record({
  agent: fc.constantFrom(...AGENTS),
  kind: fc.constantFrom('llm_call', 'llm_call', 'llm_call', 'tool_call', 'agent_start'),
  model: fc.constantFrom(...MODELS),
  run: fc.constantFrom(...RUNS),
  input: fc.integer({ min: 0, max: 5000 }),
  output: fc.integer({ min: 0, max: 2000 }),
  metadata: fc.dictionary(fc.constantFrom(...KEYS), metadataValue, { maxKeys: 4 }),
  hoursLater: fc.constantFrom(0, 0, 0, 1, 5),
})

type EventSpec = typeof eventArb extends fc.Arbitrary<infer T> ? T : never

/** Posts events hour by hour as the clock moves; returns what the model needs of each. */
async function send(key: string, events: ReadonlyArray<EventSpec>): Promise<Sent[]> {
  const sent: Sent[] = []
  for (const e of events) {
    clock.advance(e.hoursLater * HOUR)
    const body: Record<string, unknown> = { agent_id: e.agent, event_type: e.kind, metadata: e.metadata, ...(e.run ? { run_id: e.run } : {}) }
    if (e.kind === 'llm_call') Object.assign(body, { model: e.model, input_tokens: e.input, output_tokens: e.output })
    if (e.kind === 'tool_call') body.tool_name = 'search'
    const res = await h.post('/events', body, key)
    expect(res.statusCode, res.body).toBe(200)
    const answer = res.json()
    sent.push({
      agent: e.agent,
      model: e.kind === 'llm_call' ? e.model : null,
      run: e.run ?? (e.kind === 'agent_start' ? answer.event_id : null),
      dims: dimsOf(e.metadata),
      costNano: Math.round(answer.cost_usd * 1e9),
      llmCall: e.kind === 'llm_call',
      input: e.kind === 'llm_call' ? e.input : 0,
      output: e.kind === 'llm_call' ? e.output : 0,
      hour: Math.floor(clock.now() / HOUR) * HOUR,
    })
  }
  return sent
}

type Dim = 'agent' | 'model' | 'day' | 'hour' | 'run' | `metadata.${string}`

function valueOf(e: Sent, d: Dim): string | null {
  switch (d) {
    case 'agent':
      return e.agent
    case 'model':
      return e.model
    case 'day':
      return new Date(e.hour).toISOString().slice(0, 10)
    case 'hour':
      return new Date(e.hour).toISOString().slice(0, 14) + '00:00Z'
    case 'run':
      return e.run
    default:
      return e.dims[d.slice('metadata.'.length)] ?? null
  }
}

interface Row {
  group: Record<string, string | null>
  cost_nano: number
  llm_calls: number
  input_tokens: number
  output_tokens: number
  events: number
}

/** The plain model: the sent events in the range and filters, summed per group, in the answer's order. */
function expected(sent: Sent[], groupBy: Dim[], q: { from: number; to: number; agents?: string[]; models?: string[]; metadata?: Record<string, string[]> }): Row[] {
  const groups = new Map<string, Row>()
  for (const e of sent) {
    if (e.hour < q.from || e.hour >= q.to) continue
    if (q.agents && !q.agents.includes(e.agent)) continue
    if (q.models && (e.model === null || !q.models.includes(e.model))) continue
    if (q.metadata && Object.entries(q.metadata).some(([k, vs]) => !(k in e.dims) || !vs.includes(e.dims[k]!))) continue
    const values = groupBy.map((d) => valueOf(e, d))
    const id = JSON.stringify(values)
    const row = groups.get(id) ?? { group: Object.fromEntries(groupBy.map((d, i) => [d, values[i]!])), cost_nano: 0, llm_calls: 0, input_tokens: 0, output_tokens: 0, events: 0 }
    row.cost_nano += e.costNano
    row.llm_calls += e.llmCall ? 1 : 0
    row.input_tokens += e.input
    row.output_tokens += e.output
    row.events += 1
    groups.set(id, row)
  }
  const bytes = (v: string | null) => (v === null ? null : Buffer.from(v, 'utf8'))
  return [...groups.values()].sort((a, b) => {
    if (a.cost_nano !== b.cost_nano) return b.cost_nano - a.cost_nano
    for (const d of groupBy) {
      const x = bytes(a.group[d]!)
      const y = bytes(b.group[d]!)
      if (x === null || y === null) {
        if (x !== y) return x === null ? -1 : 1
        continue
      }
      const c = Buffer.compare(x, y)
      if (c !== 0) return c
    }
    return 0
  })
}

function queryString(params: Array<[string, string]>): string {
  return params.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')
}

/** Every page of GET /costs, walked with the cursor. */
async function allPages(key: string, params: Array<[string, string]>): Promise<Row[]> {
  const rows: Row[] = []
  let cursor: string | null = null
  for (let page = 0; page < 1000; page++) {
    const res = await h.get(`/costs?${queryString([...params, ...(cursor ? [['cursor', cursor] as [string, string]] : [])])}`, key)
    expect(res.statusCode, res.body).toBe(200)
    const body = res.json()
    for (const g of body.groups) {
      const { cost_usd, ...rest } = g
      rows.push({ ...rest, cost_nano: Math.round(cost_usd * 1e9) })
    }
    cursor = body.next_cursor
    if (cursor === null) return rows
  }
  throw new Error('more than 1000 pages')
}

describe('GET /costs', () => {
  it('equals the sum of the stored events for any grouping, filters and page size (property)', async () => {
    const key = await h.key(unique('u'))
    const other = await h.key(unique('u'))
    clock.set(START)
    const events = fc.sample(fc.array(eventArb, { minLength: 40, maxLength: 40 }), { numRuns: 1, seed: 20261127 })[0]!
    const sent = await send(key, events)
    // Another user's events at the same hours, with the same agents and keys: never counted.
    clock.set(START)
    await send(other, events.slice(0, 10))
    await h.flush()

    const dims: Dim[] = ['agent', 'model', 'day', 'hour', 'run', ...KEYS.map((k) => `metadata.${k}` as Dim)]
    const queryArb = fc.record({
      groupBy: fc.uniqueArray(fc.constantFrom(...dims), { minLength: 1, maxLength: 2 }),
      fromHour: fc.integer({ min: 0, max: 8 }),
      hours: fc.integer({ min: 1, max: 48 }),
      agents: fc.option(fc.subarray(AGENTS, { minLength: 1 }), { nil: undefined }),
      models: fc.option(fc.subarray(MODELS, { minLength: 1 }), { nil: undefined }),
      metadata: fc.option(fc.dictionary(fc.constantFrom(...KEYS), fc.subarray(['acme', 'globex', '1', 'true', '', '-3'], { minLength: 1 }), { maxKeys: 2 }), { nil: undefined }),
      limit: fc.integer({ min: 1, max: 7 }),
    })
    await fc.assert(
      fc.asyncProperty(queryArb, async (q) => {
        const from = START + q.fromHour * HOUR
        const to = from + q.hours * HOUR
        const params: Array<[string, string]> = [
          ...q.groupBy.map((d): [string, string] => ['group_by', d]),
          ['from', new Date(from).toISOString()],
          ['to', new Date(to).toISOString()],
          ['limit', String(q.limit)],
          ...(q.agents ?? []).map((a): [string, string] => ['agent_id', a]),
          ...(q.models ?? []).map((m): [string, string] => ['model', m]),
          ...Object.entries(q.metadata ?? {}).flatMap(([k, vs]) => vs.map((v): [string, string] => [`metadata.${k}`, v])),
        ]
        const metadata = q.metadata && Object.keys(q.metadata).length > 0 ? q.metadata : undefined
        expect(await allPages(key, params)).toEqual(expected(sent, q.groupBy, { from, to, agents: q.agents, models: q.models, metadata }))
      }),
      { numRuns: 60, seed: 27 },
    )
  })

  it('defaults to grouping by agent over the 24 hours that end with the current one', async () => {
    const key = await h.key(unique('u'))
    clock.set(START + 30 * 24 * HOUR + 1_234)
    await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500 }, key)
    const body = (await h.get('/costs', key)).json()
    expect(body).toEqual({
      from: new Date(START + 29 * 24 * HOUR + HOUR).toISOString(),
      to: new Date(START + 30 * 24 * HOUR + HOUR).toISOString(),
      group_by: ['agent'],
      groups: [{ group: { agent: 'a' }, cost_usd: 0.0075, llm_calls: 1, input_tokens: 1000, output_tokens: 500, events: 1 }],
      next_cursor: null,
    })
  })

  it('answers CSV: a header row, a row per group, cells quoted and defused as RFC 4180 and OWASP say', async () => {
    const key = await h.key(unique('u'))
    clock.set(START + 40 * 24 * HOUR)
    for (const customer of ['=cmd|calc', 'a,"b"\nc', '-2']) {
      await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, metadata: { customer } }, key)
    }
    await h.post('/events', { agent_id: 'a', event_type: 'agent_start' }, key)
    const res = await h.get('/costs?group_by=metadata.customer&format=csv', key)
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8')
    expect(res.headers['content-disposition']).toMatch(/^attachment; filename="costs_\d{8}T\d{6}_\d{8}T\d{6}\.csv"$/)
    expect(res.body).toBe(
      [
        'metadata.customer,cost_usd,llm_calls,input_tokens,output_tokens,events',
        '-2,0.0075,1,1000,500,1',
        "'=cmd|calc,0.0075,1,1000,500,1",
        '"a,""b""\nc",0.0075,1,1000,500,1',
        ',0,0,0,0,1',
      ].join('\r\n') + '\r\n',
    )
  })

  it.each([
    ['group_by=agent&group_by=model&group_by=day', 'group_by'],
    ['group_by=customer', 'group_by'],
    ['group_by=metadata.', 'group_by'],
    [`group_by=metadata.${'k'.repeat(257)}`, 'group_by'],
    ['group_by=metadata.a%07b', 'group_by'],
    ['group_by=agent&group_by=agent', 'group_by'],
    ['from=yesterday', 'from'],
    ['from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z', 'from'],
    ['from=2024-01-01T00:00:00Z&to=2026-01-01T00:00:00Z', 'from'],
    ['limit=0', 'limit'],
    ['limit=1001', 'limit'],
    ['format=xml', 'format'],
    ['cursor=bm90LWEtY3Vyc29y', 'cursor'],
    ['agent_id=', 'agent_id'],
    ['colour=red', 'colour'],
    ['metadata.=x', 'metadata.'],
  ])('%s → 400 naming %s', async (query, field) => {
    // A repeated parameter is named with the position of the bad value (group_by.1).
    const key = await h.key(unique('u'))
    const res = await h.get(`/costs?${query}`, key)
    expect(res.statusCode, res.body).toBe(400)
    expect(res.json()).toMatchObject({ code: 'invalid_query' })
    expect(res.json().errors.map((e: { field: string }) => e.field.replace(/\.\d+$/, ''))).toContain(field)
  })

  it('refuses a cursor of another grouping or range', async () => {
    const key = await h.key(unique('u'))
    clock.set(START + 50 * 24 * HOUR)
    for (const agent of ['a', 'b']) await h.post('/events', { agent_id: agent, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500 }, key)
    const first = (await h.get('/costs?limit=1', key)).json()
    expect(first.next_cursor).toEqual(expect.any(String))
    const res = await h.get(`/costs?limit=1&group_by=model&cursor=${first.next_cursor}`, key)
    expect(res.statusCode).toBe(400)
    expect(res.json().errors.map((e: { field: string }) => e.field)).toEqual(['cursor'])
  })

  it('needs an API key', async () => {
    expect((await h.get('/costs', null)).statusCode).toBe(401)
  })
})
