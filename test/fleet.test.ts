import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, harnessAndReceiver, unique } from './helpers/harness.ts'

/**
 * The fleet budget through the API: POST /config/fleet, GET /fleet, the pause of
 * every agent of the user with its reason, POST /config/fleet/pause with the override rule,
 * one chat message per transition, audit records, bad input and tenancy. The rules run
 * against both hot states in the contract suite (test/hot-state/contract.test.ts).
 */
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
const t = harnessAndReceiver({ clock, env: { CONFIG_RATE_LIMIT: '100000' } })

const fleetOf = async (key: string) => (await t.h.get('/fleet', key)).json()

describe('the fleet budget', () => {
  it('shows the 24 h total of all the user\'s agents; without a config it has no budget', async () => {
    const key = await t.h.key(unique('u'))
    expect(await fleetOf(key)).toEqual({
      total_cost_usd: 0,
      llm_calls: 0,
      cost_threshold_usd: null,
      remaining_usd: null,
      held_usd: 0,
      projected_exhaustion_at: null,
      is_paused: false,
      paused_reason: null,
      paused_period: null,
      paused_at: null,
      override: false,
      alerts_reached: [],
      periods: [],
      config: null,
    })
    for (const agent of ['a', 'b', 'b']) await t.h.post('/events', llmCall(agent), key)
    await t.h.post('/events', { agent_id: 'c', event_type: 'tool_call', tool_name: 'search' }, key)
    expect(await fleetOf(key)).toMatchObject({ total_cost_usd: 3 * LLM_CALL_USD, llm_calls: 3, cost_threshold_usd: null, remaining_usd: null, projected_exhaustion_at: null })
    // 0.0225 spent in the last hour, 0.0675 left of 0.09: three hours at that rate, long before any of it leaves the window.
    await t.h.post('/config/fleet', { cost_threshold_usd: 0.09 }, key)
    expect(await fleetOf(key)).toMatchObject({
      cost_threshold_usd: 0.09,
      remaining_usd: 0.0675,
      projected_exhaustion_at: new Date(clock.now() + 3 * 3_600_000).toISOString(),
      alerts_reached: [],
      config: { cost_threshold_usd: 0.09, slack_webhook_url: null, auto_resume: false, alert_at: [0.8], velocity_limit_usd: null, velocity_window_minutes: 5, period_budgets: [], run_budget_usd: null },
    })
  })

  it('over its budget pauses every agent of the user, says why, and sends one message for the transition', async () => {
    const user = unique('u')
    const key = await t.h.key(user)
    const other = await t.h.key(unique('other'))
    // 0.02 USD: the third call (0.0225) goes over it.
    expect((await t.h.post('/config/fleet', { cost_threshold_usd: 0.02, chat_webhook_url: t.receiver.url, alert_at: [] }, key)).json()).toEqual({ ok: true })
    const answers = []
    for (const agent of ['a', 'b', 'c', 'd']) answers.push((await t.h.post('/events', llmCall(agent), key)).json())
    expect(answers.map((a) => [a.paused, a.paused_reason])).toEqual([
      [false, null],
      [false, null],
      [true, 'fleet_budget'],
      [true, 'fleet_budget'],
    ])
    // What is left is the agent's own; the fleet's is in GET /fleet.
    expect(answers[2]).toMatchObject({ total_cost_24h: LLM_CALL_USD, remaining_usd: 10 - LLM_CALL_USD })
    expect((await t.h.post('/events', llmCall('a'), other)).json()).toMatchObject({ paused: false, paused_reason: null })

    expect(await fleetOf(key)).toMatchObject({
      total_cost_usd: 4 * LLM_CALL_USD,
      cost_threshold_usd: 0.02,
      remaining_usd: -0.01, // 0.02 - 0.03, exact in nano-USD
      projected_exhaustion_at: new Date(clock.now()).toISOString(), // over it already: now
      is_paused: true,
      paused_reason: 'fleet_budget',
    })
    const rows = (await t.h.get('/agents', key)).json().agents
    expect(rows.map((r: { is_paused: boolean; paused_reason: string }) => [r.is_paused, r.paused_reason])).toEqual(Array(4).fill([true, 'fleet_budget']))
    // When the pause that holds began: the fleet's, at the third call.
    const pausedAt = new Date(clock.now()).toISOString()
    expect((await t.h.get('/agents/a', key)).json()).toMatchObject({ is_paused: true, paused_reason: 'fleet_budget', paused_at: pausedAt })
    expect((await fleetOf(key)).paused_at).toBe(pausedAt)

    await t.h.services.webhooks.drain()
    const mine = t.receiver.messages.filter((m) => m.text.includes(user)).map((m) => m.text)
    expect(mine).toEqual([expect.stringContaining(`burnrate paused every agent of user \`${user}\`: the fleet's 24 h spend $0.0225 exceeded its daily budget of $0.02`)])
    const audit = (await t.h.get('/audit?scope=fleet', key)).json().records
    expect(audit.map((r: { agent_id: null; scope: string; action: string; reason: string; actor: string }) => [r.agent_id, r.scope, r.action, r.reason, r.actor])).toEqual([
      [null, 'fleet', 'pause', 'budget', 'system'],
      [null, 'fleet', 'config', 'config_set', key.split('_')[1]], // the key id of the request
    ])
    expect(audit[0].details).toEqual({ total_cost_usd: 3 * LLM_CALL_USD, override: false })
  })

  it('pauses and resumes the fleet by hand; an agent\'s own pause holds through it; a resume over budget overrides', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config/fleet', { cost_threshold_usd: 0.01, alert_at: [] }, key)
    expect((await t.h.post('/config/fleet/pause', { is_paused: true }, key)).json()).toEqual({ ok: true, is_paused: true })
    await t.h.post('/config/pause', { agent_id: 'own', is_paused: true }, key)
    expect((await t.h.post('/events', llmCall('a'), key)).json()).toMatchObject({ paused: true, paused_reason: 'fleet_manual' })
    expect((await t.h.post('/events', llmCall('own'), key)).json()).toMatchObject({ paused: true, paused_reason: 'manual' })
    // 0.015 of 0.01: over budget, resumed by hand, it runs on (the override) until the total falls back.
    expect((await t.h.post('/config/fleet/pause', { is_paused: false }, key)).json()).toEqual({ ok: true, is_paused: false })
    expect(await fleetOf(key)).toMatchObject({ is_paused: false, paused_reason: null, override: true })
    expect((await t.h.post('/events', llmCall('a'), key)).json()).toMatchObject({ paused: false, paused_reason: null })
    expect((await t.h.post('/events', llmCall('own'), key)).json()).toMatchObject({ paused: true, paused_reason: 'manual' })
    const audit = (await t.h.get('/audit?scope=fleet', key)).json().records
    expect(audit.map((r: { action: string; reason: string; details: { override?: boolean } }) => [r.action, r.reason, r.details.override])).toEqual([
      ['resume', 'manual', true],
      ['pause', 'manual', false],
      ['config', 'config_set', undefined],
    ])
    // The agent's own pause is the agent's record, not the fleet's.
    expect((await t.h.get('/audit?scope=agent', key)).json().records.map((r: { agent_id: string; action: string }) => [r.agent_id, r.action])).toEqual([['own', 'pause']])
  })

  it('fires the fleet\'s alert levels once per crossing, in their own words', async () => {
    const user = unique('u')
    const key = await t.h.key(user)
    await t.h.post('/config/fleet', { cost_threshold_usd: 0.04, slack_webhook_url: t.receiver.url, alert_at: [0.5] }, key)
    const answers = []
    for (const agent of ['a', 'b', 'c', 'd']) answers.push((await t.h.post('/events', llmCall(agent), key)).json())
    // 0.5 of the fleet's 0.04 at the third call, in the answer's fleet_alerts; `alerts` are the agent's own.
    expect(answers.map((a) => a.fleet_alerts)).toEqual([[], [], [0.5], []])
    expect(answers.map((a) => a.alerts)).toEqual([[], [], [], []])
    expect((await fleetOf(key)).alerts_reached).toEqual([0.5])
    await t.h.services.webhooks.drain()
    const mine = t.receiver.messages.filter((m) => m.text.includes(user)).map((m) => m.text)
    expect(mine).toEqual([expect.stringContaining(`burnrate: the fleet of user \`${user}\` reached 50 % of its daily budget: $0.0225 of $0.04`)])
  })

  it('keeps omitted fields on a change, and refuses bad input with a problem naming the field, changing nothing', async () => {
    const key = await t.h.key(unique('u'))
    const first = await t.h.post('/config/fleet', { alert_at: [0.5] }, key)
    expect(first.statusCode).toBe(400)
    expect(first.json().errors).toEqual([{ field: 'cost_threshold_usd', message: "is required in a fleet's first config" }])
    expect((await fleetOf(key)).config).toBeNull()
    await t.h.post('/config/fleet', { cost_threshold_usd: 5, auto_resume: true }, key)
    await t.h.post('/config/fleet', { alert_at: [0.9, 0.5] }, key)
    const config = { cost_threshold_usd: 5, slack_webhook_url: null, auto_resume: true, alert_at: [0.5, 0.9], velocity_limit_usd: null, velocity_window_minutes: 5, period_budgets: [], run_budget_usd: null }
    expect((await fleetOf(key)).config).toEqual(config)
    const bad: Array<[unknown, string]> = [
      [{ cost_threshold_usd: 5, agent_id: 'a' }, 'agent_id'], // an agent's field: unknown here
      [{ cost_threshold_usd: -1 }, 'cost_threshold_usd'],
      [{ cost_threshold_usd: '5' }, 'cost_threshold_usd'],
      [{ alert_at: [1] }, 'alert_at.0'],
      [{ alert_at: [0.5, 0.5] }, 'alert_at'],
      [{ slack_webhook_url: 'ftp://x' }, 'slack_webhook_url'],
      [{ slack_webhook_url: t.receiver.url, chat_webhook_url: 'https://example.com/x' }, 'chat_webhook_url'],
      [[], '(body)'],
    ]
    for (const [body, field] of bad) {
      const res = await t.h.post('/config/fleet', body, key)
      expect(res.statusCode, JSON.stringify(body)).toBe(400)
      expect(res.headers['content-type']).toContain('application/problem+json')
      expect(res.json().errors[0].field, JSON.stringify(body)).toBe(field)
    }
    for (const body of [{}, { is_paused: 'yes' }, { is_paused: true, agent_id: 'a' }]) {
      expect((await t.h.post('/config/fleet/pause', body, key)).statusCode, JSON.stringify(body)).toBe(400)
    }
    expect(await fleetOf(key)).toMatchObject({ config, is_paused: false })
    expect((await t.h.get('/fleet?x=1', key)).statusCode).toBe(400)
    expect((await t.h.get('/fleet', null)).statusCode).toBe(401)
  })

  it('takes any budget the rules allow and refuses every other without a change (property)', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config/fleet', { cost_threshold_usd: 1 }, key)
    let stored = 1
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.double({ min: -10, max: 2_000_000, noNaN: true }), fc.constantFrom(0, 1_000_000, 1_000_000.5, -0)), async (usd) => {
        const ok = usd >= 0 && usd <= 1_000_000
        const res = await t.h.post('/config/fleet', { cost_threshold_usd: usd }, key)
        expect(res.statusCode, String(usd)).toBe(ok ? 200 : 400)
        if (ok) stored = (await fleetOf(key)).config.cost_threshold_usd
        expect((await fleetOf(key)).config.cost_threshold_usd).toBe(stored)
      }),
      { numRuns: 60 },
    )
  })

  it('is one user\'s alone: another user can neither see nor change it', async () => {
    const alice = await t.h.key(unique('alice'))
    const bob = await t.h.key(unique('bob'))
    await t.h.post('/config/fleet', { cost_threshold_usd: 0.001 }, alice)
    await t.h.post('/events', llmCall('a'), alice)
    await t.h.post('/config/fleet/pause', { is_paused: true }, bob)
    expect(await fleetOf(alice)).toMatchObject({ total_cost_usd: LLM_CALL_USD, is_paused: true, paused_reason: 'fleet_budget' })
    expect(await fleetOf(bob)).toMatchObject({ total_cost_usd: 0, is_paused: true, paused_reason: 'fleet_manual', config: null })
    await t.h.post('/config/fleet/pause', { is_paused: false }, bob)
    expect((await fleetOf(alice)).is_paused).toBe(true)
    expect((await t.h.get('/audit?scope=fleet', bob)).json().records).toHaveLength(2)
    expect((await t.h.get('/audit?scope=fleet', alice)).json().records.map((r: { action: string }) => r.action)).toEqual(['alert', 'pause', 'config'])
    expect((await t.h.get('/audit?scope=team', alice)).statusCode).toBe(400)
  })
})
