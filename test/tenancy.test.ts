import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h.close())

const AGENT = 'shared'
const A_WEBHOOK = 'https://hooks.example.com/services/TAAAA/BAAAA/secretpathofusera'
/** gpt-4o-mini at 0.15 / 0.6 USD per 1M tokens: 1000 in + 500 out. */
const B_CALL_USD = (1000 * 0.15 + 500 * 0.6) / 1e6
/** What is left of a budget, as the API computes it: in nano-USD. */
const left = (thresholdUsd: number, spentUsd: number) => (Math.round(thresholdUsd * 1e9) - Math.round(spentUsd * 1e9)) / 1e9

interface Tenant {
  user: string
  key: string
  /** event_ids this tenant's POST /events returned, in order sent. */
  eventIds: string[]
}

async function tenant(): Promise<Tenant> {
  const user = unique('u')
  return { user, key: await h.key(user), eventIds: [] }
}

async function send(t: Tenant, body: unknown) {
  const res = await h.post('/events', body, t.key)
  expect(res.statusCode, res.body).toBe(200)
  const reply = res.json()
  t.eventIds.push(reply.event_id)
  return reply as { ok: boolean; event_id: string; cost_usd: number; paused: boolean; total_cost_24h: number }
}

/**
 * A: two gpt-4o calls and a tool call on 'shared', a config (threshold 5, webhook), paused by hand.
 * B: one gpt-4o-mini call and an agent_start on the same agent id 'shared', nothing else.
 */
async function twoTenants() {
  const a = await tenant()
  const b = await tenant()
  await send(a, llmCall(AGENT))
  await send(a, llmCall(AGENT))
  await send(a, { agent_id: AGENT, event_type: 'tool_call', tool_name: 'search' })
  expect((await h.post('/config', { agent_id: AGENT, cost_threshold_usd: 5, slack_webhook_url: A_WEBHOOK }, a.key)).statusCode).toBe(200)
  const pause = await h.post('/config/pause', { agent_id: AGENT, is_paused: true }, a.key)
  expect(pause.json()).toEqual({ ok: true, agent_id: AGENT, is_paused: true })
  await send(b, llmCall(AGENT, { model: 'gpt-4o-mini' }))
  await send(b, { agent_id: AGENT, event_type: 'agent_start' })
  return { a, b }
}

describe('two users with the same agent_id see only their own data', () => {
  it('GET /agents lists only the caller\'s agent, with the caller\'s totals, threshold and pause flag', async () => {
    const { a, b } = await twoTenants()
    expect((await h.get('/agents', b.key)).json()).toEqual({
      agents: [{ agent_id: AGENT, total_cost_usd: B_CALL_USD, llm_calls: 1, is_paused: false, paused_reason: null, remaining_usd: left(10, B_CALL_USD), alerts_reached: [], ignoring_pause: false, paused_period: null, periods: [] }],
    })
    expect((await h.get('/agents', a.key)).json()).toEqual({
      agents: [
        { agent_id: AGENT, total_cost_usd: 2 * LLM_CALL_USD, llm_calls: 2, cost_threshold_usd: 5, is_paused: true, paused_reason: 'manual', remaining_usd: left(5, 2 * LLM_CALL_USD), alerts_reached: [], ignoring_pause: false, paused_period: null, periods: [] },
      ],
    })
  })

  it('GET /agents/events returns only the caller\'s events', async () => {
    const { a, b } = await twoTenants()
    const bEvents = (await h.get('/agents/events?limit=1000', b.key)).json().events
    expect(bEvents.map((e: { event_id: string }) => e.event_id)).toEqual([...b.eventIds].reverse())
    expect(bEvents.map((e: { event_type: string }) => e.event_type)).toEqual(['agent_start', 'llm_call'])
    expect(bEvents[1]).toMatchObject({ model: 'gpt-4o-mini', cost_usd: B_CALL_USD })

    const aEvents = (await h.get('/agents/events?limit=1000', a.key)).json().events
    expect(aEvents.map((e: { event_id: string }) => e.event_id)).toEqual([...a.eventIds].reverse())
    expect(aEvents.some((e: { event_id: string }) => b.eventIds.includes(e.event_id))).toBe(false)
  })

  it('GET /agents/shared is 404 for a user with neither events nor config for it, though another user has both', async () => {
    const a = await tenant()
    const b = await tenant()
    await send(a, llmCall(AGENT))
    expect((await h.post('/config', { agent_id: AGENT, cost_threshold_usd: 5 }, a.key)).statusCode).toBe(200)
    expect((await h.get(`/agents/${AGENT}`, a.key)).statusCode).toBe(200)

    const detail = await h.get(`/agents/${AGENT}`, b.key)
    expect(detail.statusCode).toBe(404)
    expect(detail.json().code).toBe('agent_not_found')
    const hourly = await h.get(`/agents/${AGENT}/hourly`, b.key)
    expect(hourly.statusCode).toBe(404)
    expect(hourly.json().code).toBe('agent_not_found')
    expect((await h.get('/agents', b.key)).json()).toEqual({ agents: [] })
    expect((await h.get('/agents/events', b.key)).json()).toEqual({ events: [] })
  })

  it('GET /agents/shared shows the caller\'s own totals, cost breakdown, events, pause flag and (no) config', async () => {
    const { a, b } = await twoTenants()
    const detail = (await h.get(`/agents/${AGENT}`, b.key)).json()
    expect(detail).toMatchObject({
      agent_id: AGENT,
      total_cost_usd: B_CALL_USD,
      llm_calls: 1,
      is_paused: false,
      config: null,
      cost_by_model: [{ model: 'gpt-4o-mini', cost_usd: B_CALL_USD, llm_calls: 1, input_tokens: 1000, output_tokens: 500 }],
    })
    expect(detail.events.map((e: { event_id: string }) => e.event_id)).toEqual([...b.eventIds].reverse())

    const aDetail = (await h.get(`/agents/${AGENT}`, a.key)).json()
    expect(aDetail).toMatchObject({
      total_cost_usd: 2 * LLM_CALL_USD,
      llm_calls: 2,
      is_paused: true,
      config: { cost_threshold_usd: 5, slack_webhook_url: 'https://hooks.example.com/…sera' },
      cost_by_model: [{ model: 'gpt-4o', cost_usd: 2 * LLM_CALL_USD, llm_calls: 2 }],
    })
    expect(aDetail.events).toHaveLength(3)
  })

  it('GET /agents/shared shows a user\'s own config when that user has only a config', async () => {
    const { b } = await twoTenants()
    const c = await tenant()
    expect((await h.post('/config', { agent_id: AGENT, cost_threshold_usd: 0.5 }, c.key)).statusCode).toBe(200)
    const detail = (await h.get(`/agents/${AGENT}`, c.key)).json()
    expect(detail).toMatchObject({ agent_id: AGENT, total_cost_usd: 0, llm_calls: 0, is_paused: false, config: { cost_threshold_usd: 0.5, slack_webhook_url: null }, cost_by_model: [], events: [] })
    // and B's config stays unset
    expect((await h.get(`/agents/${AGENT}`, b.key)).json().config).toBeNull()
  })

  it('GET /agents/shared/hourly sums only the caller\'s costs', async () => {
    const { a, b } = await twoTenants()
    const sum = (buckets: { cost_usd: number; llm_calls: number }[]) => ({
      cost: buckets.reduce((s, x) => s + x.cost_usd, 0),
      calls: buckets.reduce((s, x) => s + x.llm_calls, 0),
    })
    const bBody = (await h.get(`/agents/${AGENT}/hourly`, b.key)).json()
    expect(bBody.buckets).toHaveLength(24)
    expect(sum(bBody.buckets)).toEqual({ cost: B_CALL_USD, calls: 1 })
    expect(bBody.buckets.at(-1)).toMatchObject({ cost_usd: B_CALL_USD, llm_calls: 1, input_tokens: 1000, output_tokens: 500 })
    expect(sum((await h.get(`/agents/${AGENT}/hourly`, a.key)).json().buckets)).toEqual({ cost: 2 * LLM_CALL_USD, calls: 2 })
  })

  it('GET /costs sums only the caller\'s events, by agent, by model and by run, and filtered by the agent', async () => {
    const { a, b } = await twoTenants()
    const groups = async (key: string, query: string) => (await h.get(`/costs?${query}`, key)).json().groups
    expect(await groups(b.key, 'group_by=agent')).toEqual([{ group: { agent: AGENT }, cost_usd: B_CALL_USD, llm_calls: 1, input_tokens: 1000, output_tokens: 500, events: 2 }])
    expect(await groups(a.key, `group_by=model&agent_id=${AGENT}`)).toEqual([
      { group: { model: 'gpt-4o' }, cost_usd: 2 * LLM_CALL_USD, llm_calls: 2, input_tokens: 2000, output_tokens: 1000, events: 2 },
      { group: { model: null }, cost_usd: 0, llm_calls: 0, input_tokens: 0, output_tokens: 0, events: 1 },
    ])
    // B's agent_start opened a run (its event id); A has none.
    expect((await groups(b.key, 'group_by=run')).map((g: { group: { run: string | null } }) => g.group.run)).toEqual([null, b.eventIds[1]])
    expect((await groups(a.key, 'group_by=run')).map((g: { group: { run: string | null } }) => g.group.run)).toEqual([null])
  })
})

describe('one user\'s writes never change another user\'s agent of the same id', () => {
  it('B resuming "shared" leaves A paused (A\'s list and A\'s next event say paused)', async () => {
    const { a, b } = await twoTenants()
    const resume = await h.post('/config/pause', { agent_id: AGENT, is_paused: false }, b.key)
    expect(resume.json()).toEqual({ ok: true, agent_id: AGENT, is_paused: false })
    expect((await h.get('/agents', a.key)).json().agents[0].is_paused).toBe(true)
    expect((await send(a, llmCall(AGENT))).paused).toBe(true)
    expect((await send(b, llmCall(AGENT))).paused).toBe(false)
  })

  it('B pausing "shared" leaves A running, and A resuming leaves B paused', async () => {
    const { a, b } = await twoTenants()
    expect((await h.post('/config/pause', { agent_id: AGENT, is_paused: false }, a.key)).json().is_paused).toBe(false)
    expect((await h.post('/config/pause', { agent_id: AGENT, is_paused: true }, b.key)).json().is_paused).toBe(true)
    expect((await h.get('/agents', a.key)).json().agents[0].is_paused).toBe(false)
    expect((await send(a, llmCall(AGENT))).paused).toBe(false)
    expect((await h.get('/agents', b.key)).json().agents[0].is_paused).toBe(true)
    expect((await send(b, llmCall(AGENT))).paused).toBe(true)
  })

  it('B\'s POST /config does not change A\'s threshold or webhook', async () => {
    const { a, b } = await twoTenants()
    const bConfig = { agent_id: AGENT, cost_threshold_usd: 0.000001, slack_webhook_url: 'https://hooks.example.com/services/TBBBB/BBBBB/secretpathofuserb' }
    expect((await h.post('/config', bConfig, b.key)).statusCode).toBe(200)
    expect((await h.get('/agents', a.key)).json().agents[0].cost_threshold_usd).toBe(5)
    expect((await h.get(`/agents/${AGENT}`, a.key)).json().config).toEqual({
      cost_threshold_usd: 5,
      slack_webhook_url: 'https://hooks.example.com/…sera',
      auto_resume: false,
      alert_at: [0.8],
      velocity_limit_usd: null,
      velocity_window_minutes: 5,
      period_budgets: [],
      run_budget_usd: null,
    })
    expect((await h.get(`/agents/${AGENT}`, b.key)).json().config).toMatchObject({ cost_threshold_usd: 0.000001, slack_webhook_url: 'https://hooks.example.com/…serb' })
  })

  it('B\'s tiny threshold pauses B\'s agent only; A under its default budget keeps running', async () => {
    const a = await tenant()
    const b = await tenant()
    expect((await h.post('/config', { agent_id: AGENT, cost_threshold_usd: 0.001 }, b.key)).statusCode).toBe(200)
    expect((await send(a, llmCall(AGENT))).paused).toBe(false)
    expect((await send(b, llmCall(AGENT))).paused).toBe(true) // 0.0075 > 0.001
    expect((await send(a, llmCall(AGENT))).paused).toBe(false) // A: default 10 USD
    expect((await h.get('/agents', a.key)).json().agents[0]).toEqual({
      agent_id: AGENT,
      total_cost_usd: 2 * LLM_CALL_USD,
      llm_calls: 2,
      is_paused: false,
      paused_reason: null,
      paused_period: null,
      remaining_usd: left(10, 2 * LLM_CALL_USD),
      alerts_reached: [],
      ignoring_pause: false,
      periods: [],
    })
  })

  it('B\'s events never count in A\'s total_cost_24h', async () => {
    const a = await tenant()
    const b = await tenant()
    expect((await send(a, llmCall(AGENT))).total_cost_24h).toBe(LLM_CALL_USD)
    for (let i = 0; i < 5; i++) await send(b, llmCall(AGENT))
    const next = await send(a, llmCall(AGENT))
    expect(next).toMatchObject({ cost_usd: LLM_CALL_USD, total_cost_24h: 2 * LLM_CALL_USD })
    expect((await send(b, llmCall(AGENT))).total_cost_24h).toBeCloseTo(6 * LLM_CALL_USD, 12)
    expect((await h.get('/agents', a.key)).json().agents[0]).toMatchObject({ total_cost_usd: 2 * LLM_CALL_USD, llm_calls: 2 })
  })

  it('a client event_id another user already used does not make the caller\'s event a duplicate', async () => {
    const { a, b } = await twoTenants()
    const aEventId = a.eventIds[0]!
    const replay = await h.post('/events', llmCall(AGENT, { event_id: aEventId }), b.key)
    expect(replay.json()).toMatchObject({ ok: true, event_id: aEventId, cost_usd: LLM_CALL_USD, total_cost_24h: B_CALL_USD + LLM_CALL_USD })
    expect(replay.json().duplicate).toBeUndefined()
    expect((await h.get('/agents/events?limit=1000', a.key)).json().events).toHaveLength(3)
  })
})

describe('several keys of one user', () => {
  it('see the same data, and a write through one key is visible through the other', async () => {
    const user = unique('u')
    const k1 = await h.key(user)
    const k2 = await h.key(user)
    expect(k1).not.toBe(k2)
    const first = (await h.post('/events', llmCall(AGENT), k1)).json()
    const second = (await h.post('/events', llmCall(AGENT), k2)).json()
    expect(second.total_cost_24h).toBe(2 * LLM_CALL_USD) // one agent, one total across keys
    expect((await h.post('/config', { agent_id: AGENT, cost_threshold_usd: 7 }, k1)).statusCode).toBe(200)
    expect((await h.post('/config/pause', { agent_id: AGENT, is_paused: true }, k2)).statusCode).toBe(200)

    for (const path of ['/agents', '/agents/events', `/agents/${AGENT}`, `/agents/${AGENT}/hourly`]) {
      const r1 = await h.get(path, k1)
      const r2 = await h.get(path, k2)
      expect(r1.statusCode).toBe(200)
      expect(r2.json(), path).toEqual(r1.json())
    }
    expect((await h.get('/agents', k1)).json().agents).toEqual([
      { agent_id: AGENT, total_cost_usd: 2 * LLM_CALL_USD, llm_calls: 2, cost_threshold_usd: 7, is_paused: true, paused_reason: 'manual', remaining_usd: left(7, 2 * LLM_CALL_USD), alerts_reached: [], ignoring_pause: false, paused_period: null, periods: [] },
    ])
    expect((await h.get('/agents/events', k2)).json().events.map((e: { event_id: string }) => e.event_id)).toEqual([second.event_id, first.event_id])
  })

  it('treat a client event_id as one id across the user\'s keys (a retry through another key is a duplicate)', async () => {
    const user = unique('u')
    const k1 = await h.key(user)
    const k2 = await h.key(user)
    const event_id = randomUUID()
    const first = (await h.post('/events', llmCall(AGENT, { event_id }), k1)).json()
    const again = (await h.post('/events', llmCall(AGENT, { event_id }), k2)).json()
    expect(again).toMatchObject({ event_id, cost_usd: first.cost_usd, total_cost_24h: first.total_cost_24h, duplicate: true })
    expect((await h.get('/agents/events', k1)).json().events).toHaveLength(1)
  })
})
