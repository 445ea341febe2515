import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { ConfigError, loadConfig } from '../src/config.ts'
import { applyRetention, retentionChanges } from '../src/storage/retention.ts'
import { eventually, startHarness, unique, type Harness } from './helpers/harness.ts'

// Retention: EVENTS_RETENTION_DAYS, HOURLY_RETENTION_DAYS and AUDIT_RETENTION_DAYS become
// ClickHouse TTLs on the real engine, applied at start-up when they change.

const DAY = 86_400_000

describe('retention settings', () => {
  it('refuses an events retention shorter than what period budgets are rebuilt from, naming why', () => {
    expect(() => loadConfig({ EVENTS_RETENTION_DAYS: '31' })).toThrow(ConfigError)
    expect(() => loadConfig({ EVENTS_RETENTION_DAYS: '31' })).toThrow(/EVENTS_RETENTION_DAYS: must be at least 32: period budgets/)
    expect(loadConfig({ EVENTS_RETENTION_DAYS: '32' }).retention).toEqual({ eventsDays: 32, hourlyDays: null, auditDays: null })
  })

  it('refuses hourly totals kept shorter than the events, or trimmed while the events are kept forever', () => {
    expect(() => loadConfig({ EVENTS_RETENTION_DAYS: '90', HOURLY_RETENTION_DAYS: '60' })).toThrow(/HOURLY_RETENTION_DAYS: must be at least EVENTS_RETENTION_DAYS \(90\)/)
    expect(() => loadConfig({ HOURLY_RETENTION_DAYS: '400' })).toThrow(/HOURLY_RETENTION_DAYS: .*events kept forever/)
    expect(loadConfig({ EVENTS_RETENTION_DAYS: '90', HOURLY_RETENTION_DAYS: '90', AUDIT_RETENTION_DAYS: '1' }).retention).toEqual({ eventsDays: 90, hourlyDays: 90, auditDays: 1 })
  })

  it('keeps everything by default, and takes whole days only', () => {
    expect(loadConfig({}).retention).toEqual({ eventsDays: null, hourlyDays: null, auditDays: null })
    for (const bad of ['0', '-5', '1.5', 'forever', '36501']) expect(() => loadConfig({ AUDIT_RETENTION_DAYS: bad }), bad).toThrow(/AUDIT_RETENTION_DAYS/)
  })
})

describe('retention on the embedded engine', () => {
  it('removes events past EVENTS_RETENTION_DAYS stored before it was set, keeps the hourly totals longer, and is applied once per change', { timeout: 120_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'burnrate-retention-'))
    const now = Date.now()
    const clock = new ManualClock(now - 60 * DAY)
    const user = unique('retention')
    const agent = unique('agent')
    const post = async (h: Harness, key: string, tokens: number) => {
      const r = await h.post('/events', { agent_id: agent, event_type: 'llm_call', model: 'gpt-4o', input_tokens: tokens, output_tokens: 0 }, key)
      expect(r.statusCode, r.body).toBe(200)
    }
    // Events 60 days, 10 days and 0 days old, stored while everything was kept.
    let h = await startHarness({ clock, dataDir })
    const key = await h.key(user)
    await post(h, key, 1000)
    clock.set(now - 10 * DAY)
    await post(h, key, 2000)
    clock.set(now)
    await post(h, key, 3000)
    await h.flush()
    // What `burnrate migrate --dry-run` lists of the settings to come, changing nothing.
    const wanted = { eventsDays: 40, hourlyDays: 90, auditDays: 3650 }
    expect(await retentionChanges(h.services.clickhouse, wanted)).toEqual(['retention.events: 40 days', 'retention.hourly: 90 days', 'retention.audit: 3650 days'])
    expect(await retentionChanges(h.services.clickhouse, wanted)).toHaveLength(3)
    await h.close()

    const env = { EVENTS_RETENTION_DAYS: '40', HOURLY_RETENTION_DAYS: '90', AUDIT_RETENTION_DAYS: '3650' }
    h = await startHarness({ clock, dataDir, env })
    const ch = h.services.clickhouse
    const rows = async (query: string) => (await (await ch.query({ query, query_params: { user }, format: 'JSONEachRow' })).json<Record<string, unknown>>())
    // Without a merge asked for: the ALTER's own rewrite of the stored parts removes them.
    const kept = async () => (await rows('SELECT input_tokens FROM events WHERE user_id = {user:String} ORDER BY timestamp')).map((r) => Number(r.input_tokens))
    await eventually(async () => ((await kept()).length === 2 ? true : undefined), 60_000)
    expect(await kept()).toEqual([2000, 3000])
    const hourly = await rows('SELECT sum(input_tokens) AS t, count() AS n FROM hourly_cost WHERE user_id = {user:String}')
    expect(Number(hourly[0]!.t)).toBe(6000)
    const tables = await rows(`SELECT name, engine_full FROM system.tables WHERE database = currentDatabase() AND name IN ('events', 'hourly_cost', 'runs', 'audit_log')`)
    const ttlOf = (name: string) => /TTL (.*?) SETTINGS/.exec(String(tables.find((t) => t.name === name)!.engine_full))?.[1]
    expect(ttlOf('events')).toBe('toDateTime(timestamp) + toIntervalDay(40)')
    expect(ttlOf('runs')).toBe('toDateTime(last_at) + toIntervalDay(40)')
    expect(ttlOf('hourly_cost')).toBe('hour + toIntervalDay(90)')
    expect(ttlOf('audit_log')).toBe('toDateTime(at) + toIntervalDay(3650)')
    // The two views of cost by dimension keep their rows in inner tables: theirs too.
    const inner = await rows(`SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND startsWith(name, '.inner')`)
    expect(inner.length).toBe(2)
    for (const t of inner) expect(String(t.engine_full)).toContain('TTL hour + toIntervalDay(90)')

    const ready = JSON.parse((await h.app.inject({ method: 'GET', url: '/readyz' })).body)
    expect(ready.retention).toMatchObject({ events_days: 40, hourly_days: 90, audit_days: 3650 })
    // The oldest event kept (this file's only user): the one 10 days old.
    expect(Date.parse(ready.retention.oldest_event_at)).toBe(now - 10 * DAY)
    // Recorded: a start with the same settings alters nothing.
    expect(await applyRetention(ch, h.services.config.retention)).toEqual([])
    await h.close()

    // Unset again: everything is kept from now on.
    h = await startHarness({ clock, dataDir })
    const after = await (await h.services.clickhouse.query({ query: `SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'events'`, format: 'JSONEachRow' })).json<{ engine_full: string }>()
    expect(after[0]!.engine_full).not.toContain('TTL')
    const settings = await (await h.services.clickhouse.query({ query: `SELECT name, argMax(value, applied_at) AS value FROM schema_settings GROUP BY name ORDER BY name`, format: 'JSONEachRow' })).json()
    expect(settings).toEqual([
      { name: 'retention.audit', value: '' },
      { name: 'retention.events', value: '' },
      { name: 'retention.hourly', value: '' },
    ])
    await h.close()
  })
})
