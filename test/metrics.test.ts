import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
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
    // A fleet over its budget with an alert level before it, and a pause by hand.
    await h.post('/config/fleet', { cost_threshold_usd: 0.2, alert_at: [0.5] }, key)
    await h.post('/events', llmCall('a'), key)
    await h.post('/config/pause', { agent_id: 'b', is_paused: true }, key)
    await h.post('/holds', { agent_id: 'c', model: 'gpt-4o', input_tokens: 1, max_output_tokens: 1 }, key)
    await h.post('/holds', { agent_id: 'b', model: 'gpt-4o', input_tokens: 1, max_output_tokens: 1 }, key)
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
      // The budget paused agent a once (30 events over 0.001 USD), the fleet crossed its 50 %
      // level (0.2325 USD > 0.1) and then its budget, and b was paused by hand.
      expect(text).toContain('burnrate_pauses_total{scope="agent",reason="budget"} 1')
      expect(text).toContain('burnrate_pauses_total{scope="fleet",reason="budget"} 1')
      expect(text).toContain('burnrate_pauses_total{scope="agent",reason="manual"} 1')
      expect(text).toContain('burnrate_pauses_total{scope="agent",reason="velocity"} 0')
      expect(text).toContain('burnrate_budget_alerts_total{scope="fleet"} 1')
      // Both holds were refused: the fleet is paused.
      expect(text).toContain('burnrate_holds_total{result="paused"} 2')
      expect(text).toContain('burnrate_holds_total{result="granted"} 0')
      expect((await fetch(`http://127.0.0.1:${port}/other`)).status).toBe(404)
    } finally {
      server.close()
      await receiver.close()
    }
  })

  it("counts ClickHouse's merges and their time, and shows the active parts of each table", async () => {
    const key = await h.key(unique('u'))
    // Two ships, two parts of events at least; a merge of them is then forced.
    await h.post('/events', llmCall('a'), key)
    await h.flush()
    await h.post('/events', llmCall('a'), key)
    await h.flush()
    const server = await serveMetrics(h.services.metrics.registry, 0, '127.0.0.1')
    try {
      const { port } = server.address() as AddressInfo
      const scrape = async () => (await fetch(`http://127.0.0.1:${port}/metrics`)).text()
      const before = await scrape()
      expect(sample(before, 'burnrate_clickhouse_active_parts{table="events"}')).toBeGreaterThanOrEqual(1)
      expect(sample(before, 'burnrate_clickhouse_active_parts{table="hourly_cost"}')).toBeGreaterThanOrEqual(1)
      // The oldest event kept: one of this file's, so within the last minutes.
      expect(sample(before, 'burnrate_oldest_event_timestamp_seconds')).toBeGreaterThan(Date.now() / 1000 - 600)
      expect(sample(before, 'burnrate_oldest_event_timestamp_seconds')).toBeLessThanOrEqual(Date.now() / 1000)
      const merges = sample(before, 'burnrate_clickhouse_merges_total')
      const seconds = sample(before, 'burnrate_clickhouse_merge_seconds_total')
      await h.services.clickhouse.command({ query: 'OPTIMIZE TABLE events FINAL' })
      // A read is reused for a second: scrape until the merge shows, within a deadline.
      const deadline = Date.now() + 10_000
      let after = before
      while (sample(after, 'burnrate_clickhouse_merges_total') === merges && Date.now() < deadline) after = await scrape()
      expect(sample(after, 'burnrate_clickhouse_merges_total')).toBeGreaterThan(merges)
      expect(sample(after, 'burnrate_clickhouse_merge_seconds_total')).toBeGreaterThanOrEqual(seconds)
    } finally {
      server.close()
    }
  })

  it('is accepted by Prometheus\'s own parser (promtool check metrics): counters end in _total, nothing else does', async () => {
    const promtool = '/usr/bin/promtool'
    if (!existsSync(promtool)) {
      // .ci/run installs Debian's prometheus package: CI never skips this.
      if (process.env.CI) throw new Error(`${promtool} is missing: .ci/run installs it`)
      console.warn(`skipped: ${promtool} is missing (apt-get install prometheus)`)
      return
    }
    const text = await h.services.metrics.registry.metrics()
    const check = spawnSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' })
    expect(check.stdout + check.stderr).toBe('')
    expect(check.status).toBe(0)
    for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      if (type === 'counter') expect(name, `${name} is a counter`).toMatch(/_total$/)
      else expect(name, `${name} is a ${type}`).not.toMatch(/_total$/)
    }
  })
})
