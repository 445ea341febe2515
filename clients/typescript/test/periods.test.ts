import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { api, cleanup, createKey, drained, freshDataDir, nano, startServe, type ServerProcess } from '../../../test/helpers/process.ts'
import { Burnrate, type BurnrateError, type BurnrateOptions } from '../src/index.ts'
import { startProxy, type Proxy } from '../../../test/helpers/proxy.ts'

// Period budgets through the client, against a real `burnrate serve` (embedded chDB, in-memory
// hot state: the shared Redis state refuses period budgets).

/** gpt-4o at a known price: 1000 in / 500 out is 0.0025 + 0.005 USD. */
const PRICES = { models: { 'gpt-4o': { input: 2.5, output: 10 } } }
const CALL = { inputTokens: 1000, outputTokens: 500 }
const CALL_NANO = 7_500_000
/** A limit one call stays within and two go over. */
const LIMIT_USD = 0.01

let server: ServerProcess
let dataDir: string
let key: string
const proxies: Proxy[] = []

beforeAll(async () => {
  const pricesFile = join(freshDataDir(), 'prices.json')
  writeFileSync(pricesFile, JSON.stringify(PRICES))
  dataDir = freshDataDir()
  server = await startServe(dataDir, { PRICES_FILE: pricesFile, CONFIG_RATE_LIMIT: '100000', READS_RATE_LIMIT: '100000' })
  key = (await createKey(dataDir, 'periods', ['--rate-limit', '100000'])).key
})

afterEach(async () => {
  for (const p of proxies.splice(0)) await p.close()
})

afterAll(async () => {
  await cleanup()
})

function agentName(what: string): string {
  return `ts-${what}-${randomUUID().slice(0, 8)}`
}

function make(agentId: string, opts: Partial<BurnrateOptions> = {}): { c: Burnrate; errors: BurnrateError[] } {
  const errors: BurnrateError[] = []
  const c = new Burnrate({ baseUrl: server.url, apiKey: key, agentId, retryBaseDelayMs: 10, onError: (e) => errors.push(e), ...opts })
  return { c, errors }
}

/** The day of the month and the time of day of `at` in `timeZone`, e.g. "1 00:00". */
function localDayAndTime(at: Date, timeZone: string): string {
  const parts = new Intl.DateTimeFormat('en-GB', { timeZone, day: 'numeric', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).formatToParts(at)
  const part = (type: string) => parts.find((p) => p.type === type)!.value
  return `${part('day')} ${part('hour')}:${part('minute')}`
}

describe('period budgets', () => {
  it('a month budget set at start-up pauses the agent past its limit: period_budget, month, its periods, and nothing more is sent', async () => {
    const id = agentName('month')
    const p = await startProxy(server.url)
    proxies.push(p)
    const { c, errors } = make(id, { baseUrl: p.url, periodBudgets: [{ period: 'month', limitUsd: LIMIT_USD, timeZone: 'Europe/Paris', monthStartsOn: 1 }] })
    expect(c.periods).toBeUndefined()

    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(p.seen[0]!.body).toEqual({ agent_id: id, period_budgets: [{ period: 'month', limit_usd: LIMIT_USD, time_zone: 'Europe/Paris', month_starts_on: 1 }] })
    const [month, ...others] = c.periods!
    expect(others).toEqual([])
    expect(month).toMatchObject({ period: 'month', limitUsd: LIMIT_USD, projectedExhaustionAt: expect.any(Date) })
    expect(nano(month!.spentUsd)).toBe(CALL_NANO)
    expect(nano(month!.remainingUsd)).toBe(nano(LIMIT_USD) - CALL_NANO)
    // This month in Paris: from local midnight of the 1st to the next one.
    expect(localDayAndTime(month!.startsAt, 'Europe/Paris')).toBe('1 00:00')
    expect(localDayAndTime(month!.endsAt!, 'Europe/Paris')).toBe('1 00:00')
    expect(month!.startsAt.getTime()).toBeLessThanOrEqual(Date.now())
    expect(month!.endsAt!.getTime()).toBeGreaterThan(Date.now())
    expect([c.paused, c.pausedReason, c.pausedPeriod]).toEqual([false, null, null])

    expect(await c.llmCall('gpt-4o', CALL)).toBe(false) // 0.015 of 0.01 this month
    expect([c.paused, c.pausedReason, c.pausedPeriod]).toEqual([true, 'period_budget', 'month'])
    expect(c.lastResponse).toMatchObject({ paused: true, paused_reason: 'period_budget', paused_period: 'month' })
    expect(nano(c.periods![0]!.spentUsd)).toBe(2 * CALL_NANO)
    expect(nano(c.periods![0]!.remainingUsd)).toBe(nano(LIMIT_USD) - 2 * CALL_NANO)

    // Paused: nothing more leaves the client.
    const requests = p.seen.length
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(await c.toolCall('search')).toBe(false)
    expect(await c.end()).toBe(false)
    expect(p.seen.length).toBe(requests)

    // refresh() reads the same pause from GET /agents/{id}.
    expect(await c.refresh()).toBe(true)
    expect([c.pausedReason, c.pausedPeriod]).toEqual(['period_budget', 'month'])
    await drained(server.url)
    const read = await api(server.url, 'GET', `/agents/${encodeURIComponent(id)}`, key)
    expect(read.body).toMatchObject({ llm_calls: 2, is_paused: true, paused_reason: 'period_budget', paused_period: 'month' })
    expect(errors).toEqual([])
  })

  it('a hold whose worst case would take a period over its limit is refused as period_budget; a call that fits runs', async () => {
    const id = agentName('hold')
    const { c, errors } = make(id, { periodBudgets: [{ windowDays: 7, limitUsd: LIMIT_USD }] })
    let ran = false
    // 1000 in and 1000 out at most: 0.0125, more than the window's 0.01.
    const refused = await c.guard({ model: 'gpt-4o', inputTokens: 1000, maxOutputTokens: 1000 }, () => {
      ran = true
    })
    expect(refused).toMatchObject({ allowed: false, reason: 'period_budget', pausedReason: null, pausedPeriod: null })
    expect(ran).toBe(false)
    expect(c.paused).toBe(false)

    const granted = await c.guard({ model: 'gpt-4o', inputTokens: 1000, maxOutputTokens: 500 }, (hold) => hold.llmCall(CALL))
    expect(granted).toMatchObject({ allowed: true, value: true })
    const [week] = c.periods!
    expect(week).toMatchObject({ period: 'window_7d', limitUsd: LIMIT_USD, endsAt: null })
    expect(nano(week!.spentUsd)).toBe(CALL_NANO)
    expect(errors).toEqual([])
  })

  it("a fleet's period budget stops every agent of the user as fleet_period_budget, and refresh() sees the fleet resumed", async () => {
    const fleetKey = (await createKey(dataDir, agentName('fleet-user'), ['--rate-limit', '100000'])).key
    const fleet = await api(server.url, 'POST', '/config/fleet', fleetKey, { cost_threshold_usd: 100, period_budgets: [{ window_days: 30, limit_usd: LIMIT_USD }] })
    expect(fleet.status).toBe(200)
    const { c: one, errors } = make('one', { apiKey: fleetKey })
    const { c: two } = make('two', { apiKey: fleetKey, onError: (e) => errors.push(e) })
    expect(await one.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await two.llmCall('gpt-4o', CALL)).toBe(false) // the fleet's 0.015 of 0.01 in 30 days
    expect([two.paused, two.pausedReason, two.pausedPeriod]).toEqual([true, 'fleet_period_budget', 'window_30d'])
    // The agent has no period budget of its own: its periods are its own.
    expect(two.periods).toEqual([])
    expect(await one.llmCall('gpt-4o', CALL)).toBe(false)
    expect([one.pausedReason, one.pausedPeriod]).toEqual(['fleet_period_budget', 'window_30d'])

    expect((await api(server.url, 'POST', '/config/fleet/pause', fleetKey, { is_paused: false })).status).toBe(200)
    expect(await one.refresh()).toBe(false)
    expect([one.paused, one.pausedReason, one.pausedPeriod]).toEqual([false, null, null])
    expect(await one.llmCall('gpt-4o', CALL)).toBe(true) // a manual resume overrides the spent window
    expect(errors).toEqual([])
  })

  it('a period budget the server refuses goes to onError as a config failure; the event is still sent', async () => {
    const id = agentName('bad-zone')
    const { c, errors } = make(id, { periodBudgets: [{ period: 'day', limitUsd: 1, timeZone: 'Mars/Olympus_Mons' }] })
    expect(await c.start()).toBe(true)
    expect(errors).toHaveLength(1)
    expect(errors[0]).toMatchObject({ operation: 'config', status: 400, retryable: false })
    expect(JSON.stringify(errors[0]!.problem)).toContain('time_zone')
  })
})
