import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, harnessAndReceiver, unique } from './helpers/harness.ts'

/**
 * The spend-velocity pause through the API, with the clock passed in: a burst
 * pauses within the window, the same spend spread out does not, one message saying how fast,
 * an audit record, no auto-resume, and bad input. The rule runs against both hot states in
 * the contract suite (test/hot-state/contract.test.ts).
 */
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
const t = harnessAndReceiver({ clock, env: { CONFIG_RATE_LIMIT: '100000' } })

describe('the spend-velocity limit', () => {
  it('pauses a burst within its window, says how fast in one message and an audit record, and does not auto-resume', async () => {
    const user = unique('u')
    const key = await t.h.key(user)
    // 0.02 USD per 3 minutes: the third 0.0075 call within them goes over it.
    await t.h.post('/config', { agent_id: 'loop', velocity_limit_usd: 0.02, velocity_window_minutes: 3, auto_resume: true, slack_webhook_url: t.receiver.url, alert_at: [] }, key)
    const answers = []
    const third = clock.now() + 2 * 60_000
    for (let i = 0; i < 3; i++) {
      answers.push((await t.h.post('/events', llmCall('loop'), key)).json())
      clock.advance(60_000)
    }
    expect(answers.map((a) => [a.paused, a.paused_reason])).toEqual([
      [false, null],
      [false, null],
      [true, 'velocity'],
    ])
    expect((await t.h.get('/agents/loop', key)).json()).toMatchObject({
      is_paused: true,
      paused_reason: 'velocity',
      paused_at: new Date(third).toISOString(),
      config: { velocity_limit_usd: 0.02, velocity_window_minutes: 3, auto_resume: true },
    })
    await t.h.services.webhooks.drain()
    const mine = t.receiver.messages.filter((m) => m.text.includes('`loop`')).map((m) => m.text)
    expect(mine.at(-1)).toContain('burnrate paused agent `loop`: its spend of the last 3 minutes, $0.0225, went over its limit of $0.02 per 3 minutes')
    const [record] = (await t.h.get('/audit?agent_id=loop&limit=1', key)).json().records
    expect(record).toMatchObject({ action: 'pause', reason: 'velocity', actor: 'system', details: { total_cost_usd: 3 * LLM_CALL_USD } })
    // An hour later the window is quiet; auto_resume is for the daily budget only.
    clock.advance(3_600_000)
    expect((await t.h.get('/agents/loop', key)).json()).toMatchObject({ is_paused: true, paused_reason: 'velocity' })
    await t.h.post('/config/pause', { agent_id: 'loop', is_paused: false }, key)
    expect((await t.h.post('/events', llmCall('loop'), key)).json()).toMatchObject({ paused: false, paused_reason: null })
  })

  it('does not pause the same spend spread out, and a null limit removes it', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config', { agent_id: 'steady', velocity_limit_usd: 0.01, velocity_window_minutes: 2 }, key)
    for (let i = 0; i < 6; i++) {
      expect((await t.h.post('/events', llmCall('steady'), key)).json().paused, `call ${i}`).toBe(false)
      clock.advance(2 * 60_000)
    }
    await t.h.post('/config', { agent_id: 'steady', velocity_limit_usd: null }, key)
    for (let i = 0; i < 3; i++) expect((await t.h.post('/events', llmCall('steady'), key)).json().paused).toBe(false)
    expect((await t.h.get('/agents/steady', key)).json().config).toMatchObject({ velocity_limit_usd: null, velocity_window_minutes: 2 })
  })

  it('refuses limits and windows out of range with a problem naming the field, changing nothing (property)', async () => {
    const key = await t.h.key(unique('u'))
    await t.h.post('/config', { agent_id: 'v', velocity_limit_usd: 1, velocity_window_minutes: 5 }, key)
    let stored = { velocity_limit_usd: 1, velocity_window_minutes: 5 }
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.double({ min: -1, max: 2_000_000, noNaN: true }), fc.constantFrom(0, 1e6, 1e6 + 1, null)),
        fc.oneof(fc.integer({ min: -5, max: 100 }), fc.constantFrom(0, 1, 60, 61, 2.5)),
        async (limit, minutes) => {
          const ok = (limit === null || (limit > 0 && limit <= 1_000_000)) && Number.isInteger(minutes) && minutes >= 1 && minutes <= 60
          const res = await t.h.post('/config', { agent_id: 'v', velocity_limit_usd: limit, velocity_window_minutes: minutes }, key)
          expect(res.statusCode, JSON.stringify([limit, minutes])).toBe(ok ? 200 : 400)
          if (ok) stored = { velocity_limit_usd: (await t.h.get('/agents/v', key)).json().config.velocity_limit_usd, velocity_window_minutes: minutes }
          else expect(res.json().errors.every((e: { field: string }) => e.field.startsWith('velocity_'))).toBe(true)
          expect((await t.h.get('/agents/v', key)).json().config).toMatchObject(stored)
        },
      ),
      { numRuns: 80 },
    )
  })
})
