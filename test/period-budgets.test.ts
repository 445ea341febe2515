import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, harnessAndReceiver, llmCall, unique } from './helpers/harness.ts'

/**
 * Period budgets through the API, with the clock passed in: a calendar month in UTC and a
 * day in a half-hour zone pause at the exact crossing and resume when the next period
 * begins (one message, one audit record); a rolling window slides hour by hour; holds and
 * the fleet count against them; the spend before a budget was set, and after a restart, is
 * what the stored events say; bad input is a 400 naming the field that changes nothing.
 */
// Friday 2026-11-20, noon UTC.
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
const t = harnessAndReceiver({ clock, env: { CONFIG_RATE_LIMIT: '1000000' } })

const iso = (ms: number) => new Date(ms).toISOString()
const usd = (n: number) => Math.round(n * LLM_CALL_USD * 1e9) / 1e9

describe('period budgets', () => {
  it('pauses at the first event strictly over a month, refuses holds, and resumes when the next month begins, with one message and an audit record each', async () => {
    const key = await t.h.key(unique('u'))
    const start = clock.now()
    // Three calls make 0.0225: over 0.02 with the third, which pauses.
    const res = await t.h.post('/config', { agent_id: 'm', period_budgets: [{ period: 'month', limit_usd: 0.02 }], slack_webhook_url: t.receiver.url, alert_at: [] }, key)
    expect(res.statusCode, res.body).toBe(200)
    const answers = []
    for (let i = 0; i < 2; i++) answers.push((await t.h.post('/events', llmCall('m'), key)).json())
    // 0.015 spent: a call whose worst case is 0.0125 would take the month over 0.02.
    const hold = await t.h.post('/holds', { agent_id: 'm', model: 'gpt-4o', input_tokens: 1000, max_output_tokens: 1000 }, key)
    expect(hold.json()).toMatchObject({ allowed: false, reason: 'period_budget', paused: false })
    answers.push((await t.h.post('/events', llmCall('m'), key)).json())
    expect(answers.map((a) => [a.paused, a.paused_reason, a.paused_period])).toEqual([
      [false, null, null],
      [false, null, null],
      [true, 'period_budget', 'month'],
    ])
    expect(answers[2].periods).toEqual([
      {
        period: 'month',
        spent_usd: usd(3),
        limit_usd: 0.02,
        remaining_usd: -0.0025,
        starts_at: '2026-11-01T00:00:00.000Z',
        ends_at: '2026-12-01T00:00:00.000Z',
        projected_exhaustion_at: iso(start),
      },
    ])
    const paused = await t.h.post('/holds', { agent_id: 'm', model: 'gpt-4o', input_tokens: 10, max_output_tokens: 10 }, key)
    expect(paused.json()).toMatchObject({ allowed: false, reason: 'paused', paused: true, paused_reason: 'period_budget', paused_period: 'month' })
    const detail = (await t.h.get('/agents/m', key)).json()
    expect(detail).toMatchObject({ is_paused: true, paused_reason: 'period_budget', paused_period: 'month', config: { period_budgets: [{ period: 'month', limit_usd: 0.02, time_zone: 'UTC', week_starts: 'monday', month_starts_on: 1 }] } })
    // One millisecond before December: still paused. At midnight: resumed by itself.
    clock.set(Date.UTC(2026, 11, 1) - 1)
    expect((await t.h.get('/agents/m', key)).json()).toMatchObject({ is_paused: true, paused_period: 'month' })
    clock.set(Date.UTC(2026, 11, 1))
    const resumed = (await t.h.get('/agents/m', key)).json()
    expect(resumed).toMatchObject({ is_paused: false, paused_reason: null, paused_period: null })
    expect(resumed.periods[0]).toMatchObject({ spent_usd: 0, starts_at: '2026-12-01T00:00:00.000Z', ends_at: '2027-01-01T00:00:00.000Z' })
    await t.h.services.webhooks.drain()
    const mine = t.receiver.messages.filter((m) => m.text.includes('`m`')).map((m) => m.text)
    expect(mine).toHaveLength(2)
    expect(mine[0]).toContain('burnrate paused agent `m`: its spend of this month, $0.0225, went over its budget of $0.02: it stays paused until the next month begins')
    expect(mine[1]).toContain('burnrate resumed agent `m`: a new month began, with its budget of $0.02')
    const records = (await t.h.get('/audit?agent_id=m&limit=10', key)).json().records
    expect(records.slice(0, 2).map((r: { action: string; reason: string }) => [r.action, r.reason])).toEqual([
      ['resume', 'auto_resume'],
      ['pause', 'period_budget:month'],
    ])
    expect((await t.h.post('/events', llmCall('m'), key)).json()).toMatchObject({ paused: false, periods: [{ spent_usd: usd(1) }] })
  })

  it('starts a day in Asia/Kolkata at local midnight, 18:30 UTC, exactly', async () => {
    const key = await t.h.key(unique('u'))
    clock.set(Date.UTC(2026, 11, 2, 18, 29, 0))
    await t.h.post('/config', { agent_id: 'k', period_budgets: [{ period: 'day', time_zone: 'Asia/Kolkata', limit_usd: 0.01 }] }, key)
    await t.h.post('/events', llmCall('k'), key)
    expect((await t.h.post('/events', llmCall('k'), key)).json()).toMatchObject({ paused: true, paused_period: 'day' })
    clock.set(Date.UTC(2026, 11, 2, 18, 29, 59, 999))
    expect((await t.h.get('/agents/k', key)).json()).toMatchObject({ is_paused: true, periods: [{ starts_at: '2026-12-01T18:30:00.000Z', ends_at: '2026-12-02T18:30:00.000Z' }] })
    clock.set(Date.UTC(2026, 11, 2, 18, 30))
    const a = (await t.h.post('/events', llmCall('k'), key)).json()
    expect(a).toMatchObject({ paused: false, periods: [{ period: 'day', spent_usd: usd(1), starts_at: '2026-12-02T18:30:00.000Z' }] })
  })

  it('slides a rolling window hour by hour, and its pause ends once the spend is back within the limit', async () => {
    const key = await t.h.key(unique('u'))
    const h0 = Date.UTC(2026, 11, 5, 10, 30)
    clock.set(h0)
    await t.h.post('/config', { agent_id: 'r', period_budgets: [{ window_days: 2, limit_usd: 0.02 }] }, key)
    await t.h.post('/events', llmCall('r'), key)
    clock.set(h0 + 3_600_000)
    await t.h.post('/events', llmCall('r'), key)
    expect((await t.h.post('/events', llmCall('r'), key)).json()).toMatchObject({ paused: true, paused_reason: 'period_budget', paused_period: 'window_2d' })
    // The window holds the current UTC hour and the 47 before it: the first call (hour 10)
    // leaves it as hour 10 + 48 begins.
    clock.set(Date.UTC(2026, 11, 7, 9, 59, 59, 999))
    expect((await t.h.get('/agents/r', key)).json()).toMatchObject({ is_paused: true, periods: [{ spent_usd: usd(3), starts_at: '2026-12-05T10:00:00.000Z', ends_at: null }] })
    clock.set(Date.UTC(2026, 11, 7, 10))
    expect((await t.h.get('/agents/r', key)).json()).toMatchObject({ is_paused: false, periods: [{ spent_usd: usd(2), starts_at: '2026-12-05T11:00:00.000Z' }] })
  })

  it('counts what was spent before the budget was set, and a fleet period pauses every agent', async () => {
    const key = await t.h.key(unique('u'))
    clock.set(Date.UTC(2026, 11, 10, 8))
    for (const agent of ['a', 'b']) await t.h.post('/events', llmCall(agent), key)
    // Three days later those events are only in ClickHouse.
    clock.set(Date.UTC(2026, 11, 13, 8))
    await t.h.flush()
    expect((await t.h.post('/config', { agent_id: 'a', period_budgets: [{ period: 'month', limit_usd: 1 }, { window_days: 7, limit_usd: 1 }] }, key)).statusCode).toBe(200)
    expect((await t.h.get('/agents/a', key)).json().periods.map((p: { spent_usd: number }) => p.spent_usd)).toEqual([usd(1), usd(1)])
    expect((await t.h.post('/config/fleet', { cost_threshold_usd: 100, period_budgets: [{ period: 'week', week_starts: 'sunday', limit_usd: 0.02 }] }, key)).statusCode).toBe(200)
    const fleet = (await t.h.get('/fleet', key)).json()
    // Sunday 2026-12-13 began the week: the events of Thursday the 10th are not in it.
    expect(fleet.periods).toEqual([expect.objectContaining({ period: 'week', spent_usd: 0, starts_at: '2026-12-13T00:00:00.000Z', ends_at: '2026-12-20T00:00:00.000Z' })])
    await t.h.post('/events', llmCall('b'), key)
    await t.h.post('/events', llmCall('b'), key)
    expect((await t.h.post('/events', llmCall('a'), key)).json()).toMatchObject({ paused: true, paused_reason: 'fleet_period_budget', paused_period: 'week' })
    expect((await t.h.get('/fleet', key)).json()).toMatchObject({ is_paused: true, paused_reason: 'fleet_period_budget', paused_period: 'week' })
    const rows = (await t.h.get('/agents', key)).json().agents
    expect(rows.find((r: { agent_id: string }) => r.agent_id === 'a')).toMatchObject({ paused_reason: 'fleet_period_budget', paused_period: 'week', periods: [{ period: 'month', spent_usd: usd(2) }, { period: 'window_7d', spent_usd: usd(2) }] })
  })

  it('fires alert levels per period, once per crossing', async () => {
    const key = await t.h.key(unique('u'))
    clock.set(Date.UTC(2026, 11, 15, 9))
    await t.h.post('/config', { agent_id: 'al', cost_threshold_usd: 100, alert_at: [0.5], slack_webhook_url: t.receiver.url, period_budgets: [{ period: 'month', limit_usd: 0.02 }] }, key)
    const answers = []
    for (let i = 0; i < 3; i++) answers.push((await t.h.post('/events', llmCall('al'), key)).json())
    // The daily budget (100) has no level crossed; the month's 50 % is crossed by the second call.
    expect(answers.map((a) => a.alerts)).toEqual([[], [], []])
    await t.h.services.webhooks.drain()
    const alerts = t.receiver.messages.filter((m) => m.text.includes('`al`') && m.text.includes('reached'))
    expect(alerts.map((m) => m.text)).toEqual([expect.stringContaining('reached 50 % of its budget for this month: $0.015 of $0.02 in this month')])
  })

  it('refuses bad period budgets with a problem naming the field, changing nothing (property)', async () => {
    const key = await t.h.key(unique('u'))
    const good = [{ period: 'month', limit_usd: 5, time_zone: 'Europe/Paris', week_starts: 'monday', month_starts_on: 1 }]
    await t.h.post('/config', { agent_id: 'v', period_budgets: good }, key)
    const entry = fc.oneof(
      fc.record(
        {
          period: fc.constantFrom('day', 'week', 'month', 'year', ''),
          limit_usd: fc.oneof(fc.double({ min: -1, max: 2e9, noNaN: true }), fc.constant(0)),
          time_zone: fc.constantFrom('UTC', 'Asia/Kolkata', 'Mars/Olympus', 'utc+5', ''),
          week_starts: fc.constantFrom('monday', 'sunday', 'friday'),
          month_starts_on: fc.constantFrom(1, 28, 29, 0, 2.5),
        },
        { requiredKeys: ['period', 'limit_usd'] },
      ),
      fc.record({ window_days: fc.constantFrom(1, 7, 30, 31, 0, 32, 1.5), limit_usd: fc.constantFrom(1, 0, -2) }),
    )
    await fc.assert(
      fc.asyncProperty(fc.array(entry, { maxLength: 6 }), async (budgets) => {
        const res = await t.h.post('/config', { agent_id: 'v', period_budgets: budgets }, key)
        const now = (await t.h.get('/agents/v', key)).json().config.period_budgets
        if (res.statusCode === 200) {
          expect(now).toHaveLength(budgets.length)
          await t.h.post('/config', { agent_id: 'v', period_budgets: good }, key)
          return
        }
        expect(res.statusCode).toBe(400)
        expect(res.json().errors.length).toBeGreaterThan(0)
        expect(res.json().errors.every((e: { field: string }) => e.field.startsWith('period_budgets'))).toBe(true)
        expect(now).toEqual(good)
      }),
      { numRuns: 150 },
    )
    // Each rule, named: an unknown zone, a limit of 0, two of one period, five entries.
    const problems = async (period_budgets: unknown) => (await t.h.post('/config', { agent_id: 'v', period_budgets }, key)).json().errors
    expect(await problems([{ period: 'day', limit_usd: 1, time_zone: 'Nowhere/Land' }])).toEqual([{ field: 'period_budgets.0.time_zone', message: expect.stringContaining('IANA time zone') }])
    expect(await problems([{ window_days: 7, limit_usd: 0 }])).toEqual([{ field: 'period_budgets.0.limit_usd', message: 'must be > 0' }])
    expect(await problems([{ period: 'day', limit_usd: 1 }, { period: 'day', limit_usd: 2, time_zone: 'Asia/Tokyo' }])).toEqual([{ field: 'period_budgets.1', message: expect.stringContaining('one budget per period') }])
    expect(await problems([1, 2, 3, 4, 5].map((d) => ({ window_days: d, limit_usd: 1 })))).toEqual([{ field: 'period_budgets', message: 'must hold at most 4 period budgets' }])
    // null removes them.
    await t.h.post('/config', { agent_id: 'v', period_budgets: null }, key)
    expect((await t.h.get('/agents/v', key)).json().config.period_budgets).toEqual([])
  })

  it('one user never sees nor changes another user\'s periods', async () => {
    const [k1, k2] = [await t.h.key(unique('u')), await t.h.key(unique('u'))]
    await t.h.post('/config', { agent_id: 'same', period_budgets: [{ period: 'month', limit_usd: 0.01 }] }, k1)
    await t.h.post('/events', llmCall('same'), k1)
    await t.h.post('/events', llmCall('same'), k1)
    expect((await t.h.post('/events', llmCall('same'), k2)).json()).toMatchObject({ paused: false, periods: [] })
    expect((await t.h.get('/agents/same', k2)).json()).toMatchObject({ config: null, periods: [] })
    expect((await t.h.get('/agents/same', k1)).json()).toMatchObject({ is_paused: true, periods: [{ spent_usd: usd(2) }] })
  })
})
