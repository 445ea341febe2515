import { randomUUID } from 'node:crypto'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, harnessAndReceiver, unique } from './helpers/harness.ts'

/**
 * Budget holds through the API, with the clock passed in. The rules run against
 * both hot states in the contract suite (test/hot-state/contract.test.ts); two instances
 * granting holds of one agent at once are in multi-instance.test.ts.
 */
const clock = new ManualClock(Date.UTC(2026, 10, 24, 12, 0, 0))
const t = harnessAndReceiver({ clock, env: { CONFIG_RATE_LIMIT: '100000' } })

/** gpt-4o at 2.5 / 10 USD per 1M tokens: 1000 in and at most 1000 out is 0.0125 USD at worst. */
const ask = (agentId: string, extra: Record<string, unknown> = {}) => ({ agent_id: agentId, model: 'gpt-4o', input_tokens: 1000, max_output_tokens: 1000, ...extra })
const WORST_USD = 0.0125

const held = async (agentId: string, key: string) => (await t.h.get(`/agents/${agentId}`, key)).json().held_usd as number

describe('budget holds', () => {
  it('grants the worst case within the budget, counts it against the next hold, and refuses what would pass it, holding nothing', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config', { agent_id: 'x', cost_threshold_usd: 0.03, alert_at: [] }, key)
    const first = await t.h.post('/holds', ask('x'), key)
    expect(first.statusCode).toBe(200)
    expect(first.json()).toEqual({
      ok: true,
      allowed: true,
      reason: null,
      hold_id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/),
      held_usd: WORST_USD,
      worst_case_usd: WORST_USD,
      remaining_usd: 0.0175,
      expires_at: new Date(clock.now() + 300_000).toISOString(),
      paused: false,
      paused_reason: null,
      paused_period: null,
    })
    expect((await t.h.post('/holds', ask('x'), key)).json()).toMatchObject({ allowed: true, remaining_usd: 0.005 })
    expect((await t.h.post('/holds', ask('x'), key)).json()).toEqual({
      ok: true,
      allowed: false,
      reason: 'budget',
      hold_id: null,
      held_usd: 0,
      worst_case_usd: WORST_USD,
      remaining_usd: 0.005,
      expires_at: null,
      paused: false,
      paused_reason: null,
      paused_period: null,
    })
    expect(await held('x', key)).toBe(2 * WORST_USD)
    const metrics = await t.h.services.metrics.registry.getSingleMetricAsString('burnrate_holds_total')
    expect(metrics).toMatch(/burnrate_holds_total\{result="granted"\} [1-9]/)
    expect(metrics).toMatch(/burnrate_holds_total\{result="budget"\} [1-9]/)
  })

  it('settles a hold with the llm_call that names it: released and the real cost counted, once under retries', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config', { agent_id: 'x', cost_threshold_usd: 0.03, alert_at: [] }, key)
    const { hold_id } = (await t.h.post('/holds', ask('x'), key)).json()
    await t.h.post('/holds', ask('x'), key)
    const call = llmCall('x', { event_id: randomUUID(), hold_id })
    const settled = await t.h.post('/events', call, key)
    expect(settled.json()).toMatchObject({ ok: true, cost_usd: LLM_CALL_USD, total_cost_24h: LLM_CALL_USD })
    expect(await held('x', key)).toBe(WORST_USD)
    for (let i = 0; i < 3; i++) expect((await t.h.post('/events', call, key)).json()).toMatchObject({ duplicate: true, total_cost_24h: LLM_CALL_USD })
    expect(await held('x', key)).toBe(WORST_USD)
    // Spent 0.0075 and 0.0125 held: another worst case of 0.0125 would pass the 0.03 budget.
    expect((await t.h.post('/holds', ask('x'), key)).json()).toMatchObject({ allowed: false, reason: 'budget', remaining_usd: 0.01 })
    // A hold never granted, expired or settled is no error: the event is the spend, and it counts.
    expect((await t.h.post('/events', llmCall('x', { hold_id: randomUUID() }), key)).json()).toMatchObject({ ok: true, total_cost_24h: 2 * LLM_CALL_USD })
    expect((await t.h.post('/events', llmCall('x', { hold_id }), key)).json()).toMatchObject({ ok: true, total_cost_24h: 3 * LLM_CALL_USD })
    expect(await held('x', key)).toBe(WORST_USD)
  })

  it('takes the client\'s hold_id, so a retry whose answer was lost is the same hold, held once', async () => {
    const key = await t.h.key(unique('u'))
    const hold_id = randomUUID()
    const first = (await t.h.post('/holds', ask('x', { hold_id }), key)).json()
    const again = (await t.h.post('/holds', ask('x', { hold_id: hold_id.toUpperCase() }), key)).json()
    expect(first).toMatchObject({ allowed: true, hold_id })
    expect(again).toEqual(first)
    expect(await held('x', key)).toBe(WORST_USD)
    const other = await t.h.post('/holds', ask('y', { hold_id }), key)
    expect(other.statusCode).toBe(404)
    expect(other.json()).toMatchObject({ code: 'hold_not_found', errors: [{ field: 'hold_id' }] })
    expect((await t.h.post('/holds', ask('x', { hold_id: 'not-a-uuid' }), key)).json().errors).toEqual([expect.objectContaining({ field: 'hold_id' })])
  })

  it('releases a hold at its expiry and not before, and DELETE releases one early for its own user only', async () => {
    const user = unique('u')
    const key = await t.h.key(user)
    const other = await t.h.key(unique('u'))
    await t.h.post('/events', { agent_id: 'x', event_type: 'agent_start' }, key)
    await t.h.post('/holds', ask('x', { ttl_seconds: 60 }), key)
    clock.advance(59_999)
    expect(await held('x', key)).toBe(WORST_USD)
    clock.advance(1)
    expect(await held('x', key)).toBe(0)
    expect((await t.h.get('/fleet', key)).json().held_usd).toBe(0)

    const { hold_id } = (await t.h.post('/holds', ask('x'), key)).json()
    const foreign = await t.h.app.inject({ method: 'DELETE', url: `/holds/${hold_id}`, headers: { 'x-api-key': other } })
    expect(foreign.statusCode).toBe(404)
    expect(foreign.headers['content-type']).toContain('application/problem+json')
    expect(foreign.json()).toMatchObject({ code: 'hold_not_found' })
    expect(await held('x', key)).toBe(WORST_USD)
    const del = await t.h.app.inject({ method: 'DELETE', url: `/holds/${hold_id}`, headers: { 'x-api-key': key } })
    expect(del.json()).toEqual({ ok: true, hold_id, agent_id: 'x', released_usd: WORST_USD })
    expect(await held('x', key)).toBe(0)
    expect((await t.h.app.inject({ method: 'DELETE', url: `/holds/${hold_id}`, headers: { 'x-api-key': key } })).statusCode).toBe(404)
    const bad = await t.h.app.inject({ method: 'DELETE', url: '/holds/not-a-hold', headers: { 'x-api-key': key } })
    expect(bad.statusCode).toBe(400)
    expect(bad.json().errors).toEqual([expect.objectContaining({ field: 'hold_id' })])
  })

  it('refuses a hold while the agent or its fleet is paused, and past the fleet\'s budget', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config/pause', { agent_id: 'x', is_paused: true }, key)
    expect((await t.h.post('/holds', ask('x'), key)).json()).toMatchObject({ allowed: false, reason: 'paused', paused: true, paused_reason: 'manual', hold_id: null })
    await t.h.post('/config/pause', { agent_id: 'x', is_paused: false }, key)
    await t.h.post('/config/fleet/pause', { is_paused: true }, key)
    expect((await t.h.post('/holds', ask('y'), key)).json()).toMatchObject({ allowed: false, reason: 'paused', paused_reason: 'fleet_manual' })
    await t.h.post('/config/fleet/pause', { is_paused: false }, key)
    await t.h.post('/config/fleet', { cost_threshold_usd: 0.02 }, key)
    expect((await t.h.post('/holds', ask('x'), key)).json()).toMatchObject({ allowed: true, remaining_usd: 0.0075 })
    expect((await t.h.post('/holds', ask('y'), key)).json()).toMatchObject({ allowed: false, reason: 'fleet_budget', remaining_usd: 0.0075 })
    // Nothing held, no event, no config: no such agent.
    expect((await t.h.get('/agents/y', key)).statusCode).toBe(404)
    expect((await t.h.get('/fleet', key)).json().held_usd).toBe(WORST_USD)
  })

  it('counts open holds with the spend for a crossing, and says so in the pause message', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config', { agent_id: 'x', cost_threshold_usd: 0.009, alert_at: [], slack_webhook_url: t.receiver.url }, key)
    // 1000 input tokens and no output: 0.0025 held, then 0.0075 spent is 0.01, over 0.009.
    expect((await t.h.post('/holds', ask('x', { max_output_tokens: 0 }), key)).json()).toMatchObject({ allowed: true, held_usd: 0.0025 })
    expect((await t.h.post('/events', llmCall('x'), key)).json()).toMatchObject({ paused: true, paused_reason: 'budget', total_cost_24h: LLM_CALL_USD })
    await t.h.services.webhooks.drain()
    const text = t.receiver.messages.map((m) => m.text).find((m) => m.includes('`x`') && m.includes('held'))
    expect(text).toContain('burnrate paused agent `x`: its 24 h spend $0.0075 and $0.0025 held for calls in flight exceeded its daily budget of $0.009')
  })

  it('an llm_call naming an open hold of another agent is a 404 and stores nothing', async () => {
    const key = await t.h.key(unique('u'))
    const { hold_id } = (await t.h.post('/holds', ask('x'), key)).json()
    const res = await t.h.post('/events', llmCall('y', { hold_id }), key)
    expect(res.statusCode).toBe(404)
    expect(res.json()).toMatchObject({ code: 'hold_not_found', errors: [{ field: 'hold_id' }] })
    expect((await t.h.get('/agents/y', key)).statusCode).toBe(404)
    expect(await held('x', key)).toBe(WORST_USD)
    // hold_id belongs to llm_calls only.
    const tool = await t.h.post('/events', { agent_id: 'x', event_type: 'tool_call', tool_name: 'search', hold_id }, key)
    expect(tool.statusCode).toBe(400)
    expect(tool.json().errors).toEqual([expect.objectContaining({ field: 'hold_id' })])
  })

  it('refuses a malformed hold with a problem naming the field, holding nothing (property)', async () => {
    const key = await t.h.key(unique('u'))
    const faults: Array<[string, Record<string, unknown>]> = [
      ['agent_id', { agent_id: '' }],
      ['agent_id', { agent_id: 'a'.repeat(129) }],
      ['model', { model: '' }],
      ['model', { model: 42 }],
      ['input_tokens', { input_tokens: -1 }],
      ['input_tokens', { input_tokens: 1.5 }],
      ['max_output_tokens', { max_output_tokens: '1000' }],
      ['max_output_tokens', { max_output_tokens: 1e12 }],
      ['ttl_seconds', { ttl_seconds: 0 }],
      ['ttl_seconds', { ttl_seconds: 3601 }],
      ['ttl_seconds', { ttl_seconds: 2.5 }],
      ['surprise', { surprise: true }],
    ]
    await fc.assert(
      fc.asyncProperty(fc.subarray(faults, { minLength: 1 }), async (chosen) => {
        const body: Record<string, unknown> = ask('x')
        for (const [, fault] of chosen) Object.assign(body, fault)
        // A later fault of the same field replaces an earlier one: the field is named either way.
        const res = await t.h.post('/holds', body, key)
        expect(res.statusCode, JSON.stringify(body)).toBe(400)
        const fields = new Set(res.json().errors.map((e: { field: string }) => e.field))
        for (const [field] of chosen) expect(fields.has(field), `${field} in ${JSON.stringify([...fields])}`).toBe(true)
      }),
      { numRuns: 60 },
    )
    for (const field of ['agent_id', 'model', 'input_tokens', 'max_output_tokens']) {
      const body: Record<string, unknown> = ask('x')
      delete body[field]
      const res = await t.h.post('/holds', body, key)
      expect(res.statusCode).toBe(400)
      expect(res.json().errors).toEqual([expect.objectContaining({ field })])
    }
    expect((await t.h.get('/fleet', key)).json().held_usd).toBe(0)
    expect((await t.h.post('/holds', ask('x', { ttl_seconds: 3600 }), key)).json()).toMatchObject({ allowed: true, expires_at: new Date(clock.now() + 3_600_000).toISOString() })
  })
})
