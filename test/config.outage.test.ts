import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

// Embedded: an operator's POST /config and /config/pause go through the journal
// like events, so they work while ClickHouse refuses to store, and reach it afterwards.
let h: Harness
beforeAll(async () => {
  h = await startHarness({ env: { SHIP_INTERVAL_MS: '20' } })
})
afterAll(() => h?.close())

const TABLES = ['events', 'agent_configs', 'pause_transitions']

async function rows(query: string, params: Record<string, unknown>) {
  return (await h.services.clickhouse.query({ query, query_params: params, format: 'JSONEachRow' })).json<Record<string, unknown>>()
}

describe('operators while ClickHouse refuses to store', () => {
  it('set a budget and pause an agent, in force at once, stored in ClickHouse once it takes them', async () => {
    const user = unique('u')
    const key = await h.key(user)
    const inject = (method: 'GET' | 'POST', url: string, body?: unknown) =>
      h.app.inject({ method, url, headers: { 'x-api-key': key, 'content-type': 'application/json' }, ...(body ? { payload: JSON.stringify(body) } : {}) })
    for (const t of TABLES) await h.services.clickhouse.command({ query: `RENAME TABLE ${t} TO ${t}_away` })
    try {
      expect((await inject('POST', '/config', { agent_id: 'op', cost_threshold_usd: 5, auto_resume: true })).json()).toEqual({ ok: true })
      expect((await inject('POST', '/config/pause', { agent_id: 'op', is_paused: true })).json()).toEqual({ ok: true, agent_id: 'op', is_paused: true })
      expect((await inject('POST', '/events', llmCall('op'))).json()).toMatchObject({ ok: true, paused: true })
      // GET /agents needs only the hot state: the budget and the pause are there already.
      expect((await inject('GET', '/agents')).json().agents).toEqual([expect.objectContaining({ agent_id: 'op', cost_threshold_usd: 5, is_paused: true })])
    } finally {
      for (const t of TABLES) await h.services.clickhouse.command({ query: `RENAME TABLE ${t}_away TO ${t}` })
    }
    await h.flush()
    expect(await rows('SELECT threshold_nano, auto_resume FROM agent_configs WHERE user_id = {u:String} AND agent_id = {a:String}', { u: user, a: 'op' })).toEqual([
      { threshold_nano: '5000000000', auto_resume: true },
    ])
    expect(await rows('SELECT is_paused, reason FROM pause_transitions WHERE user_id = {u:String} AND agent_id = {a:String}', { u: user, a: 'op' })).toEqual([
      { is_paused: true, reason: 'manual' },
    ])
    const detail = (await h.get('/agents/op', key)).json()
    expect(detail).toMatchObject({ is_paused: true, paused_reason: 'manual', config: { cost_threshold_usd: 5, auto_resume: true }, llm_calls: 1 })
    expect(detail.events).toHaveLength(1)
  })
})
