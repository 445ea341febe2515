import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, harnessAndReceiver, unique } from './helpers/harness.ts'

/**
 * Agents that ignore their pause, through the API, with the clock passed in:
 * flagged after the grace period and not before, with the calls and spend since, one chat
 * message, one audit record, a metric; cleared on resume. The events are still stored and
 * counted. The rule runs against both hot states in the contract suite.
 */
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
const t = harnessAndReceiver({ clock, env: { PAUSE_GRACE_MS: '30000' } })

const flagOf = async (key: string, agent: string) => {
  const rows = (await t.h.get('/agents', key)).json().agents as Array<{ agent_id: string; ignoring_pause: boolean }>
  return rows.find((r) => r.agent_id === agent)!.ignoring_pause
}

describe('agents that ignore their pause', () => {
  it('flags an agent whose llm_calls keep coming after the grace period, once, and clears the flag on resume', async () => {
    const user = unique('u')
    const key = await t.h.key(user)
    const agent = unique('deaf')
    await t.h.post('/config', { agent_id: agent, cost_threshold_usd: 0.01, slack_webhook_url: t.receiver.url, alert_at: [] }, key)
    await t.h.post('/events', llmCall(agent), key)
    expect((await t.h.post('/events', llmCall(agent), key)).json().paused).toBe(true) // paused now
    const pausedAt = clock.now()
    const before = await t.h.services.metrics.registry.getSingleMetricAsString('burnrate_ignored_pauses_total')

    // Within the grace period (PAUSE_GRACE_MS, 30 s here): a call that was in flight.
    clock.advance(30_000)
    await t.h.post('/events', llmCall(agent), key)
    expect(await flagOf(key, agent)).toBe(false)
    // After it: flagged, with what came since; the events are still counted.
    clock.advance(1)
    for (let i = 0; i < 2; i++) expect((await t.h.post('/events', llmCall(agent), key)).json().paused).toBe(true)
    expect(await flagOf(key, agent)).toBe(true)
    expect((await t.h.get(`/agents/${agent}`, key)).json()).toMatchObject({
      llm_calls: 5,
      is_paused: true,
      paused_at: new Date(pausedAt).toISOString(),
      ignoring_pause: true,
      ignored_calls: 2,
      ignored_usd: 2 * LLM_CALL_USD,
    })
    await t.h.services.webhooks.drain()
    const mine = t.receiver.messages.filter((m) => m.text.includes(agent)).map((m) => m.text)
    expect(mine.filter((m) => m.includes('keeps calling the model'))).toEqual([
      expect.stringContaining(`after it was paused at ${new Date(pausedAt).toISOString().replace('.000', '')}: 1 call ($0.0075) after the grace period`),
    ])
    const records = (await t.h.get(`/audit?agent_id=${agent}`, key)).json().records
    expect(records.filter((r: { action: string }) => r.action === 'ignoring_pause')).toEqual([
      expect.objectContaining({ reason: 'calls_after_pause', actor: 'system', details: { paused_at: new Date(pausedAt).toISOString(), calls: 1, spent_usd: LLM_CALL_USD } }),
    ])
    const after = await t.h.services.metrics.registry.getSingleMetricAsString('burnrate_ignored_pauses_total')
    expect(Number(after.trim().split(' ').at(-1)) - Number(before.trim().split(' ').at(-1))).toBe(1)

    // Resumed by hand: the flag is gone at once.
    await t.h.post('/config/pause', { agent_id: agent, is_paused: false }, key)
    expect(await flagOf(key, agent)).toBe(false)
    expect((await t.h.get(`/agents/${agent}`, key)).json()).toMatchObject({ ignoring_pause: false, ignored_calls: 0, ignored_usd: 0 })
  })
})
