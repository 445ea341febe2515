import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'
import { startReceiver, type Receiver } from './helpers/receiver.ts'

const DAY_MS = 24 * 60 * 60 * 1000
const clock = new ManualClock(Date.now())
let h: Harness
let receiver: Receiver

beforeAll(async () => {
  h = await startHarness({ clock })
  receiver = await startReceiver()
})
afterAll(async () => {
  await h.close()
  await receiver.close()
})

/** A user with one agent configured at `threshold` USD, reporting to the receiver. */
async function agentWithBudget(threshold: number, extra: Record<string, unknown> = {}) {
  const key = await h.key(unique('u'))
  const agent = unique('agent')
  const res = await h.post('/config', { agent_id: agent, cost_threshold_usd: threshold, slack_webhook_url: receiver.url, ...extra }, key)
  expect(res.json()).toEqual({ ok: true })
  const send = async () => (await h.post('/events', llmCall(agent), key)).json()
  const pause = async (is_paused: boolean) => (await h.post('/config/pause', { agent_id: agent, is_paused }, key)).json()
  const listed = async () => (await h.get('/agents', key)).json().agents.find((a: { agent_id: string }) => a.agent_id === agent)
  // Pause messages (alert levels send their own: test/alerts.test.ts).
  const messages = () => receiver.messages.filter((m) => m.text.includes(agent) && m.text.includes('paused agent'))
  return { key, agent, send, pause, listed, messages }
}

describe('auto-pause on crossing the budget', () => {
  it('pauses on the event that takes the total strictly above the threshold', async () => {
    const a = await agentWithBudget(2 * LLM_CALL_USD) // 0.015
    expect(await a.send()).toMatchObject({ paused: false, total_cost_24h: 0.0075 })
    expect(await a.send()).toMatchObject({ paused: false, total_cost_24h: 0.015 }) // equal: not above
    expect(await a.send()).toMatchObject({ ok: true, paused: true, total_cost_24h: 0.0225 })
    expect(await a.listed()).toMatchObject({ is_paused: true, cost_threshold_usd: 0.015, llm_calls: 3 })
  })

  it('accepts, stores and counts events of a paused agent, answering paused: true', async () => {
    const a = await agentWithBudget(LLM_CALL_USD / 2)
    expect((await a.send()).paused).toBe(true)
    expect(await a.send()).toMatchObject({ ok: true, paused: true, cost_usd: LLM_CALL_USD, total_cost_24h: 2 * LLM_CALL_USD })
    expect(await a.listed()).toMatchObject({ llm_calls: 2, total_cost_usd: 2 * LLM_CALL_USD })
  })

  it('uses the default threshold of 10 USD for an agent with no config', async () => {
    const key = await h.key(unique('u'))
    // 4,000,000 gpt-4o input tokens cost exactly 10 USD: at the threshold, not above it.
    const atBudget = await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 4_000_000 }, key)
    expect(atBudget.json()).toMatchObject({ paused: false, total_cost_24h: 10 })
    const over = await h.post('/events', { agent_id: 'a', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1 }, key)
    expect(over.json().paused).toBe(true)
    const listed = (await h.get('/agents', key)).json().agents[0]
    expect(listed.cost_threshold_usd).toBeUndefined() // present only if set
  })

  it('sends exactly one chat message per budget pause, naming the agent, total and threshold', async () => {
    const a = await agentWithBudget(LLM_CALL_USD / 2)
    // Concurrent events racing over the threshold: one transition, one message.
    const replies = await Promise.all(Array.from({ length: 10 }, () => a.send()))
    expect(replies.filter((r) => r.paused)).toHaveLength(10)
    await h.services.webhooks.drain()
    expect(a.messages()).toHaveLength(1)
    // The first event of the batch crossed: its total, then the threshold.
    expect(a.messages()[0]!.text).toContain(a.agent)
    expect(a.messages()[0]!.text).toMatch(/\$0\.0075\b.*\$0\.00375\b/)
    await a.send()
    await h.services.webhooks.drain()
    expect(a.messages()).toHaveLength(1)
  })
})

describe('manual pause and resume', () => {
  it('pauses a running agent under budget, echoing agent_id and is_paused, without a chat message', async () => {
    const a = await agentWithBudget(100)
    await a.send()
    expect(await a.pause(true)).toEqual({ ok: true, agent_id: a.agent, is_paused: true })
    expect((await a.send()).paused).toBe(true)
    expect((await a.listed()).is_paused).toBe(true)
    await h.services.webhooks.drain()
    expect(a.messages()).toHaveLength(0)
  })

  it('answers ok and changes nothing when is_paused equals the current state', async () => {
    const a = await agentWithBudget(100)
    expect(await a.pause(false)).toEqual({ ok: true, agent_id: a.agent, is_paused: false })
    await a.pause(true)
    expect(await a.pause(true)).toEqual({ ok: true, agent_id: a.agent, is_paused: true })
    expect((await a.send()).paused).toBe(true)
  })

  it('can pause an agent that has sent nothing yet', async () => {
    const a = await agentWithBudget(100)
    await a.pause(true)
    expect((await a.send()).paused).toBe(true)
  })

  it('resuming an agent over budget lets it run until its total is back under the threshold', async () => {
    const a = await agentWithBudget(LLM_CALL_USD / 2)
    expect((await a.send()).paused).toBe(true)
    expect(await a.pause(false)).toMatchObject({ is_paused: false })
    // Still over budget, but the operator's resume overrides the threshold.
    expect(await a.send()).toMatchObject({ paused: false, total_cost_24h: 2 * LLM_CALL_USD })
    expect((await a.listed()).is_paused).toBe(false)
    await h.services.webhooks.drain()
    expect(a.messages()).toHaveLength(1)

    // A day later the window is empty: the override has ended, so a new crossing pauses again.
    clock.advance(DAY_MS)
    expect(await a.send()).toMatchObject({ paused: true, total_cost_24h: LLM_CALL_USD })
    await h.services.webhooks.drain()
    expect(a.messages()).toHaveLength(2)
  })

  it('changing the threshold ends a manual override', async () => {
    const a = await agentWithBudget(LLM_CALL_USD / 2)
    await a.send()
    await a.pause(false)
    expect((await a.send()).paused).toBe(false)
    await h.post('/config', { agent_id: a.agent, cost_threshold_usd: LLM_CALL_USD }, a.key)
    expect((await a.send()).paused).toBe(true)
  })

  it('a manual pause holds even with auto_resume once the total is back under budget', async () => {
    const a = await agentWithBudget(100, { auto_resume: true })
    await a.send()
    await a.pause(true)
    clock.advance(DAY_MS)
    expect((await a.send()).paused).toBe(true)
  })
})

describe('auto-resume (off by default)', () => {
  it('stays paused after the window empties when auto_resume is off', async () => {
    const a = await agentWithBudget(LLM_CALL_USD / 2)
    expect((await a.send()).paused).toBe(true)
    clock.advance(DAY_MS)
    expect(await a.send()).toMatchObject({ paused: true, total_cost_24h: LLM_CALL_USD })
  })

  it('runs again once the rolling total is at or below the threshold when auto_resume is on', async () => {
    const a = await agentWithBudget(1.5 * LLM_CALL_USD, { auto_resume: true })
    await a.send()
    expect((await a.send()).paused).toBe(true)
    clock.advance(DAY_MS)
    // The read shows it running before any new event arrives.
    const detail = (await h.get(`/agents/${a.agent}`, a.key)).json()
    expect(detail).toMatchObject({ is_paused: false, total_cost_usd: 0 })
    expect(await a.send()).toMatchObject({ paused: false, total_cost_24h: LLM_CALL_USD })
  })
})

describe('POST /config', () => {
  it('upserts one config per agent and keeps is_paused as it is', async () => {
    const a = await agentWithBudget(LLM_CALL_USD / 2)
    expect((await a.send()).paused).toBe(true)
    await h.post('/config', { agent_id: a.agent, cost_threshold_usd: 5 }, a.key)
    await h.post('/config', { agent_id: a.agent, cost_threshold_usd: 7, auto_resume: false }, a.key)
    const detail = (await h.get(`/agents/${a.agent}`, a.key)).json()
    expect(detail.is_paused).toBe(true)
    expect(detail.config).toEqual({ cost_threshold_usd: 7, slack_webhook_url: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+\/…/), auto_resume: false, alert_at: [0.8], velocity_limit_usd: null, velocity_window_minutes: 5, period_budgets: [], run_budget_usd: null })
    const rows = await h.services.clickhouse.query({
      query: 'SELECT count() AS n FROM agent_configs FINAL WHERE agent_id = {a:String}',
      query_params: { a: a.agent },
      format: 'JSONEachRow',
    })
    expect(await rows.json()).toEqual([{ n: '1' }])
  })

  it('defaults the threshold to 10.0 USD and accepts chat_webhook_url as an alias', async () => {
    const key = await h.key(unique('u'))
    await h.post('/config', { agent_id: 'a', chat_webhook_url: receiver.url }, key)
    const detail = (await h.get('/agents/a', key)).json()
    expect(detail.config).toMatchObject({ cost_threshold_usd: 10, auto_resume: false })
    expect(detail.config.slack_webhook_url).not.toContain('XXXXXXXXXXXX') // masked
  })
})

describe('rolling 24 h window', () => {
  it('drops an event from the total 24 h after its minute, not before', async () => {
    const key = await h.key(unique('u'))
    clock.set(Math.floor(clock.now() / 60_000) * 60_000 + 30_000) // mid-minute
    await h.post('/events', llmCall('a'), key)
    clock.advance(DAY_MS - 60_000) // the last minute of the window
    expect((await h.post('/events', { agent_id: 'a', event_type: 'agent_end' }, key)).json().total_cost_24h).toBe(LLM_CALL_USD)
    expect((await h.get('/agents', key)).json().agents[0].total_cost_usd).toBe(LLM_CALL_USD)
    clock.advance(60_000)
    expect((await h.post('/events', { agent_id: 'a', event_type: 'agent_end' }, key)).json().total_cost_24h).toBe(0)
    expect((await h.get('/agents', key)).json().agents[0]).toMatchObject({ total_cost_usd: 0, llm_calls: 0 })
  })
})
