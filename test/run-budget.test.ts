import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, startHarness, unique } from './helpers/harness.ts'
import { startReceiver } from './helpers/receiver.ts'

/**
 * A run's own budget through the API (embedded mode): POST /config run_budget_usd, the
 * answers of the run's events and holds, its chat message and audit record, and the run's
 * tally and stop over a restart, rebuilt from the stored runs and the journal's tail. The
 * rule itself runs against both hot states in the contract suite; two instances on Redis in
 * multi-instance.test.ts. A file of its own: chDB opens one data directory per process.
 */
describe('run budgets', () => {
  it('stop the run that goes over, answer its later events and holds so, tell the team once, and keep it over a restart', async () => {
    const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
    const receiver = await startReceiver()
    let h = await startHarness({ clock })
    try {
      const key = await h.key(unique('u'))
      const agent = unique('runner')
      // 0.02 USD: two calls of 0.0075 fit, the third goes over.
      expect((await h.post('/config', { agent_id: agent, run_budget_usd: 0.02, slack_webhook_url: receiver.url, alert_at: [] }, key)).statusCode).toBe(200)
      expect((await h.get(`/agents/${agent}`, key)).json().config).toMatchObject({ run_budget_usd: 0.02 })
      const call = (run: string, extra = {}) => h.post('/events', llmCall(agent, { run_id: run, ...extra }), key)
      for (let i = 0; i < 2; i++) expect((await call('r1')).json()).toMatchObject({ paused: false, paused_reason: null })
      // A hold for the run is held against it: room for 0.005 USD is left.
      const hold = (run: string, tokens: number) => h.post('/holds', { agent_id: agent, run_id: run, model: 'gpt-4o', input_tokens: tokens, max_output_tokens: 0 }, key)
      expect((await hold('r1', 2001)).json()).toMatchObject({ ok: true, reason: 'run_budget', paused: false, hold_id: null })
      expect((await hold('r1', 2000)).json()).toMatchObject({ ok: true, reason: null })
      // The third call, with the open hold, goes over: stopped, for good.
      const crossing = { event_id: randomUUID() }
      expect((await call('r1', crossing)).json()).toMatchObject({ paused: true, paused_reason: 'run_budget', paused_period: null })
      expect((await call('r1', crossing)).json()).toMatchObject({ paused: true, paused_reason: 'run_budget', duplicate: true })
      expect((await h.post('/events', { agent_id: agent, event_type: 'tool_call', tool_name: 'search', run_id: 'r1' }, key)).json()).toMatchObject({ paused: true, paused_reason: 'run_budget' })
      expect((await hold('r1', 1)).json()).toMatchObject({ reason: 'run_budget', paused: true, paused_reason: 'run_budget' })
      // Another run of the agent goes on, and the agent itself is not paused.
      expect((await call('r2')).json()).toMatchObject({ paused: false })
      expect((await h.get(`/agents/${agent}`, key)).json()).toMatchObject({ is_paused: false, paused_reason: null })

      expect(await h.services.metrics.registry.getSingleMetricAsString('burnrate_run_stops_total')).toMatch(/ 1$/m)
      await h.services.webhooks.drain()
      expect(receiver.messages.map((m) => m.text)).toEqual([
        `burnrate: run \`r1\` of agent \`${agent}\` was stopped by its run budget: it spent $0.0225, with $0.005 held for calls in flight, over its $0.02; the agent's other runs go on (2026-11-20T12:00:00Z).`,
      ])
      await h.flush()
      // The runs read shows which run its budget stopped, and when.
      const runs = (await h.get(`/agents/${agent}/runs`, key)).json().runs as Array<{ run_id: string; budget_stopped_at: string | null }>
      expect(Object.fromEntries(runs.map((r) => [r.run_id, r.budget_stopped_at]))).toEqual({ r1: new Date(clock.now()).toISOString(), r2: null })
      expect((await h.get('/runs/r1', key)).json()).toMatchObject({ budget_stopped_at: new Date(clock.now()).toISOString(), by_agent: [{ budget_stopped_at: new Date(clock.now()).toISOString() }] })
      const records = (await h.get(`/audit?agent_id=${agent}`, key)).json().records as Array<{ action: string }>
      expect(records.filter((r) => r.action === 'run_paused')).toEqual([
        expect.objectContaining({ reason: 'run_budget', actor: 'system', details: { run_id: 'r1', spent_usd: 3 * LLM_CALL_USD, held_usd: 0.005, run_budget_usd: 0.02 } }),
      ])

      // r2 spends on: its first call is stored, its second only in the journal, at the restart.
      await h.flush()
      clock.advance(60_000)
      await call('r2')
      await h.post('/events', { agent_id: agent, event_type: 'tool_call', tool_name: 'search', run_id: 'r1' }, key)
      const dataDir = h.dataDir
      await h.close()
      h = await startHarness({ clock, dataDir })
      expect((await call('r1')).json()).toMatchObject({ paused: true, paused_reason: 'run_budget' })
      // r2 holds two calls exactly (0.015 USD): room for 0.005 USD, not a token more.
      expect((await hold('r2', 2001)).json()).toMatchObject({ reason: 'run_budget', paused: false })
      expect((await hold('r2', 2000)).json()).toMatchObject({ reason: null })
      expect((await call('r2')).json()).toMatchObject({ paused: true, paused_reason: 'run_budget' })
      await h.services.webhooks.drain()
      expect(receiver.messages.filter((m) => m.text.includes('run `r2`'))).toHaveLength(1)
    } finally {
      await h.close()
      await receiver.close()
    }
  })

  it('refuses a run budget that is not a positive amount, and takes null to remove it', async () => {
    const h = await startHarness()
    try {
      const key = await h.key(unique('u'))
      for (const bad of [0, -1, 'ten', 2_000_000]) {
        const r = await h.post('/config', { agent_id: 'a', run_budget_usd: bad }, key)
        expect(r.statusCode).toBe(400)
        expect(r.json().errors[0].field).toBe('run_budget_usd')
      }
      expect((await h.post('/config/fleet', { cost_threshold_usd: 1, run_budget_usd: 1 }, key)).statusCode).toBe(400)
      await h.post('/config', { agent_id: 'a', run_budget_usd: 1 }, key)
      await h.post('/config', { agent_id: 'a', run_budget_usd: null }, key)
      expect((await h.get('/agents/a', key)).json().config.run_budget_usd).toBeNull()
    } finally {
      await h.close()
    }
  })
})
