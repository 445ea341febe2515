import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startClickHouseServer } from './helpers/clickhouse-server.ts'
import { api, cleanup, freshDataDir, lastLine, nano, runCli, startServe, waitFor, type ServerProcess } from './helpers/process.ts'
import { startRedis } from './helpers/redis.ts'

/**
 * An upgrade from the release v0.1.0 to this checkout, with real processes: v0.1.0 runs from
 * a git worktree of its commit (made here, removed after), writes through its own API and
 * CLI, and is stopped (SIGTERM) or killed (kill -9, with events still in its journal); this
 * checkout then starts on the same DATA_DIR, or the same Redis and ClickHouse, and must find
 * every event, total, config, pause and key as they were, count nothing twice, and go on
 * accepting and pricing events.
 *
 * v0.1.0 runs on this checkout's node_modules (symlinked): its dependencies are a subset at
 * the same versions, and it starts with them. Slow: about a minute on a shared 2-core machine
 * (four scenarios, each starting two releases, fresh schemas migrated by both).
 */

const V010 = '2ea8764ed13e987fd7114af29b5b0e2b5a2ac090'
const ROOT = fileURLToPath(new URL('..', import.meta.url))
const git = (...args: string[]) => execFileSync('git', ['-C', ROOT, ...args], { encoding: 'utf8' }).trim()

let releaseDir: string
let oldBin: string

beforeAll(() => {
  // The tag, where the repository has it, is that commit.
  if (git('tag', '--list', 'v0.1.0') === 'v0.1.0') expect(git('rev-parse', 'v0.1.0^{commit}')).toBe(V010)
  releaseDir = join(mkdtempSync(join(tmpdir(), 'burnrate-v0.1.0-')), 'burnrate')
  git('worktree', 'add', '--detach', releaseDir, V010)
  symlinkSync(realpathSync(join(ROOT, 'node_modules')), join(releaseDir, 'node_modules'))
  oldBin = join(releaseDir, 'bin', 'burnrate.js')
}, 60_000)

afterAll(() => {
  if (releaseDir) git('worktree', 'remove', '--force', releaseDir)
  if (releaseDir) rmSync(join(releaseDir, '..'), { recursive: true, force: true })
})

afterEach(() => cleanup())

const COST = 0.0075 // gpt-4o, 1000 input and 500 output tokens

interface Acked {
  user: string
  agent: string
  eventId: string
  costNano: number
}

/** What v0.1.0 was told and answered, and what it showed before it went away. */
interface Before {
  keys: Record<'alice' | 'bob', string>
  /** A key of alice's that v0.1.0 revoked. */
  revoked: string
  keyList: string
  acked: Acked[]
  holdId: string
  agents: Record<string, unknown[]>
  details: Record<string, unknown>
}

const SUMMARY = ['agent_id', 'total_cost_usd', 'llm_calls', 'cost_threshold_usd', 'is_paused', 'paused_reason'] as const
const DETAIL = ['total_cost_usd', 'llm_calls', 'is_paused', 'paused_reason', 'paused_at', 'config'] as const

function pick(o: Record<string, unknown>, fields: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(fields.filter((f) => f in o).map((f) => [f, o[f]]))
}

/** Keys made with v0.1.0's `burnrate keys create` (and one revoked with its `keys revoke`). */
async function oldKeys(env: Record<string, string>): Promise<Pick<Before, 'keys' | 'revoked'>> {
  const create = async (user: string, name: string) => {
    const r = await runCli(['keys', 'create', '--user', user, '--name', name], env, 30_000, oldBin)
    expect(r.code, r.stderr).toBe(0)
    return lastLine(r.stdout)
  }
  const alice = await create('alice', 'upgrade')
  const bob = await create('bob', 'upgrade')
  const revoked = await create('alice', 'old')
  expect((await runCli(['keys', 'revoke', revoked.slice(3, 15)], env, 30_000, oldBin)).code).toBe(0)
  return { keys: { alice, bob }, revoked }
}

/** Configs, events of several agents, a budget pause, a manual pause and a hold, through v0.1.0's API. */
async function writeThrough(server: ServerProcess, keys: Before['keys']): Promise<Pick<Before, 'acked' | 'holdId'>> {
  const { alice } = keys
  const ok = async (path: string, key: string, body: unknown) => {
    const res = await api(server.url, 'POST', path, key, body)
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    return res.body
  }
  await ok('/config', alice, { agent_id: 'researcher', cost_threshold_usd: 5 })
  await ok('/config', alice, { agent_id: 'budgeted', cost_threshold_usd: 0.02, alert_at: [0.5] })
  await ok('/config/pause', alice, { agent_id: 'manual', is_paused: true })
  const hold = await ok('/holds', alice, { agent_id: 'researcher', model: 'gpt-4o', input_tokens: 1000, max_output_tokens: 1000, hold_id: randomUUID(), ttl_seconds: 3600 })
  expect(hold.allowed).toBe(true)

  const acked: Acked[] = []
  const send = async (user: 'alice' | 'bob', agent: string, event: Record<string, unknown>) => {
    const eventId = randomUUID()
    const body = await ok('/events', keys[user], { agent_id: agent, event_id: eventId, ...event })
    acked.push({ user, agent, eventId, costNano: nano(body.cost_usd) })
    return body
  }
  const llm = { event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, metadata: { team: 'upgrade' } }
  for (let i = 0; i < 6; i++) await send('alice', 'researcher', llm)
  await send('alice', 'researcher', { event_type: 'tool_call', tool_name: 'search' })
  for (let i = 0; i < 4; i++) await send('alice', 'writer', llm)
  const budgeted = []
  for (let i = 0; i < 4; i++) budgeted.push(await send('alice', 'budgeted', llm))
  expect(budgeted.map((b) => b.paused)).toEqual([false, false, true, true]) // 3 * 0.0075 > 0.02
  expect((await send('alice', 'manual', llm)).paused).toBe(true)
  for (let i = 0; i < 3; i++) await send('bob', 'researcher', llm)
  // A retry of an acknowledged event is acknowledged again and counted once.
  const first = acked[0]!
  const again = await ok('/events', alice, { agent_id: first.agent, event_id: first.eventId, ...llm })
  expect(nano(again.cost_usd)).toBe(first.costNano)
  expect(acked.map((a) => a.costNano)).toEqual(acked.map((_, i) => (i === 6 ? 0 : nano(COST)))) // the 7th is the tool call
  return { acked, holdId: hold.hold_id }
}

/** What a release shows of the users' agents: the summaries, and each agent's detail. */
async function snapshot(server: ServerProcess, keys: Before['keys']): Promise<Pick<Before, 'agents' | 'details'>> {
  const agents: Record<string, unknown[]> = {}
  const details: Record<string, unknown> = {}
  for (const [user, key] of Object.entries(keys)) {
    const list = await api(server.url, 'GET', '/agents', key)
    expect(list.status).toBe(200)
    agents[user] = list.body.agents.map((a: Record<string, unknown>) => pick(a, SUMMARY))
    for (const a of list.body.agents as Array<{ agent_id: string }>) {
      const detail = await api(server.url, 'GET', `/agents/${a.agent_id}`, key)
      expect(detail.status).toBe(200)
      details[`${user}/${a.agent_id}`] = pick(detail.body, DETAIL)
    }
  }
  return { agents, details }
}

async function keyList(env: Record<string, string>, bin?: string): Promise<string> {
  const r = await runCli(['keys', 'list'], env, 30_000, bin)
  expect(r.code, r.stderr).toBe(0)
  return r.stdout
}

/** v0.1.0 on `env`: keys, writes and what it shows, before it is stopped or killed. */
async function runOldRelease(env: Record<string, string>, serveEnv: Record<string, string> = {}): Promise<{ server: ServerProcess; before: Before }> {
  const { keys, revoked } = await oldKeys(env)
  const server = await startServe(env.DATA_DIR!, { ...env, ...serveEnv }, 60_000, oldBin)
  const written = await writeThrough(server, keys)
  const shown = await snapshot(server, keys)
  const before: Before = { keys, revoked, keyList: await keyList(env, oldBin), ...written, ...shown }
  return { server, before }
}

/** The events ClickHouse holds for the acknowledged ones, read through the new release's API. */
async function storedEvents(server: ServerProcess, before: Before): Promise<Map<string, number[]>> {
  const byId = new Map<string, number[]>()
  for (const [user, key] of Object.entries(before.keys)) {
    for (const agent of new Set(before.acked.filter((a) => a.user === user).map((a) => a.agent))) {
      const res = await api(server.url, 'GET', `/agents/${agent}?limit=1000`, key)
      for (const e of res.body.events as Array<{ event_id: string; cost_usd: number }>) {
        byId.set(e.event_id, [...(byId.get(e.event_id) ?? []), nano(e.cost_usd)])
      }
    }
  }
  return byId
}

/**
 * The new release on the old one's data: everything as v0.1.0 showed it, every acknowledged
 * event stored once (count and sum), the dedup of event ids kept, and new events priced.
 * `count` reads ClickHouse's events table where the test can reach it (a server).
 */
async function checkUpgrade(server: ServerProcess, env: Record<string, string>, before: Before, count?: () => Promise<{ n: number; sum: number; ids: number }>): Promise<void> {
  // Every acknowledged event stored exactly once, none other.
  const stored = await waitFor(
    async () => {
      const byId = await storedEvents(server, before)
      return before.acked.every((a) => byId.has(a.eventId)) ? byId : undefined
    },
    30_000,
    'every acknowledged event in ClickHouse',
  )
  expect([...stored.keys()].sort()).toEqual(before.acked.map((a) => a.eventId).sort())
  for (const a of before.acked) expect(stored.get(a.eventId), a.eventId).toEqual([a.costNano])
  if (count) {
    const sum = before.acked.reduce((s, a) => s + a.costNano, 0)
    expect(await count()).toEqual({ n: before.acked.length, sum, ids: before.acked.length })
  }

  // Totals, pauses, configs and keys as v0.1.0 showed them.
  const after = await snapshot(server, before.keys)
  expect(after.agents).toEqual(before.agents)
  // A config shows the fields added since v0.1.0 too (their defaults); those it showed are the same.
  const configs = Object.fromEntries(
    Object.entries(after.details).map(([agent, d]) => {
      const { config, ...rest } = d as { config: Record<string, unknown> | null }
      const old = (before.details[agent] as { config: Record<string, unknown> | null } | undefined)?.config
      return [agent, { ...rest, config: config && old ? pick(config, Object.keys(old)) : config }]
    }),
  )
  expect(configs).toEqual(before.details)
  expect(await keyList({ DATA_DIR: env.DATA_DIR!, ...(env.CLICKHOUSE_URL ? { CLICKHOUSE_URL: env.CLICKHOUSE_URL } : {}) })).toBe(before.keyList)
  expect(before.keyList).toMatch(new RegExp(`^${before.revoked.slice(3, 15)}\\talice\\told\\t.*\\t\\d{4}-\\d\\d-\\d\\dT\\S+$`, 'm'))
  // What hourly_cost holds (the breakdown by model): each stored event once there too.
  for (const [user, key] of Object.entries(before.keys)) {
    for (const agent of new Set(before.acked.filter((a) => a.user === user).map((a) => a.agent))) {
      const detail = await api(server.url, 'GET', `/agents/${agent}`, key)
      const byModel = (detail.body.cost_by_model as Array<{ cost_usd: number }>).reduce((s, m) => s + nano(m.cost_usd), 0)
      expect(byModel, `${user}/${agent}`).toBe(before.acked.filter((a) => a.user === user && a.agent === agent).reduce((s, a) => s + a.costNano, 0))
    }
  }

  // A client retrying an event v0.1.0 acknowledged: acknowledged again, not counted again.
  const { alice, bob } = before.keys
  const total = (user: string, agent: string) => (before.agents[user] as Array<{ agent_id: string; total_cost_usd: number }>).find((a) => a.agent_id === agent)!.total_cost_usd
  const first = before.acked[0]!
  const llm = { event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500 }
  const retry = await api(server.url, 'POST', '/events', alice, { agent_id: first.agent, event_id: first.eventId, ...llm })
  expect(retry.status).toBe(200)
  expect(nano(retry.body.total_cost_24h)).toBe(nano(total('alice', first.agent)))

  // New events: accepted, priced, added to the totals; the pauses hold.
  const writer = await api(server.url, 'POST', '/events', alice, { agent_id: 'writer', event_id: randomUUID(), ...llm })
  expect(writer.status).toBe(200)
  expect(nano(writer.body.cost_usd)).toBe(nano(COST))
  expect(nano(writer.body.total_cost_24h)).toBe(nano(total('alice', 'writer')) + nano(COST))
  expect(writer.body.paused).toBe(false)
  const budgeted = await api(server.url, 'POST', '/events', alice, { agent_id: 'budgeted', event_id: randomUUID(), ...llm })
  expect(budgeted.body).toMatchObject({ paused: true, paused_reason: 'budget' })
  const manual = await api(server.url, 'POST', '/events', alice, { agent_id: 'manual', event_id: randomUUID(), ...llm })
  expect(manual.body).toMatchObject({ paused: true, paused_reason: 'manual' })
  const other = await api(server.url, 'POST', '/events', bob, { agent_id: 'researcher', event_id: randomUUID(), ...llm })
  expect(nano(other.body.total_cost_24h)).toBe(nano(total('bob', 'researcher')) + nano(COST))
  // The call v0.1.0 held budget for reports its cost: counted once, whatever became of the hold.
  const settled = await api(server.url, 'POST', '/events', alice, { agent_id: 'researcher', event_id: randomUUID(), hold_id: before.holdId, ...llm })
  expect(settled.status).toBe(200)
  expect(nano(settled.body.total_cost_24h)).toBe(nano(total('alice', 'researcher')) + nano(COST))
  // The revoked key stays revoked; the others work (they answered every read above).
  expect((await api(server.url, 'GET', '/agents', before.revoked)).status).toBe(401)
}

describe('upgrade from v0.1.0, embedded', () => {
  it('stopped with SIGTERM: the current release finds everything on the same DATA_DIR', async () => {
    const env = { DATA_DIR: freshDataDir() }
    const { server, before } = await runOldRelease(env)
    server.kill('SIGTERM')
    expect(await server.exited).toEqual({ code: 0, signal: null })
    const upgraded = await startServe(env.DATA_DIR, {}, 60_000)
    expect(upgraded.logs.find((l) => l.msg === 'applied migrations')?.applied).toEqual(expect.arrayContaining(['0017_period_budgets', '0024_record_deduplication']))
    await checkUpgrade(upgraded, env, before)
  }, 120_000)

  it('killed with kill -9 while its journal holds events not yet shipped: they are shipped once', async () => {
    const env = { DATA_DIR: freshDataDir() }
    // The shipper waits ten minutes: every event stays in the segment log until the kill.
    const { server, before } = await runOldRelease(env, { SHIP_INTERVAL_MS: '600000' })
    const ready = await api(server.url, 'GET', '/readyz', null)
    expect(ready.body.journal.rows).toBeGreaterThanOrEqual(before.acked.length)
    server.kill('SIGKILL')
    await server.exited
    const upgraded = await startServe(env.DATA_DIR, {}, 60_000)
    await checkUpgrade(upgraded, env, before)
  }, 120_000)
})

describe('upgrade from v0.1.0, with Redis and a ClickHouse server', () => {
  let stores: Array<{ stop(): Promise<void> }> = []
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.stop()
  })

  /** A Redis with AOF in a directory of its own and a ClickHouse behind its HTTP interface, both fresh. */
  async function freshStores(): Promise<{ env: Record<string, string>; count: () => Promise<{ n: number; sum: number; ids: number }> }> {
    const [redis, clickhouse] = await Promise.all([startRedis({ dir: mkdtempSync(join(tmpdir(), 'burnrate-upgrade-redis-')) }), startClickHouseServer()])
    stores = [redis, clickhouse]
    const count = async () => {
      const q = 'SELECT count() AS n, sum(cost_nano) AS sum, uniqExact(event_id) AS ids FROM events FORMAT JSONEachRow'
      const row = JSON.parse(await (await fetch(`${clickhouse.url}/?query=${encodeURIComponent(q)}`, { method: 'POST' })).text()) as Record<string, string>
      return { n: Number(row.n), sum: Number(row.sum), ids: Number(row.ids) }
    }
    // A short journal lease: the stream of a killed instance is taken over within about a second.
    return { env: { DATA_DIR: freshDataDir(), REDIS_URL: redis.url, CLICKHOUSE_URL: clickhouse.url, JOURNAL_LEASE_MS: '1000' }, count }
  }

  it('stopped with SIGTERM: the current release finds everything in the same Redis and ClickHouse', async () => {
    const { env, count } = await freshStores()
    const { server, before } = await runOldRelease(env)
    server.kill('SIGTERM')
    expect(await server.exited).toEqual({ code: 0, signal: null })
    const upgraded = await startServe(env.DATA_DIR!, env, 60_000)
    await checkUpgrade(upgraded, env, before, count)
  }, 120_000)

  it('killed with kill -9 while its stream holds events not yet shipped: they are shipped once', async () => {
    const { env, count } = await freshStores()
    const { server, before } = await runOldRelease(env, { SHIP_INTERVAL_MS: '600000' })
    expect((await count()).n).toBe(0)
    server.kill('SIGKILL')
    await server.exited
    const upgraded = await startServe(env.DATA_DIR!, env, 60_000)
    await checkUpgrade(upgraded, env, before, count)
  }, 120_000)
})
