import { randomUUID } from 'node:crypto'
import { afterAll, describe, expect, it } from 'vitest'
import { api, cleanup, createKey, drained, freshDataDir, startServe, waitFor } from './helpers/process.ts'
import { freePort, startRedis } from './helpers/redis.ts'

/**
 * No API key, webhook URL or metadata value is ever logged, at any level. A real
 * `burnrate serve` at LOG_LEVEL=trace goes through what logs the most: keys made and used,
 * unknown keys refused, a config with a webhook whose delivery fails, events with metadata
 * (accepted and refused), a pause and its message; then every line it wrote is searched.
 */
afterAll(cleanup)

describe('logs', () => {
  it('never carry an API key, a webhook URL or a metadata value, even at trace level', async () => {
    const dataDir = freshDataDir()
    const server = await startServe(dataDir, { LOG_LEVEL: 'trace', WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_TIMEOUT_MS: '200' })
    try {
      const { key } = await createKey(dataDir, 'alice')
      const secretPath = `/services/T0/B0/${randomUUID()}`
      const webhook = `http://127.0.0.1:${await freePort()}${secretPath}`
      const metadataValue = `metadata-${randomUUID()}`
      const ok = (status: number) => expect(status).toBeLessThan(300)
      ok((await api(server.url, 'POST', '/config', key, { agent_id: 'a', cost_threshold_usd: 0.001, slack_webhook_url: webhook })).status)
      ok((await api(server.url, 'POST', '/events', key, { agent_id: 'a', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, metadata: { note: metadataValue } })).status)
      // Refused events with the value in a bad field and beside one.
      expect((await api(server.url, 'POST', '/events', key, { agent_id: 'a', event_type: 'llm_call', model: 'gpt-4o', metadata: metadataValue })).status).toBe(400)
      expect((await api(server.url, 'POST', '/events', key, { agent_id: 'a', event_type: 'nope', metadata: { note: metadataValue } })).status).toBe(400)
      expect((await api(server.url, 'GET', '/agents', `${key.slice(0, -4)}AAAA`, undefined)).status).toBe(401)
      expect((await api(server.url, 'GET', '/agents/a', key, undefined)).status).toBe(200)
      // The pause's message fails to arrive: the failure is logged (as a warning).
      await waitFor(() => server.logs.find((l) => typeof l.msg === 'string' && l.msg.startsWith('chat webhook')), 10_000, 'the failed delivery logged')
      await drained(server.url)
      const written = server.logs.map((l) => JSON.stringify(l)).join('\n') + server.stderr()
      // The start-up line says what the service runs on.
      expect(server.logs.find((l) => l.msg === 'burnrate is serving')).toMatchObject({
        hotState: 'in process',
        journal: `segment log in ${dataDir}`,
        clickhouse: `embedded (chDB) in ${dataDir}/clickhouse`,
        metrics: 'off (METRICS_PORT unset)',
      })
      // What the test did is in the log (so an absence below means something).
      expect(written).toContain('"url":"/agents/a"')
      expect(written).toContain('chat webhook')
      const [, secret] = /^br_[0-9a-f]{12}_(.+)$/.exec(key)!
      for (const [what, value] of [
        ['the API key', key],
        ["the key's secret", secret!],
        ['the webhook URL', webhook],
        ["the webhook URL's path", secretPath],
        ['a metadata value', metadataValue],
      ]) {
        expect(written.includes(value!), `${what} is in the log`).toBe(false)
      }
    } finally {
      server.kill('SIGTERM')
      await server.exited
    }
  })

  it('say at start-up which Redis the hot state and the journal are on, without its credentials', async () => {
    const redis = await startRedis()
    try {
      await redis.redis.config('SET', 'requirepass', 'pa55-word')
      const url = `redis://:pa55-word@127.0.0.1:${redis.port}`
      const server = await startServe(freshDataDir(), { REDIS_URL: url, METRICS_PORT: '0' })
      try {
        const line = server.logs.find((l) => l.msg === 'burnrate is serving')
        expect(line).toMatchObject({
          hotState: `Redis at redis://127.0.0.1:${redis.port}`,
          journal: `Redis at redis://127.0.0.1:${redis.port} (streams)`,
          metrics: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/),
        })
        expect(server.logs.map((l) => JSON.stringify(l)).join('\n')).not.toContain('pa55-word')
      } finally {
        server.kill('SIGTERM')
        await server.exited
      }
    } finally {
      await redis.redis.config('SET', 'requirepass', '').catch(() => {})
      await redis.stop()
    }
  })
})
