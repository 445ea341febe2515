import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { serveMetrics } from '../src/metrics.ts'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'
import { startReceiver } from './helpers/receiver.ts'

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h.close())

/** The value of one sample line of the Prometheus text format. */
function sample(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  if (!line) throw new Error(`no sample ${name}`)
  return Number(line.split(' ')[1])
}

describe('metrics (METRICS_PORT)', () => {
  it('serves the journal backlog, shipped batches, hot-state size and webhook outcomes to a scraper', async () => {
    const receiver = await startReceiver()
    const key = await h.key(unique('u'))
    await h.post('/config', { agent_id: 'a', cost_threshold_usd: 0.001, slack_webhook_url: receiver.url, alert_at: [] }, key)
    await Promise.all(Array.from({ length: 30 }, () => h.post('/events', llmCall('a'), key)))
    await h.flush()
    await h.services.webhooks.drain()

    const server = await serveMetrics(h.services.metrics.registry, 0, '127.0.0.1')
    try {
      const { port } = server.address() as AddressInfo
      const res = await fetch(`http://127.0.0.1:${port}/metrics`)
      expect(res.status).toBe(200)
      const text = await res.text()
      // 30 events and one pause transition, shipped in fewer batches than rows.
      expect(sample(text, 'burnrate_ship_rows_total')).toBeGreaterThanOrEqual(31)
      const batches = sample(text, 'burnrate_ship_batches_total')
      expect(batches).toBeGreaterThan(0)
      expect(batches).toBeLessThan(30)
      expect(sample(text, 'burnrate_ship_lag_seconds_count')).toBeGreaterThanOrEqual(31)
      expect(sample(text, 'burnrate_journal_backlog_rows')).toBe(0)
      expect(sample(text, 'burnrate_journal_oldest_age_seconds')).toBe(0)
      expect(sample(text, 'burnrate_journal_writes_total')).toBeGreaterThan(0)
      expect(sample(text, 'burnrate_hot_state_agents')).toBeGreaterThanOrEqual(1)
      expect(text).toContain('burnrate_webhook_deliveries_total{outcome="sent"} 1')
      expect((await fetch(`http://127.0.0.1:${port}/other`)).status).toBe(404)
    } finally {
      server.close()
      await receiver.close()
    }
  })
})
