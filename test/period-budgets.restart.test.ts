import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { LLM_CALL_USD, llmCall, startHarness } from './helpers/harness.ts'

/**
 * Period sums over a restart of the embedded mode: rebuilt from the stored events (those
 * older than the window through their history) and the journal's unshipped tail, exactly.
 * A file of its own: chDB opens one data directory per process.
 */
const usd = (n: number) => Math.round(n * LLM_CALL_USD * 1e9) / 1e9

describe('period budgets over a restart', () => {
  it('rebuilds every period exactly from the stored events and the journal', async () => {
    const c = new ManualClock(Date.UTC(2027, 0, 20, 6))
    let h = await startHarness({ clock: c })
    try {
      const key = await h.key('restart-user')
      await h.post('/config', { agent_id: 'p', period_budgets: [{ period: 'month', limit_usd: 10 }, { window_days: 30, limit_usd: 10 }, { period: 'week', limit_usd: 10 }] }, key)
      await h.post('/config/fleet', { cost_threshold_usd: 100, period_budgets: [{ period: 'month', limit_usd: 10 }] }, key)
      // Events over eleven days, some shipped long ago, the last ones not shipped at all.
      for (let day = 0; day < 11; day++) {
        c.set(Date.UTC(2027, 0, 20 + day, 6, day))
        await h.post('/events', llmCall('p'), key)
        await h.post('/events', llmCall('q'), key)
        if (day < 9) await h.flush()
      }
      const before = { agent: (await h.get('/agents/p', key)).json().periods, fleet: (await h.get('/fleet', key)).json().periods }
      expect(before.agent.map((p: { spent_usd: number }) => p.spent_usd)).toEqual([usd(11), usd(11), usd(6)])
      expect(before.fleet[0].spent_usd).toBe(usd(22))
      const dataDir = h.dataDir
      await h.close()
      h = await startHarness({ clock: c, dataDir })
      expect((await h.get('/agents/p', key)).json().periods).toEqual(before.agent)
      expect((await h.get('/fleet', key)).json().periods).toEqual(before.fleet)
    } finally {
      await h.close()
    }
  })
})
