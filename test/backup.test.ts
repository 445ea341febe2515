import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { api, BIN, cleanup, createKey, drained, freshDataDir, nano, runCli, startServe, waitFor, withDeadline, type ServerProcess } from './helpers/process.ts'

// `burnrate backup` and `burnrate restore` of the embedded store, end to end: a real
// `burnrate serve` under a concurrent writer, the CLI as a child process, a restored DATA_DIR
// served by a new server, every value compared through the API and the CLI.

afterEach(cleanup)

interface Ack {
  user: string
  agentId: string
  costNano: number
}

/**
 * Posts llm_calls with event ids, `concurrency` at a time, over the agents of each key, until
 * stop() is called; stop() resolves once every request sent has been answered.
 */
function startWriter(server: ServerProcess, users: Array<{ user: string; key: string; agents: string[] }>, concurrency = 6) {
  const acked = new Map<string, Ack>()
  const refused: number[] = []
  let stopping = false
  let sent = 0
  const worker = async () => {
    while (!stopping) {
      const n = sent++
      const u = users[n % users.length]!
      const agentId = u.agents[Math.floor(n / users.length) % u.agents.length]!
      const eventId = randomUUID()
      const body = { event_id: eventId, agent_id: agentId, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000 + (n % 97), output_tokens: 500 }
      const res = await api(server.url, 'POST', '/events', u.key, body).catch(() => null)
      // No answer (the server is gone): this worker stops; the test sees it in `refused`.
      if (res === null) return void refused.push(0)
      if (res.status === 200 && res.body?.event_id === eventId) acked.set(eventId, { user: u.user, agentId, costNano: nano(res.body.cost_usd) })
      else refused.push(res.status)
    }
  }
  const workers = Array.from({ length: concurrency }, worker)
  return {
    acked,
    refused,
    /** Resolves once at least `n` events are acknowledged. */
    until: (n: number) => waitFor(() => (acked.size >= n ? true : undefined), 30_000, `${n} acknowledged events`),
    stop: async () => {
      stopping = true
      await Promise.all(workers)
    },
  }
}

/** `burnrate export --format ndjson` of a user's events: one object per stored row. */
async function exportedEvents(dataDir: string, user: string): Promise<Array<{ event_id: string; agent_id: string; cost_nano: number | string }>> {
  const r = await runCli(['export', '--user', user, '--format', 'ndjson'], { DATA_DIR: dataDir }, 30_000)
  expect(r.code, r.stderr).toBe(0)
  return r.stdout
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as { event_id: string; agent_id: string; cost_nano: number | string })
}

/** What the API shows of each agent: its config and pause flag. */
async function agentStates(url: string, key: string, agents: string[]): Promise<Record<string, unknown>> {
  const states: Record<string, unknown> = {}
  for (const agent of agents) {
    const res = await api(url, 'GET', `/agents/${agent}`, key)
    expect(res.status).toBe(200)
    states[agent] = { config: res.body.config, is_paused: res.body.is_paused }
  }
  return states
}

/** `burnrate keys list` without its header: one tab-separated line per key, sorted. */
async function keyList(dataDir: string): Promise<string[]> {
  const r = await runCli(['keys', 'list'], { DATA_DIR: dataDir })
  expect(r.code, r.stderr).toBe(0)
  return r.stdout.trimEnd().split('\n').slice(1).sort()
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a manifest, asserted field by field
type Json = Record<string, any>

function readJson(path: string): Json {
  return JSON.parse(readFileSync(path, 'utf8')) as Json
}

describe('burnrate backup under load, then burnrate restore', () => {
  it('restores exactly the events acknowledged before the backup, once each, with the totals, configs, pauses and keys', async () => {
    const dataDir = freshDataDir()
    const alice = await createKey(dataDir, 'alice')
    const bob = await createKey(dataDir, 'bob')
    const revoked = await createKey(dataDir, 'alice')
    expect((await runCli(['keys', 'revoke', revoked.keyId], { DATA_DIR: dataDir })).code).toBe(0)
    // Shipping every 5 s: the configs and pauses set just after a batch shipped, and the events
    // of the last moments, are still in the journal when the backup is taken.
    const server = await startServe(dataDir, { EVENTS_RATE_LIMIT: '1000000', CONFIG_RATE_LIMIT: '100000', SHIP_INTERVAL_MS: '5000' })
    const users = [
      { user: 'alice', key: alice.key, agents: ['researcher', 'writer', 'critic'] },
      { user: 'bob', key: bob.key, agents: ['planner'] },
    ]
    const writer = startWriter(server, users)
    await writer.until(150)
    // A batch has reached ClickHouse: the journal holds fewer rows than were acknowledged
    // before it was asked (those still count as rows in it until they ship).
    await waitFor(
      async () => {
        const acked = writer.acked.size
        return (await api(server.url, 'GET', '/readyz', null)).body.journal.rows < acked ? true : undefined
      },
      20_000,
      'a first batch shipped',
    )
    for (const [key, agent, threshold] of [[alice.key, 'researcher', 500], [alice.key, 'writer', 700.5], [alice.key, 'critic', 900], [bob.key, 'planner', 800]] as const) {
      expect((await api(server.url, 'POST', '/config', key, { agent_id: agent, cost_threshold_usd: threshold, alert_at: [0.5, 0.9] })).status).toBe(200)
    }
    expect((await api(server.url, 'POST', '/config/pause', alice.key, { agent_id: 'critic', is_paused: true })).status).toBe(200)
    expect((await api(server.url, 'POST', '/config/pause', bob.key, { agent_id: 'planner', is_paused: true })).status).toBe(200)
    expect((await api(server.url, 'POST', '/config/pause', bob.key, { agent_id: 'planner', is_paused: false })).status).toBe(200)
    await writer.until(writer.acked.size + 100)

    const backupDir = join(freshDataDir(), 'backup')
    const before = new Set(writer.acked.keys())
    const backup = await runCli(['backup', '--to', backupDir], { DATA_DIR: dataDir }, 60_000)
    expect(backup.code, backup.stderr).toBe(0)
    expect(backup.stdout).toMatch(/^backed up DATA_DIR .* events \(\d+ in ClickHouse, \d+ in the journal's tail\)/)
    // The server went on taking events during and after the backup.
    await writer.until(writer.acked.size + 100)
    await writer.stop()
    expect(writer.refused).toEqual([])

    const manifest = readJson(join(backupDir, 'manifest.json'))
    expect(manifest).toMatchObject({ format: 'burnrate-backup/1', burnrate_version: expect.any(String), database: 'default' })
    expect(manifest.schema_version).toBeGreaterThanOrEqual(24)
    // Both halves hold events: the shipped ones in ClickHouse's backup, the rest in the journal's tail.
    expect(manifest.clickhouse.rows.events).toBeGreaterThan(0)
    expect(manifest.journal.rows.events).toBeGreaterThan(0)
    expect(manifest.journal.rows.agent_configs).toBe(4)
    expect(manifest.journal.rows.pause_transitions).toBe(3)
    expect(manifest.events).toBe(manifest.clickhouse.rows.events + manifest.journal.rows.events)
    expect(manifest.events).toBeGreaterThanOrEqual(before.size)
    expect(manifest.events).toBeLessThan(writer.acked.size)

    const agentsOf = (key: string) => users.find((u) => u.key === key)!.agents
    const original = {
      alice: await agentStates(server.url, alice.key, agentsOf(alice.key)),
      bob: await agentStates(server.url, bob.key, agentsOf(bob.key)),
      keys: await keyList(dataDir),
    }
    expect(original.alice.critic).toMatchObject({ is_paused: true, config: { cost_threshold_usd: 900 } })
    server.kill('SIGTERM')
    expect((await withDeadline(server.exited, 30_000, 'the server to stop')).code).toBe(0)

    const restoredDir = join(freshDataDir(), 'restored')
    const restore = await runCli(['restore', '--from', backupDir], { DATA_DIR: restoredDir }, 60_000)
    expect(restore.code, restore.stderr).toBe(0)
    expect(restore.stdout).toContain(`${manifest.events} events`)
    const restored = await startServe(restoredDir, { EVENTS_RATE_LIMIT: '1000000' })
    await drained(restored.url)

    // The events: every one acknowledged before the backup began, none twice, each one acknowledged.
    const rows = [...(await exportedEvents(restoredDir, 'alice')), ...(await exportedEvents(restoredDir, 'bob'))]
    const ids = rows.map((r) => r.event_id)
    expect(new Set(ids).size).toBe(ids.length)
    expect(ids.length).toBe(manifest.events)
    const missing = [...before].filter((id) => !ids.includes(id))
    expect(missing).toEqual([])
    const unknown = rows.filter((r) => writer.acked.get(r.event_id)?.agentId !== r.agent_id)
    expect(unknown).toEqual([])
    for (const r of rows) expect(Number(r.cost_nano)).toBe(writer.acked.get(r.event_id)!.costNano)

    // The totals: per agent, the sum of those events, from the hot state the start rebuilt.
    for (const { user, key } of users) {
      const expected = new Map<string, { costNano: number; calls: number }>()
      for (const r of rows) {
        const ack = writer.acked.get(r.event_id)!
        if (ack.user !== user) continue
        const t = expected.get(ack.agentId) ?? { costNano: 0, calls: 0 }
        t.costNano += ack.costNano
        t.calls++
        expected.set(ack.agentId, t)
      }
      const res = await api(restored.url, 'GET', '/agents', key)
      expect(res.status).toBe(200)
      const shown = new Map<string, { costNano: number; calls: number }>(
        res.body.agents.map((a: { agent_id: string; total_cost_usd: number; llm_calls: number }) => [a.agent_id, { costNano: nano(a.total_cost_usd), calls: a.llm_calls }]),
      )
      expect(shown).toEqual(expected)
    }

    // Configs, pauses and keys, as the original had them.
    expect(await agentStates(restored.url, alice.key, agentsOf(alice.key))).toEqual(original.alice)
    expect(await agentStates(restored.url, bob.key, agentsOf(bob.key))).toEqual(original.bob)
    expect(await keyList(restoredDir)).toEqual(original.keys)
    expect((await api(restored.url, 'GET', '/agents', revoked.key)).status).toBe(401)
    // The restored server takes new events and counts them on top.
    const more = await api(restored.url, 'POST', '/events', bob.key, { event_id: randomUUID(), agent_id: 'planner', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 10, output_tokens: 10 })
    expect(more.status).toBe(200)
  }, 180_000)
})

describe('a backup cut short', () => {
  it('leaves the running store unharmed when the CLI or the server is killed mid-backup', async () => {
    const dataDir = freshDataDir()
    const { key } = await createKey(dataDir, 'carol')
    let server = await startServe(dataDir, { EVENTS_RATE_LIMIT: '1000000' })
    const writer = startWriter(server, [{ user: 'carol', key, agents: ['a', 'b'] }], 4)
    await writer.until(100)

    // kill -9 of the CLI once the server has begun copying.
    const first = join(freshDataDir(), 'first')
    const cli = spawn(process.execPath, [BIN, 'backup', '--to', first], { env: { ...process.env, DATA_DIR: dataDir }, stdio: 'ignore' })
    const cliExited = new Promise((resolve) => cli.once('exit', resolve))
    await server.waitForLog((l) => l.msg === 'backup: shipping held, copying' && l.dir === first, 30_000)
    cli.kill('SIGKILL')
    await withDeadline(cliExited, 10_000, 'the backup CLI to die')
    // The server finishes (or fails) the backup it began without its client, and ships again.
    await server.waitForLog((l) => (l.msg === 'backup: taken, shipping resumed' || l.msg === 'backup: failed, shipping resumed') && l.dir === first, 30_000)
    await writer.until(writer.acked.size + 50)
    await writer.stop()
    expect(writer.refused).toEqual([])
    await drained(server.url)
    const totals = async (url: string) => {
      const res = await api(url, 'GET', '/agents', key)
      expect(res.status).toBe(200)
      return res.body.agents.reduce((s: { nano: number; calls: number }, a: { total_cost_usd: number; llm_calls: number }) => ({ nano: s.nano + nano(a.total_cost_usd), calls: s.calls + a.llm_calls }), { nano: 0, calls: 0 })
    }
    const ackedNano = () => [...writer.acked.values()].reduce((s, a) => s + a.costNano, 0)
    expect(await totals(server.url)).toEqual({ nano: ackedNano(), calls: writer.acked.size })
    expect((await exportedEvents(dataDir, 'carol')).length).toBe(writer.acked.size)

    // A second backup works.
    const second = join(freshDataDir(), 'second')
    const again = await runCli(['backup', '--to', second], { DATA_DIR: dataDir }, 60_000)
    expect(again.code, again.stderr).toBe(0)
    expect(readJson(join(second, 'manifest.json')).events).toBe(writer.acked.size)

    // kill -9 of the server during a backup: the CLI fails, the restarted server has every event once.
    const third = join(freshDataDir(), 'third')
    const cut = runCli(['backup', '--to', third], { DATA_DIR: dataDir }, 60_000)
    await server.waitForLog((l) => l.msg === 'backup: shipping held, copying' && l.dir === third, 30_000)
    server.kill('SIGKILL')
    const cutResult = await cut
    if (cutResult.code !== 0) {
      expect(cutResult.code).toBe(1)
      expect(existsSync(join(third, 'manifest.json'))).toBe(false)
      const refused = await runCli(['restore', '--from', third], { DATA_DIR: join(freshDataDir(), 'never') })
      expect(refused.code).toBe(1)
      expect(refused.stderr).toMatch(/manifest\.json/)
    }
    await server.exited
    server = await startServe(dataDir, { EVENTS_RATE_LIMIT: '1000000' })
    await drained(server.url)
    expect(await totals(server.url)).toEqual({ nano: ackedNano(), calls: writer.acked.size })
    expect((await exportedEvents(dataDir, 'carol')).length).toBe(writer.acked.size)
    const fourth = join(freshDataDir(), 'fourth')
    expect((await runCli(['backup', '--to', fourth], { DATA_DIR: dataDir }, 60_000)).code).toBe(0)
  }, 180_000)
})

describe('burnrate backup and restore refuse', () => {
  it('a directory or DATA_DIR that is not empty, a backup of a newer schema, a DATA_DIR without a store or with a restore cut short, and a ClickHouse server', async () => {
    const dataDir = freshDataDir()
    await createKey(dataDir, 'dora')
    const full = freshDataDir()
    writeFileSync(join(full, 'something'), 'x')
    const notEmpty = await runCli(['backup', '--to', full], { DATA_DIR: dataDir })
    expect(notEmpty.code).toBe(1)
    expect(notEmpty.stderr).toMatch(/is not empty/)

    // Without a server, the command opens DATA_DIR itself.
    const dir = join(freshDataDir(), 'b')
    const offline = await runCli(['backup', '--to', dir], { DATA_DIR: dataDir }, 60_000)
    expect(offline.code, offline.stderr).toBe(0)
    expect(readJson(join(dir, 'manifest.json')).events).toBe(0)

    const intoFull = await runCli(['restore', '--from', dir], { DATA_DIR: dataDir })
    expect(intoFull.code).toBe(1)
    expect(intoFull.stderr).toMatch(/DATA_DIR .* is not empty/)

    const newer = join(freshDataDir(), 'newer')
    cpSync(dir, newer, { recursive: true })
    const manifest = readJson(join(newer, 'manifest.json'))
    writeFileSync(join(newer, 'manifest.json'), JSON.stringify({ ...manifest, schema_version: 9999 }))
    const target = join(freshDataDir(), 'target')
    const tooNew = await runCli(['restore', '--from', newer], { DATA_DIR: target })
    expect(tooNew.code).toBe(1)
    expect(tooNew.stderr).toMatch(/schema is version 9999, newer than this burnrate's/)
    expect(existsSync(target)).toBe(false)

    // The backup itself restores into an absent DATA_DIR, and a server starts on it.
    const restored = await runCli(['restore', '--from', dir], { DATA_DIR: target }, 60_000)
    expect(restored.code, restored.stderr).toBe(0)
    expect(await keyList(target)).toEqual(await keyList(dataDir))

    // A restore cut short leaves its marker: no server starts on that DATA_DIR.
    const cut = freshDataDir()
    writeFileSync(join(cut, 'RESTORE_INCOMPLETE'), '')
    const serve = await runCli(['serve'], { DATA_DIR: cut, PORT: '0', HOST: '127.0.0.1' }, 15_000)
    expect(serve.code).toBe(1)
    expect(serve.stderr).toMatch(/holds a restore that did not finish/)

    const nothing = await runCli(['backup', '--to', join(freshDataDir(), 'x')], { DATA_DIR: join(freshDataDir(), 'absent') })
    expect(nothing.code).toBe(1)
    expect(nothing.stderr).toMatch(/holds no burnrate store/)

    const server = await runCli(['backup', '--to', join(freshDataDir(), 'x')], { DATA_DIR: dataDir, CLICKHOUSE_URL: 'http://127.0.0.1:1' })
    expect(server.code).toBe(1)
    expect(server.stderr).toMatch(/docs\/backups\.md/)
  }, 120_000)
})
