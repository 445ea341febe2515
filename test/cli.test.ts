import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { api, cleanup, createKey, drained, freshDataDir, lastLine, runCli, startServe, withDeadline } from './helpers/process.ts'

// `burnrate` as an operator runs it: real processes on their own DATA_DIR, no mocks.

afterEach(() => cleanup())

const KEY_FORMAT = /^br_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/

/** The rows of `burnrate keys list` (tab-separated, one header line), by key id. */
function parseList(stdout: string): Map<string, { user: string; name: string; rateLimit: string; created: string; revoked: string }> {
  const [header, ...rows] = stdout.trimEnd().split('\n')
  expect(header!.split('\t')).toEqual(['KEY ID', 'USER', 'NAME', 'RATE LIMIT', 'CREATED', 'REVOKED'])
  return new Map(
    rows.map((row) => {
      const [id, user, name, rateLimit, created, revoked] = row.split('\t')
      return [id!, { user: user!, name: name!, rateLimit: rateLimit!, created: created!, revoked: revoked! }]
    }),
  )
}

const event = () => ({ agent_id: 'cli-agent', event_type: 'agent_start', event_id: randomUUID() })

describe('burnrate keys, no server running', () => {
  it('creates, lists and revokes keys, never showing a secret again', async () => {
    const env = { DATA_DIR: freshDataDir() }

    const created = await runCli(['keys', 'create', '--user', 'alice', '--name', 'ci'], env)
    expect(created.code).toBe(0)
    const key = lastLine(created.stdout)
    expect(key).toMatch(KEY_FORMAT)
    const keyId = key.slice(3, 15)

    const listed = await runCli(['keys', 'list'], env)
    expect(listed.code).toBe(0)
    const rows = parseList(listed.stdout)
    expect([...rows.keys()]).toEqual([keyId])
    expect(rows.get(keyId)).toMatchObject({ user: 'alice', name: 'ci', rateLimit: 'default', revoked: '-' })
    expect(Date.parse(rows.get(keyId)!.created)).not.toBeNaN()
    expect(listed.stdout).not.toContain(key)
    expect(listed.stdout).not.toContain(key.slice(16)) // the secret part

    const revoked = await runCli(['keys', 'revoke', keyId], env)
    expect(revoked.code).toBe(0)
    expect(revoked.stdout).toContain(keyId)
    const after = parseList((await runCli(['keys', 'list'], env)).stdout)
    expect(after.get(keyId)).toMatchObject({ user: 'alice', name: 'ci' })
    expect(Date.parse(after.get(keyId)!.revoked)).toBeGreaterThanOrEqual(Date.parse(rows.get(keyId)!.created))

    const unknown = await runCli(['keys', 'revoke', '0123456789ab'], env)
    expect(unknown.code).not.toBe(0)
    expect(unknown.stderr).toContain('0123456789ab')

    const noUser = await runCli(['keys', 'create'], env)
    expect(noUser.code).toBe(2)
    expect(noUser.stderr).toMatch(/--user <user>/)
    expect(noUser.stdout).toBe('')
  }, 60_000)
})

describe('burnrate keys with a server running on the same DATA_DIR', () => {
  it('makes a new key work at once and a revoked key fail at once', async () => {
    const dataDir = freshDataDir()
    // A key created and one revoked while no server runs are seen by the server it starts.
    const early = await createKey(dataDir, 'bob')
    const gone = await createKey(dataDir, 'bob')
    expect((await runCli(['keys', 'revoke', gone.keyId], { DATA_DIR: dataDir })).code).toBe(0)

    const server = await startServe(dataDir)
    expect((await api(server.url, 'POST', '/events', early.key, event())).status).toBe(200)
    expect((await api(server.url, 'POST', '/events', gone.key, event())).status).toBe(401)

    // Through the admin socket: no restart, no cache TTL to wait out.
    const { key, keyId } = await createKey(dataDir, 'carol')
    const ok = await api(server.url, 'POST', '/events', key, event())
    expect(ok.status).toBe(200)
    expect(ok.body).toMatchObject({ ok: true, cost_usd: 0, paused: false })
    expect(parseList((await runCli(['keys', 'list'], { DATA_DIR: dataDir })).stdout).get(keyId)).toMatchObject({ user: 'carol', revoked: '-' })

    const revoked = await runCli(['keys', 'revoke', keyId], { DATA_DIR: dataDir })
    expect(revoked.code).toBe(0)
    const refused = await api(server.url, 'POST', '/events', key, event())
    expect(refused.status).toBe(401)
    expect(refused.body).toMatchObject({ status: 401, code: 'unauthorized' })
    expect((await api(server.url, 'GET', '/agents', key)).status).toBe(401)
    // The other user's key is untouched.
    expect((await api(server.url, 'POST', '/events', early.key, event())).status).toBe(200)

    const unknown = await runCli(['keys', 'revoke', 'ffffffffffff'], { DATA_DIR: dataDir })
    expect(unknown.code).not.toBe(0)
    expect(unknown.stderr).toContain('ffffffffffff')
  }, 60_000)
})

describe('burnrate serve refuses a bad start', () => {
  it.each([
    ['PORT', { PORT: 'abc' }],
    ['CLICKHOUSE_URL', { CLICKHOUSE_URL: 'not-a-url' }],
  ])('exits non-zero at once when %s is invalid, naming it on stderr', async (name, bad) => {
    const started = Date.now()
    const r = await runCli(['serve'], { DATA_DIR: freshDataDir(), PORT: '0', HOST: '127.0.0.1', ...bad }, 10_000)
    expect(r.code).not.toBe(0)
    expect(r.code).not.toBeNull()
    expect(r.stderr).toContain(name)
    expect(r.stdout).not.toContain('burnrate is serving')
    expect(Date.now() - started).toBeLessThan(5000)
  })

  it('exits non-zero when another server runs on the DATA_DIR, and the first keeps serving', async () => {
    const dataDir = freshDataDir()
    const first = await startServe(dataDir)
    const { key } = await createKey(dataDir, 'dave')

    const second = await runCli(['serve'], { DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1' }, 15_000)
    expect(second.code).not.toBe(0)
    expect(second.code).not.toBeNull()
    expect(second.stdout).not.toContain('burnrate is serving')
    expect(second.stderr).toMatch(/another burnrate server is running on this DATA_DIR/)

    expect(first.child.exitCode).toBeNull()
    expect((await api(first.url, 'GET', '/healthz', null)).status).toBe(200)
    expect((await api(first.url, 'GET', '/readyz', null)).status).toBe(200)
    const ok = await api(first.url, 'POST', '/events', key, event())
    expect(ok.status).toBe(200)
    await drained(first.url)
    expect((await api(first.url, 'GET', '/agents/events', key)).body.events.map((e: { event_id: string }) => e.event_id)).toEqual([ok.body.event_id])
    // The key commands still reach the first server through its admin socket.
    expect((await runCli(['keys', 'list'], { DATA_DIR: dataDir })).code).toBe(0)

    first.kill('SIGTERM')
    expect(await withDeadline(first.exited, 15_000, 'no exit after SIGTERM')).toEqual({ code: 0, signal: null })
  }, 60_000)
})
