import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, harnessAndReceiver, unique } from './helpers/harness.ts'

/**
 * Alerts before the pause, through the API: configured levels, the answer's
 * `alerts`, one chat message per crossing in its own wording, the listing's levels reached,
 * an audit record, and a restart that does not fire again. The rule itself runs against both
 * hot states in the contract suite; across two instances in test/multi-instance.test.ts.
 */
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
// The property below sends a few hundred configs.
const t = harnessAndReceiver({ clock, env: { CONFIG_RATE_LIMIT: '100000' } })

describe('alert levels', () => {
  it('answers the level an event crosses, sends one message in its own words, and lists the levels reached', async () => {
    const key = await t.h.key(unique('u'))
    const agent = unique('agent')
    // 4 calls reach 0.03 USD: 0.5 of 0.06 at the 4th, 0.75 at the 6th.
    await t.h.post('/config', { agent_id: agent, cost_threshold_usd: 0.06, slack_webhook_url: t.receiver.url, alert_at: [0.75, 0.5] }, key)
    const answers = []
    for (let i = 0; i < 7; i++) answers.push((await t.h.post('/events', llmCall(agent), key)).json())
    expect(answers.map((a) => a.alerts)).toEqual([[], [], [], [0.5], [], [0.75], []])
    await t.h.services.webhooks.drain()
    const mine = t.receiver.messages.filter((m) => m.text.includes(agent)).map((m) => m.text)
    expect(mine).toHaveLength(2)
    expect(mine[0]).toContain('reached 50 % of its daily budget: $0.03 of $0.06')
    expect(mine[0]).toContain('$0.03 left')
    // 0.03 USD in the last hour, 0.03 to go: one more hour at this rate.
    expect(mine[0]).toContain(`runs out at ${new Date(clock.now() + 3_600_000).toISOString().replace('.000', '')}`)
    expect(mine[1]).toContain('reached 75 %')
    const [row] = (await t.h.get('/agents', key)).json().agents
    expect(row.alerts_reached).toEqual([0.5, 0.75])
    expect((await t.h.get(`/agents/${agent}`, key)).json()).toMatchObject({ alerts_reached: [0.5, 0.75], config: { alert_at: [0.5, 0.75] } })
    const records = (await t.h.get(`/audit?agent_id=${agent}`, key)).json().records
    expect(records.filter((r: { action: string }) => r.action === 'alert').map((r: { details: unknown }) => r.details)).toEqual([
      { level: 0.75, total_cost_usd: 6 * LLM_CALL_USD, cost_threshold_usd: 0.06 },
      { level: 0.5, total_cost_usd: 4 * LLM_CALL_USD, cost_threshold_usd: 0.06 },
    ])
  })

  it('alerts at 0.8 by default, and never with alert_at []', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config', { agent_id: 'quiet', cost_threshold_usd: 0.01, alert_at: [] }, key)
    const a = (await t.h.post('/events', llmCall('default', { output_tokens: 50_000 }), key)).json() // 0.5025 of 10 USD: none
    expect(a.alerts).toEqual([])
    const b = (await t.h.post('/events', llmCall('default', { output_tokens: 800_000 }), key)).json() // 8.5 of 10
    expect(b.alerts).toEqual([0.8])
    expect((await t.h.post('/events', llmCall('quiet', { output_tokens: 5000 }), key)).json()).toMatchObject({ alerts: [], paused: true })
  })

  it('takes any list of alert levels the rule allows, stored in order, and refuses every other without a change (property)', async () => {
    const key = await t.h.key(unique('u'))
    let stored: number[] = [0.5]
    await t.h.post('/config', { agent_id: 'p', alert_at: stored }, key)
    const level = fc.oneof(
      fc.double({ min: 0, max: 1, noNaN: true }),
      fc.constantFrom(0, 1, -0.5, 1.5, 0.8, 0.5),
      fc.integer({ min: -2, max: 2 }),
    )
    await fc.assert(
      fc.asyncProperty(fc.array(level, { maxLength: 7 }), async (levels) => {
        const allowed = levels.length <= 5 && new Set(levels).size === levels.length && levels.every((l) => l > 0 && l < 1)
        const res = await t.h.post('/config', { agent_id: 'p', alert_at: levels }, key)
        expect(res.statusCode, JSON.stringify(levels)).toBe(allowed ? 200 : 400)
        if (allowed) stored = [...levels].sort((a, b) => a - b)
        else expect(res.json().errors.every((e: { field: string }) => e.field.startsWith('alert_at'))).toBe(true)
        expect((await t.h.get('/agents/p', key)).json().config.alert_at).toEqual(stored)
      }),
      { numRuns: 200 },
    )
  })

  it('refuses bad levels with a problem naming alert_at, and changes nothing', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config', { agent_id: 'a', alert_at: [0.5] }, key)
    for (const alertAt of [[1], [0], [-0.2], [0.5, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], '0.8', [null], [Number.MAX_VALUE]]) {
      const res = await t.h.post('/config', { agent_id: 'a', alert_at: alertAt }, key)
      expect(res.statusCode, JSON.stringify(alertAt)).toBe(400)
      expect(res.headers['content-type']).toContain('application/problem+json')
      expect(res.json().errors[0].field).toMatch(/^alert_at/)
    }
    expect((await t.h.get('/agents/a', key)).json().config.alert_at).toEqual([0.5])
  })
})
