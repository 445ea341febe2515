import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * The audit log, through the API. Its records are derived by materialized
 * views from the rows the service writes (sql/0012); the journaled rows themselves (actor,
 * the replaced config) are checked for both hot states in the contract suite.
 */
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
let h: Harness

beforeAll(async () => {
  h = await startHarness({ clock })
})
afterAll(() => h.close())

const keyIdOf = (key: string) => key.split('_')[1]!
const WEBHOOK = 'https://hooks.example.com/services/T000/B000/secretsecret'

interface Record {
  at: string
  agent_id: string | null
  action: string
  reason: string
  actor: string
  details: { [k: string]: unknown }
}

async function audit(key: string, query = ''): Promise<{ records: Record[]; next_before: string | null }> {
  const res = await h.get(`/audit${query}`, key)
  expect(res.statusCode, res.body).toBe(200)
  return res.json()
}

describe('GET /audit', () => {
  it('records every config change with its old and new values, every pause and resume with who and why, newest first', async () => {
    const user = unique('u')
    const key = await h.key(user)
    const me = keyIdOf(key)
    clock.advance(1000)
    await h.post('/config', { agent_id: 'a', cost_threshold_usd: 0.01, slack_webhook_url: WEBHOOK }, key)
    clock.advance(1000)
    await h.post('/config', { agent_id: 'a', cost_threshold_usd: 0.02 }, key)
    clock.advance(1000)
    for (let i = 0; i < 3; i++) await h.post('/events', llmCall('a'), key) // 0.0225 > 0.02: paused by its budget
    clock.advance(1000)
    await h.post('/config/pause', { agent_id: 'a', is_paused: false }, key) // a resume over budget: an override

    const { records } = await audit(key)
    expect(records.map((r) => [r.agent_id, r.action, r.reason, r.actor])).toEqual([
      ['a', 'resume', 'manual', me],
      // The event that paused it also crossed its 0.8 alert level: recorded after the pause.
      ['a', 'alert', 'budget_level', 'system'],
      ['a', 'pause', 'budget', 'system'],
      ['a', 'config', 'config_set', me],
      ['a', 'config', 'config_set', me],
      [null, 'key_created', 'cli', 'system'],
    ])
    const shown = (usd: number) => ({
      cost_threshold_usd: usd,
      slack_webhook_url: expect.stringMatching(/^https:\/\/hooks\.example\.com\//),
      auto_resume: false,
      alert_at: [0.8],
      velocity_limit_usd: null,
      velocity_window_minutes: 5,
      period_budgets: [],
      run_budget_usd: null,
    })
    expect(records[4]!.details).toEqual({ old: null, new: shown(0.01) })
    expect(records[3]!.details).toEqual({ old: shown(0.01), new: shown(0.02) })
    for (const r of records) expect(JSON.stringify(r.details)).not.toContain('secretsecret')
    expect(records[2]!.details).toEqual({ total_cost_usd: 3 * LLM_CALL_USD, override: false })
    expect(records[1]!.details).toEqual({ level: 0.8, total_cost_usd: 3 * LLM_CALL_USD, cost_threshold_usd: 0.02 })
    expect(records[0]!.details).toEqual({ total_cost_usd: 3 * LLM_CALL_USD, override: true })
    expect(records[0]!.at).toBe(new Date(clock.now()).toISOString())
    expect(records[5]!.details).toEqual({ key_id: me, name: '' })
  })

  it('records every kind of transition: auto-resume, an override ended by the total or by a new threshold, and a key revoked', async () => {
    const user = unique('u')
    const key = await h.key(user)
    const me = keyIdOf(key)
    // Auto-resume: paused by its budget, running again once a day has passed.
    await h.post('/config', { agent_id: 'auto', cost_threshold_usd: 0.01, auto_resume: true, alert_at: [] }, key)
    await h.post('/events', llmCall('auto'), key)
    await h.post('/events', llmCall('auto'), key)
    // Overrides: resumed over budget by hand, ended once by the total, once by a new threshold.
    for (const agent of ['ends', 'changed']) {
      await h.post('/config', { agent_id: agent, cost_threshold_usd: 0.01, alert_at: [] }, key)
      await h.post('/events', llmCall(agent, { output_tokens: 5000 }), key)
      await h.post('/config/pause', { agent_id: agent, is_paused: false }, key)
    }
    clock.advance(1000)
    await h.post('/config', { agent_id: 'changed', cost_threshold_usd: 0.02 }, key)
    clock.advance(24 * 3_600_000)
    await h.post('/events', { agent_id: 'auto', event_type: 'agent_end' }, key)
    await h.post('/events', { agent_id: 'ends', event_type: 'agent_end' }, key)
    const created = await h.services.keys.create(user)
    await h.services.keys.revoke(created.record.keyId)

    const kinds = (await audit(key)).records.map((r) => [r.agent_id, r.action, r.reason, r.actor])
    expect(kinds).toEqual(
      expect.arrayContaining([
        ['auto', 'pause', 'budget', 'system'],
        ['auto', 'resume', 'auto_resume', 'system'],
        ['ends', 'resume', 'manual', me],
        ['ends', 'override_cleared', 'override_cleared', 'system'],
        ['changed', 'override_cleared', 'threshold_changed', me],
        [null, 'key_created', 'cli', 'system'],
        [null, 'key_revoked', 'cli', 'system'],
      ]),
    )
    const revoked = (await audit(key)).records.find((r) => r.action === 'key_revoked')!
    expect(revoked.details).toEqual({ key_id: created.record.keyId, name: '' })
  })

  it('pages newest first without a gap or a repeat, filters by agent, and shows one user nothing of another', async () => {
    const key = await h.key(unique('u'))
    // Records of one millisecond: only their ids order them.
    for (let i = 0; i < 5; i++) await h.post('/config', { agent_id: 'p', cost_threshold_usd: i + 1 }, key)
    await h.post('/config', { agent_id: 'q' }, key)
    const all = (await audit(key)).records
    expect(all).toHaveLength(7) // 5 + 1 configs and the key
    const pages: Record[] = []
    let cursor: string | null = null
    do {
      const page = await audit(key, `?limit=2${cursor ? `&before=${encodeURIComponent(cursor)}` : ''}`)
      pages.push(...page.records)
      cursor = page.next_before
    } while (cursor)
    expect(pages).toEqual(all)
    const ofP = (await audit(key, '?agent_id=p')).records
    expect(ofP.map((r) => (r.details.new as { cost_threshold_usd: number }).cost_threshold_usd)).toEqual([5, 4, 3, 2, 1])
    const other = await h.key(unique('u'))
    expect((await audit(other)).records.map((r) => r.action)).toEqual(['key_created'])
    expect((await audit(other, '?agent_id=p')).records).toEqual([])
  })

  it('refuses bad queries with a problem naming the parameter', async () => {
    const key = await h.key(unique('u'))
    for (const [query, field] of [
      ['?limit=0', 'limit'],
      ['?limit=1001', 'limit'],
      ['?before=yesterday', 'before'],
      ['?agent_id=', 'agent_id'],
      ['?user_id=x', 'user_id'],
    ] as const) {
      const res = await h.get(`/audit${query}`, key)
      expect(res.statusCode, query).toBe(400)
      expect(res.headers['content-type']).toContain('application/problem+json')
      expect(res.json().errors.map((e: { field: string }) => e.field)).toContain(field)
    }
    expect((await h.get('/audit', null)).statusCode).toBe(401)
  })
})
