import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../src/config.ts'

describe('loadConfig', () => {
  it('defaults to the embedded engine under ./data with the documented limits', () => {
    const c = loadConfig({})
    expect(c.clickhouse.kind).toBe('embedded')
    expect(c.clickhouse.kind === 'embedded' && c.clickhouse.path).toMatch(/\/data\/clickhouse$/)
    expect(c).toMatchObject({ port: 8080, host: '127.0.0.1', rateLimits: { events: 120 }, webhook: { allowPrivate: false } })
    expect(Object.isFrozen(c)).toBe(true)
  })

  it('uses a ClickHouse server when CLICKHOUSE_URL is set', () => {
    const c = loadConfig({ CLICKHOUSE_URL: 'http://ch:8123', CLICKHOUSE_USER: 'u', EVENTS_RATE_LIMIT: '300', WEBHOOK_ALLOW_PRIVATE: 'true' })
    expect(c.clickhouse).toEqual({ kind: 'server', url: 'http://ch:8123', username: 'u', password: undefined })
    expect(c.rateLimits.events).toBe(300)
    expect(c.webhook.allowPrivate).toBe(true)
  })

  it('names every bad variable in one error', () => {
    expect(() => loadConfig({ PORT: 'eighty', EVENTS_RATE_LIMIT: '0', CLICKHOUSE_URL: 'ftp://x', LOG_LEVEL: 'loud' })).toThrow(ConfigError)
    try {
      loadConfig({ PORT: 'eighty', EVENTS_RATE_LIMIT: '0', CLICKHOUSE_URL: 'ftp://x', LOG_LEVEL: 'loud' })
    } catch (err) {
      const message = (err as Error).message
      for (const name of ['PORT', 'EVENTS_RATE_LIMIT', 'CLICKHOUSE_URL', 'LOG_LEVEL']) expect(message).toContain(name)
    }
  })

  it('reads RUN_ABANDONED_AFTER as hours, or a number with a unit m, h or d (24 h by default)', () => {
    expect(loadConfig({}).runAbandonedAfterMs).toBe(24 * 3_600_000)
    const cases: Array<[string, number]> = [['24', 86_400_000], ['1.5', 5_400_000], ['90m', 5_400_000], ['36h', 129_600_000], ['7d', 604_800_000], [' 2 h ', 7_200_000], ['1m', 60_000], ['366d', 366 * 86_400_000]]
    for (const [value, ms] of cases) expect(loadConfig({ RUN_ABANDONED_AFTER: value }).runAbandonedAfterMs, value).toBe(ms)
    for (const value of ['0', '0.5m', '367d', '-1h', '1w', 'h', 'one day', '1e3']) {
      expect(() => loadConfig({ RUN_ABANDONED_AFTER: value }), value).toThrow(/RUN_ABANDONED_AFTER/)
    }
  })

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ PORT: '', CLICKHOUSE_URL: '' }).port).toBe(8080)
  })
})
