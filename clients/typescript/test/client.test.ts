import { randomUUID } from 'node:crypto'
import type Anthropic from '@anthropic-ai/sdk'
import type OpenAI from 'openai'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { api, cleanup, createKey, drained, freshDataDir, nano, startServe, waitFor, type ServerProcess } from '../../../test/helpers/process.ts'
import { startReceiver, type Receiver } from '../../../test/helpers/receiver.ts'
import { Burnrate, BurnrateError, fromAnthropic, fromOpenAIChat, fromOpenAIResponses, type BurnrateOptions } from '../src/index.ts'
import { deadPort, startProxy, type Proxy } from '../../../test/helpers/proxy.ts'

// The TypeScript client against a real `burnrate serve` (embedded chDB, in-memory hot
// state), started for this file. Where a test needs the network to misbehave, a real
// HTTP proxy sits between the client and the server; nothing of burnrate is mocked.

// Known prices, so costs are exact: USD per 1M tokens.
const PRICES = {
  models: {
    'gpt-4o': { input: 2.5, output: 10 },
    'test-openai': { input: 2, output: 8, cache_read: 0.5 },
    'test-anthropic': { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 },
  },
}
/** gpt-4o, 1000 in / 500 out: 0.0025 + 0.005 USD. */
const CALL = { inputTokens: 1000, outputTokens: 500 }
const CALL_NANO = 7_500_000

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

let server: ServerProcess
let dataDir: string
let key: string
let receiver: Receiver
const proxies: Proxy[] = []

beforeAll(async () => {
  const pricesFile = join(freshDataDir(), 'prices.json')
  writeFileSync(pricesFile, JSON.stringify(PRICES))
  dataDir = freshDataDir()
  server = await startServe(dataDir, { PRICES_FILE: pricesFile, WEBHOOK_ALLOW_PRIVATE: 'true', CONFIG_RATE_LIMIT: '100000', READS_RATE_LIMIT: '100000', PAUSE_GRACE_MS: '0' })
  key = (await createKey(dataDir, 'alice', ['--rate-limit', '100000'])).key
  receiver = await startReceiver()
})

afterEach(async () => {
  for (const p of proxies.splice(0)) await p.close()
})

afterAll(async () => {
  await receiver?.close()
  await cleanup()
})

function agentName(what: string): string {
  return `ts-${what}-${randomUUID().slice(0, 8)}`
}

async function proxy(): Promise<Proxy> {
  const p = await startProxy(server.url)
  proxies.push(p)
  return p
}

/** A client with fast retries that collects what it reports; `baseUrl` defaults to the server. */
function make(agentId: string, opts: Partial<BurnrateOptions> = {}): { c: Burnrate; errors: BurnrateError[] } {
  const errors: BurnrateError[] = []
  const c = new Burnrate({
    baseUrl: server.url,
    apiKey: key,
    agentId,
    timeoutMs: 5000,
    retryBaseDelayMs: 10,
    maxRetryDelayMs: 2000,
    onError: (e) => errors.push(e),
    ...opts,
  })
  return { c, errors }
}

/** GET /agents/{id} straight from the server. */
/** The agent as burnrate shows it, once every acknowledged event is readable (its events list included). */
async function agent(agentId: string) {
  await drained(server.url)
  return api(server.url, 'GET', `/agents/${encodeURIComponent(agentId)}`, key)
}

async function setPaused(agentId: string, isPaused: boolean): Promise<void> {
  const res = await api(server.url, 'POST', '/config/pause', key, { agent_id: agentId, is_paused: isPaused })
  expect(res).toEqual({ status: 200, body: { ok: true, agent_id: agentId, is_paused: isPaused } })
}

function eventPosts(p: Proxy) {
  return p.seen.filter((s) => s.method === 'POST' && s.path === '/events')
}

describe('start-up config and the pause signal', () => {
  it('posts the threshold and webhook once, before the first event, even when sends start concurrently', async () => {
    const id = agentName('config')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 0.01, slackWebhookUrl: receiver.url })

    // Nothing is sent at construction: the agent is unknown to the server so far.
    expect(p.seen).toHaveLength(0)
    expect((await agent(id)).status).toBe(404)

    expect(await Promise.all([c.start({ run: 1 }), c.toolCall('search'), c.toolCall('fetch', { url: 'https://example.com' })])).toEqual([true, true, true])
    expect(p.seen.map((s) => `${s.method} ${s.path}`)).toEqual(['POST /config', 'POST /events', 'POST /events', 'POST /events'])
    expect(p.seen[0]!.body).toEqual({ agent_id: id, cost_threshold_usd: 0.01, slack_webhook_url: receiver.url })

    const read = await agent(id)
    expect(read.status).toBe(200)
    expect(read.body.config.cost_threshold_usd).toBe(0.01)
    expect(read.body.config.slack_webhook_url).toEqual(expect.any(String)) // masked, but set
    expect(read.body.is_paused).toBe(false)
    expect(read.body.events).toHaveLength(3)

    expect(await c.end()).toBe(true)
    expect(p.count('POST /config')).toBe(1)
    expect(errors).toEqual([])
  })

  it('send returns true below the budget and false at the crossing, then sends nothing at all', async () => {
    const id = agentName('cross')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 0.01, slackWebhookUrl: receiver.url })

    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(c.paused).toBe(false)
    expect(nano(c.lastResponse!.cost_usd)).toBe(CALL_NANO)
    expect(nano(c.lastResponse!.total_cost_24h)).toBe(CALL_NANO)

    expect(await c.llmCall('gpt-4o', CALL)).toBe(false) // 0.015 > 0.01
    expect(c.paused).toBe(true)
    expect(c.lastResponse!.paused).toBe(true)
    expect(nano(c.lastResponse!.total_cost_24h)).toBe(2 * CALL_NANO)

    const requests = p.seen.length
    expect(requests).toBe(3) // config + 2 events
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(await c.toolCall('search')).toBe(false)
    expect(await c.send({ event_type: 'agent_end' })).toBe(false)
    expect(await c.fromAnthropic('test-anthropic', { input_tokens: 10, output_tokens: 10 })).toBe(false)
    expect(p.seen.length).toBe(requests) // not one request reached the server

    const read = await agent(id)
    expect(read.body).toMatchObject({ agent_id: id, llm_calls: 2, is_paused: true })
    expect(nano(read.body.total_cost_usd)).toBe(2 * CALL_NANO)
    const sentIds = eventPosts(p).map((s) => s.body.event_id as string)
    expect(sentIds).toHaveLength(2)
    for (const eid of sentIds) expect(eid).toMatch(UUID_V4)
    expect(new Set(sentIds).size).toBe(2)
    expect(read.body.events.map((e: { event_id: string }) => e.event_id).sort()).toEqual([...sentIds].sort())

    // The webhook given at start-up is the one told about the pause.
    await waitFor(() => (receiver.messages.some((m) => m.text.includes(id)) ? true : undefined), 10_000, 'the pause message')
    expect(errors).toEqual([])
  })

  it('exposes what is left and when it runs out, and tells onAlert once per level crossed', async () => {
    const id = agentName('alerts')
    const alerts: Array<{ levels: number[]; total: number }> = []
    const { c, errors } = make(id, { costThresholdUsd: 0.03, alertAt: [0.75, 0.5], onAlert: (a) => alerts.push({ levels: a.levels, total: nano(a.response.total_cost_24h) }) })
    expect(c.remainingUsd).toBeUndefined()
    expect(c.projectedExhaustionAt).toBeUndefined()
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(nano(c.remainingUsd!)).toBe(30_000_000 - CALL_NANO)
    // All of it in the last hour: at this rate the rest (3 calls' worth) takes 3 hours.
    const at = c.projectedExhaustionAt!
    expect(at).toBeInstanceOf(Date)
    expect(at.getTime() - Date.now()).toBeGreaterThan(2.9 * 3_600_000)
    expect(at.getTime() - Date.now()).toBeLessThan(3.1 * 3_600_000)
    for (let i = 0; i < 3; i++) expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(alerts).toEqual([
      { levels: [0.5], total: 2 * CALL_NANO },
      { levels: [0.75], total: 3 * CALL_NANO },
    ])
    expect(c.lastResponse!.alerts).toEqual([])
    expect(nano(c.remainingUsd!)).toBe(30_000_000 - 4 * CALL_NANO)
    // A callback that throws does not stop the agent.
    const { c: c2 } = make(agentName('alerts-throw'), { costThresholdUsd: 0.01, onAlert: () => { throw new Error('boom') } })
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {})
    expect(await c2.llmCall('gpt-4o', { inputTokens: 1000, outputTokens: 400 })).toBe(true) // 0.0065 of 0.01: 0.8 not yet
    expect(await c2.llmCall('gpt-4o', { inputTokens: 200, outputTokens: 200 })).toBe(true) // 0.009: 0.8 crossed
    expect(warn).toHaveBeenCalledWith(expect.stringContaining('onAlert threw: boom'))
    warn.mockRestore()
    expect(errors).toEqual([])
    expect(() => make(id, { alertAt: [1] })).toThrow(TypeError)
    expect(() => make(id, { alertAt: [0.5, 0.5] })).toThrow(TypeError)
  })

  it('stops every agent of a user over its fleet budget, says why, and runs again once the fleet is resumed', async () => {
    const fleetKey = (await createKey(dataDir, agentName('fleet-user'), ['--rate-limit', '100000'])).key
    expect((await api(server.url, 'POST', '/config/fleet', fleetKey, { cost_threshold_usd: 0.01 })).status).toBe(200)
    const { c: one, errors } = make('one', { apiKey: fleetKey })
    const { c: two } = make('two', { apiKey: fleetKey, onError: (e) => errors.push(e) })
    expect(await one.llmCall('gpt-4o', CALL)).toBe(true)
    expect(one.pausedReason).toBeNull()
    expect(await two.llmCall('gpt-4o', CALL)).toBe(false) // 0.015 of 0.01
    expect([two.paused, two.pausedReason]).toEqual([true, 'fleet_budget'])
    expect(await one.llmCall('gpt-4o', CALL)).toBe(false)
    expect(one.pausedReason).toBe('fleet_budget')
    expect(await one.toolCall('search')).toBe(false)
    expect((await api(server.url, 'POST', '/config/fleet/pause', fleetKey, { is_paused: false })).body).toEqual({ ok: true, is_paused: false })
    expect(await one.refresh()).toBe(false)
    expect(one.pausedReason).toBeNull()
    expect(await one.llmCall('gpt-4o', CALL)).toBe(true)
    expect(errors).toEqual([])
  })

  it('surfaces a velocity pause and, after refresh(), the flag of an agent something else sends for after its pause', async () => {
    const id = agentName('fast')
    await api(server.url, 'POST', '/config', key, { agent_id: id, velocity_limit_usd: 0.01, velocity_window_minutes: 5 })
    const { c, errors } = make(id)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false) // 0.015 within 5 minutes: over 0.01
    expect([c.paused, c.pausedReason, c.ignoringPause]).toEqual([true, 'velocity', false])
    // Something past this client goes on reporting calls for the agent (no grace on this server).
    expect((await api(server.url, 'POST', '/events', key, { agent_id: id, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500 })).body.paused).toBe(true)
    expect(await c.refresh()).toBe(true)
    expect([c.pausedReason, c.ignoringPause]).toEqual(['velocity', true])
    expect(errors).toEqual([])
  })

  it('after an operator resumes the agent, refresh() sees it and send() reports again', async () => {
    const id = agentName('resume')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 0.01 })
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)

    // Still paused on the server: refresh() says so.
    expect(await c.refresh()).toBe(true)
    expect(c.paused).toBe(true)
    expect(p.count('GET /agents/')).toBe(1)

    await setPaused(id, false)
    // The client learns of it only when it asks; until then it still sends nothing.
    expect(c.paused).toBe(true)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(eventPosts(p)).toHaveLength(2)

    expect(await c.refresh()).toBe(false)
    expect(c.paused).toBe(false)
    // Resumed over budget: a manual resume keeps auto-pause off until the total is back at or
    // under the threshold, so the agent runs on.
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect((await agent(id)).body).toMatchObject({ llm_calls: 3, is_paused: false })

    // A manual pause reaches the client in the next answer.
    await setPaused(id, true)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(c.paused).toBe(true)
    expect((await agent(id)).body).toMatchObject({ llm_calls: 4, is_paused: true })
    expect(errors).toEqual([])
  })

  it('refresh(): an agent the server does not know is not paused; a 404 of a wrong baseUrl is an error', async () => {
    const p = await proxy()
    const { c, errors } = make(agentName('unknown'), { baseUrl: p.url })
    expect(await c.refresh()).toBe(false)
    expect(p.seen.map((s) => s.status)).toEqual([404])
    expect(errors).toEqual([])

    const wrong = make(agentName('wrong'), { baseUrl: `${server.url}/burnrate` })
    expect(await wrong.c.refresh()).toBe(false)
    expect(wrong.errors).toHaveLength(1)
    expect(wrong.errors[0]).toMatchObject({ operation: 'refresh', status: 404, code: 'not_found', retryable: false, attempts: 1 })
  })

  it('waitUntilResumed() polls until an operator resumes the agent', async () => {
    const id = agentName('wait')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url })
    expect(await c.start()).toBe(true)
    await setPaused(id, true)
    expect(await c.refresh()).toBe(true)

    const started = Date.now()
    const waiting = c.waitUntilResumed({ pollIntervalMs: 50, timeoutMs: 15_000 })
    await waitFor(() => (p.count('GET /agents/') >= 4 ? true : undefined), 5000, 'a few polls')
    expect(c.paused).toBe(true)
    await setPaused(id, false)
    expect(await waiting).toBe(true)
    expect(Date.now() - started).toBeLessThan(10_000)
    expect(c.paused).toBe(false)
    expect(await c.end()).toBe(true)
    expect(errors).toEqual([])
  })

  it('waitUntilResumed() resolves false at its timeout and when its signal aborts', async () => {
    const id = agentName('giveup')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url })
    expect(await c.start()).toBe(true)
    await setPaused(id, true)

    let t0 = Date.now()
    expect(await c.waitUntilResumed({ pollIntervalMs: 50, timeoutMs: 300 })).toBe(false)
    let took = Date.now() - t0
    expect(took).toBeGreaterThanOrEqual(280)
    expect(took).toBeLessThan(3000)
    expect(c.paused).toBe(true)

    const ac = new AbortController()
    setTimeout(() => ac.abort(), 100)
    t0 = Date.now()
    expect(await c.waitUntilResumed({ pollIntervalMs: 60_000, signal: ac.signal })).toBe(false)
    took = Date.now() - t0
    expect(took).toBeLessThan(3000)

    const before = p.seen.length
    expect(await c.waitUntilResumed({ signal: AbortSignal.abort() })).toBe(false)
    expect(p.seen.length).toBe(before)
    expect(errors).toEqual([])
  })
})

describe('retries and idempotency', () => {
  it('a retry after a cut connection carries the same event_id and the server counts the event once', async () => {
    const id = agentName('cut')
    const p = await proxy()
    p.on('POST /events', { kind: 'cut' }) // the server stores it, the client never hears back
    const { c, errors } = make(id, { baseUrl: p.url })

    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    const posts = eventPosts(p)
    expect(posts.map((s) => s.action)).toEqual(['cut', 'forward'])
    expect(posts[1]!.body.event_id).toBe(posts[0]!.body.event_id)
    expect(posts[0]!.status).toBeUndefined()
    expect(posts[1]!.status).toBe(200)
    expect(c.lastResponse).toMatchObject({ event_id: posts[0]!.body.event_id, duplicate: true, paused: false })
    expect(nano(c.lastResponse!.cost_usd)).toBe(CALL_NANO)
    expect(nano(c.lastResponse!.total_cost_24h)).toBe(CALL_NANO)

    const read = await agent(id)
    expect(read.body.llm_calls).toBe(1)
    expect(nano(read.body.total_cost_usd)).toBe(CALL_NANO)
    expect(read.body.events.map((e: { event_id: string }) => e.event_id)).toEqual([posts[0]!.body.event_id])
    expect(errors).toEqual([])
  })

  it('a retry after a timeout is just as safe', async () => {
    const id = agentName('timeout')
    const p = await proxy()
    p.on('POST /events', { kind: 'delay', ms: 2000 }) // stored at once, answered too late
    const { c, errors } = make(id, { baseUrl: p.url, timeoutMs: 400 })

    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    const posts = eventPosts(p)
    expect(posts).toHaveLength(2)
    expect(posts[1]!.body.event_id).toBe(posts[0]!.body.event_id)
    expect(c.lastResponse!.duplicate).toBe(true)
    expect((await agent(id)).body.llm_calls).toBe(1)
    expect(errors).toEqual([])
  })

  it('429 waits for Retry-After, then the event goes through', async () => {
    const id = agentName('429')
    const p = await proxy()
    p.on('POST /events', { kind: 'reply', status: 429, headers: { 'retry-after': '1' }, body: { type: 'about:blank', title: 'Too Many Requests', status: 429, code: 'rate_limited', detail: 'slow down' } })
    const { c, errors } = make(id, { baseUrl: p.url })

    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    const posts = eventPosts(p)
    expect(posts.map((s) => s.status)).toEqual([429, 200])
    expect(posts[1]!.body.event_id).toBe(posts[0]!.body.event_id)
    const gap = posts[1]!.at - posts[0]!.at
    expect(gap).toBeGreaterThanOrEqual(900)
    expect(gap).toBeLessThan(5000)
    expect((await agent(id)).body.llm_calls).toBe(1)
    expect(errors).toEqual([])
  })

  it('a Retry-After longer than maxRetryDelayMs is capped', async () => {
    const p = await proxy()
    p.on('POST /events', { kind: 'reply', status: 429, headers: { 'retry-after': '120' }, body: { status: 429, code: 'rate_limited' } })
    const { c, errors } = make(agentName('cap'), { baseUrl: p.url, maxRetryDelayMs: 200 })
    const t0 = Date.now()
    expect(await c.start()).toBe(true)
    expect(Date.now() - t0).toBeLessThan(5000) // not the 120 s asked for
    expect(eventPosts(p).map((s) => s.status)).toEqual([429, 200])
    expect(errors).toEqual([])
  })

  it('5xx is retried with backoff; the retries are bounded by maxRetries', async () => {
    const p = await proxy()
    p.on('POST /events', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    p.on('POST /events', { kind: 'reply', status: 500, body: { status: 500, code: 'internal' } })
    const ok = make(agentName('5xx'), { baseUrl: p.url })
    expect(await ok.c.start()).toBe(true)
    const posts = eventPosts(p)
    expect(posts.map((s) => s.status)).toEqual([503, 500, 200])
    expect(new Set(posts.map((s) => s.body.event_id)).size).toBe(1)
    expect(ok.errors).toEqual([])

    // Always 503: 1 + maxRetries attempts, then one report; the fail mode decides the answer.
    const down = await proxy()
    down.on('POST /events', { kind: 'reply', status: 503, headers: { 'retry-after': '0' }, body: { status: 503, code: 'store_unavailable', detail: 'ClickHouse is down' } }, 100)
    const open = make(agentName('5xx-open'), { baseUrl: down.url, maxRetries: 2 })
    expect(await open.c.start()).toBe(true)
    expect(down.count('POST /events')).toBe(3)
    expect(open.errors).toHaveLength(1)
    const err = open.errors[0]!
    expect(err).toBeInstanceOf(BurnrateError)
    expect(err).toMatchObject({ operation: 'event', status: 503, code: 'store_unavailable', retryable: true, attempts: 3, eventId: down.seen[0]!.body.event_id })
    expect(err.message).toContain('ClickHouse is down')

    const closed = make(agentName('5xx-closed'), { baseUrl: down.url, maxRetries: 0, failMode: 'closed' })
    expect(await closed.c.start()).toBe(false)
    expect(down.count('POST /events')).toBe(4)
    expect(closed.errors).toHaveLength(1)
  })

  it('4xx other than 429 is final: a wrong key is tried once', async () => {
    const p = await proxy()
    const badKey = `br_000000000000_${'x'.repeat(43)}`
    const open = make(agentName('401'), { baseUrl: p.url, apiKey: badKey })
    expect(await open.c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(p.seen.map((s) => s.status)).toEqual([401])
    expect(open.errors).toHaveLength(1)
    expect(open.errors[0]).toMatchObject({ operation: 'event', status: 401, code: 'unauthorized', retryable: false, attempts: 1 })
    expect(open.errors[0]!.problem).toMatchObject({ status: 401, code: 'unauthorized' })

    const closed = make(agentName('401'), { baseUrl: p.url, apiKey: badKey, failMode: 'closed' })
    expect(await closed.c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(p.seen).toHaveLength(2)
  })

  it('a failed start-up config is reported, the event still recorded, and the config retried on the next send', async () => {
    const id = agentName('config-retry')
    const p = await proxy()
    p.on('POST /config', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 5, maxRetries: 0 })

    expect(await c.start()).toBe(true) // fail-open
    expect(errors.map((e) => [e.operation, e.status])).toEqual([['config', 503]])
    expect(p.seen.map((s) => `${s.method} ${s.path} ${s.status}`)).toEqual(['POST /config 503', 'POST /events 200'])
    expect((await agent(id)).body.config).toBeNull()

    expect(await c.toolCall('search')).toBe(true)
    expect(p.seen.map((s) => `${s.method} ${s.path} ${s.status}`).slice(2)).toEqual(['POST /config 200', 'POST /events 200'])
    expect((await agent(id)).body.config.cost_threshold_usd).toBe(5)

    expect(await c.end()).toBe(true)
    expect(p.count('POST /config')).toBe(2)
    expect(errors).toHaveLength(1)

    // Fail-closed: the send whose config failed says stop (its event is still recorded).
    const id2 = agentName('config-closed')
    p.on('POST /config', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    const closed = make(id2, { baseUrl: p.url, costThresholdUsd: 5, maxRetries: 0, failMode: 'closed' })
    expect(await closed.c.start()).toBe(false)
    expect((await agent(id2)).body.events).toHaveLength(1)
    expect(await closed.c.end()).toBe(true)
    expect((await agent(id2)).body.config.cost_threshold_usd).toBe(5)
  })
})

describe('fail modes on a dead server', () => {
  it('fail-open: every call resolves true, onError gets Errors, nothing is thrown', async () => {
    const port = await deadPort()
    const { c, errors } = make(agentName('dead-open'), { baseUrl: `http://127.0.0.1:${port}`, maxRetries: 1, costThresholdUsd: 1 })
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await c.toolCall('search')).toBe(true)
    expect(await c.fromOpenAIChat('gpt-4o', { prompt_tokens: 10, completion_tokens: 5 })).toBe(true)
    expect(c.paused).toBe(false)
    // Each send: the start-up config (retried on every send until it succeeds), then the event.
    expect(errors.map((e) => e.operation)).toEqual(['config', 'event', 'config', 'event', 'config', 'event'])
    for (const e of errors) {
      expect(e).toBeInstanceOf(Error)
      expect(e).toMatchObject({ code: 'network_error', status: undefined, retryable: true, attempts: 2 })
    }
    expect(await c.refresh()).toBe(false)
    expect(errors.at(-1)).toMatchObject({ operation: 'refresh', code: 'network_error' })
  })

  it('fail-closed: every call resolves false, still without throwing', async () => {
    const port = await deadPort()
    const { c, errors } = make(agentName('dead-closed'), { baseUrl: `http://127.0.0.1:${port}`, maxRetries: 0, failMode: 'closed' })
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(await c.start()).toBe(false)
    expect(c.paused).toBe(false) // not paused: unreachable
    expect(errors).toHaveLength(2)
    for (const e of errors) expect(e).toBeInstanceOf(BurnrateError)
  })

  it('without onError the failure goes to console.warn; an onError that throws is contained', async () => {
    const port = await deadPort()
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {})
    try {
      const c = new Burnrate({ baseUrl: `http://127.0.0.1:${port}`, apiKey: key, agentId: agentName('warn'), maxRetries: 0 })
      expect(await c.start()).toBe(true)
      expect(warn).toHaveBeenCalledTimes(1)
      expect(String(warn.mock.calls[0]![0])).toMatch(/^\[burnrate\] burnrate POST \/events: /)
    } finally {
      warn.mockRestore()
    }
    const c = new Burnrate({
      baseUrl: `http://127.0.0.1:${port}`,
      apiKey: key,
      agentId: agentName('throwing'),
      maxRetries: 0,
      onError: () => {
        throw new Error('a broken handler')
      },
    })
    expect(await c.start()).toBe(true)
  })

  it('a server that does not answer in time is a timeout, retried, then reported', async () => {
    const p = await proxy()
    p.on('POST /events', { kind: 'delay', ms: 3000 }, 2)
    const { c, errors } = make(agentName('slow'), { baseUrl: p.url, timeoutMs: 200, maxRetries: 1 })
    const t0 = Date.now()
    expect(await c.start()).toBe(true)
    expect(Date.now() - t0).toBeLessThan(2500) // two 200 ms attempts, not the proxy's 3 s
    expect(errors).toHaveLength(1)
    expect(errors[0]).toMatchObject({ code: 'timeout', retryable: true, attempts: 2 })
  })
})

describe('budget holds: guard()', () => {
  /** gpt-4o, 1000 in and at most 1000 out: 0.0025 + 0.01 USD at worst. */
  const WORST = { model: 'gpt-4o', inputTokens: 1000, maxOutputTokens: 1000 }
  const WORST_NANO = 12_500_000

  const holdPosts = (p: Proxy) => p.seen.filter((s) => s.method === 'POST' && s.path === '/holds')
  const releases = (p: Proxy) => p.seen.filter((s) => s.method === 'DELETE').map((s) => `${s.path} ${s.status}`)

  it('a retry of a hold whose answer was cut carries the same hold_id, and the server holds it once', async () => {
    const id = agentName('guard-cut')
    const p = await proxy()
    p.on('POST /holds', { kind: 'cut' }) // the server grants it, the client never hears back
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 1 })
    const result = await c.guard(WORST, async () => {
      // One hold of the worst case, not two, while the call runs.
      expect(nano((await agent(id)).body.held_usd)).toBe(WORST_NANO)
      return 'answer'
    })
    expect(result).toMatchObject({ allowed: true, value: 'answer' })
    const posts = holdPosts(p)
    expect(posts.map((s) => s.action)).toEqual(['cut', 'forward'])
    expect(posts[1]!.body.hold_id).toBe(posts[0]!.body.hold_id)
    expect(posts[1]!.body.hold_id).toBe((result as { holdId: string }).holdId)
    expect(errors).toEqual([])
  })

  it('holds the worst case while the call runs; the report carries hold_id and settles it with the real cost, once', async () => {
    const id = agentName('guard')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 1 })

    const result = await c.guard({ ...WORST, ttlSeconds: 60 }, async (hold) => {
      expect(hold.holdId).toMatch(UUID_V4)
      expect(nano(hold.heldUsd)).toBe(WORST_NANO)
      expect(Math.abs(hold.expiresAt!.getTime() - (Date.now() + 60_000))).toBeLessThan(5000)
      // Held while the call is in flight: the budget counts it.
      expect(nano((await agent(id)).body.held_usd)).toBe(WORST_NANO)
      expect(await hold.llmCall(CALL)).toBe(true)
      return 'answer'
    })
    expect(result).toEqual({ allowed: true, value: 'answer', holdId: expect.stringMatching(UUID_V4) })
    const holdId = (result as { holdId: string }).holdId
    expect(p.seen.map((s) => `${s.method} ${s.path}`)).toEqual(['POST /config', 'POST /holds', 'POST /events'])
    expect(holdPosts(p)[0]!.body).toEqual({ agent_id: id, model: 'gpt-4o', input_tokens: 1000, max_output_tokens: 1000, hold_id: holdId, ttl_seconds: 60 })
    expect(eventPosts(p)[0]!.body).toEqual({ agent_id: id, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, event_id: expect.stringMatching(UUID_V4), hold_id: holdId })
    expect(nano(c.lastResponse!.cost_usd)).toBe(CALL_NANO)

    // The usage helpers of the hold settle it the same way.
    const second = await c.guard(WORST, (hold) => hold.fromOpenAIChat('gpt-4o', { prompt_tokens: 1000, completion_tokens: 500, total_tokens: 1500 }))
    expect(second).toEqual({ allowed: true, value: true, holdId: expect.stringMatching(UUID_V4) })
    expect(holdPosts(p)[1]!.body).not.toHaveProperty('ttl_seconds') // the server's default
    expect(eventPosts(p)[1]!.body).toMatchObject({ provider: 'openai', api_flavor: 'chat', hold_id: (second as { holdId: string }).holdId })

    expect(releases(p)).toEqual([]) // settled by the reports: nothing to release
    const read = await agent(id)
    expect(read.body).toMatchObject({ llm_calls: 2, held_usd: 0, is_paused: false })
    expect(nano(read.body.total_cost_usd)).toBe(2 * CALL_NANO)
    expect(errors).toEqual([])
  })

  it('refuses a call whose worst case does not fit the budget: fn never runs and nothing is held', async () => {
    const id = agentName('guard-budget')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 0.01 })
    const fn = vi.fn()
    expect(await c.guard(WORST, fn)).toEqual({ allowed: false, reason: 'budget', pausedReason: null, pausedPeriod: null, remainingUsd: 0.01, worstCaseUsd: 0.0125 })
    expect(fn).not.toHaveBeenCalled()
    expect(c.paused).toBe(false) // only this call is too big: a smaller one may go
    expect((await agent(id)).body).toMatchObject({ held_usd: 0, llm_calls: 0, is_paused: false })
    const small = await c.guard({ ...WORST, maxOutputTokens: 500 }, (hold) => hold.llmCall(CALL))
    expect(small).toMatchObject({ allowed: true, value: true })
    expect(releases(p)).toEqual([])
    expect(errors).toEqual([])
  })

  it('a refusal for a pause pauses the client; then guard() refuses at once and send() sends nothing, until refresh() sees a resume', async () => {
    const id = agentName('guard-paused')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url })
    expect(await c.start()).toBe(true)
    await setPaused(id, true)
    const fn = vi.fn()

    expect(await c.guard(WORST, fn)).toEqual({ allowed: false, reason: 'paused', pausedReason: 'manual', pausedPeriod: null, remainingUsd: expect.any(Number), worstCaseUsd: 0.0125 })
    expect([c.paused, c.pausedReason]).toEqual([true, 'manual'])
    const requests = p.seen.length
    expect(await c.guard(WORST, fn)).toEqual({ allowed: false, reason: 'paused', pausedReason: 'manual', pausedPeriod: null, remainingUsd: null, worstCaseUsd: null })
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(p.seen.length).toBe(requests) // neither asked burnrate anything
    expect(fn).not.toHaveBeenCalled()

    await setPaused(id, false)
    expect(await c.refresh()).toBe(false)
    expect(await c.guard(WORST, (hold) => hold.llmCall(CALL))).toMatchObject({ allowed: true, value: true })
    expect((await agent(id)).body).toMatchObject({ llm_calls: 1, held_usd: 0 })
    expect(errors).toEqual([])
  })

  it("reports a guarded call made while the agent was paused meanwhile: its cost counts and its hold settles", async () => {
    const id = agentName('guard-paused-meanwhile')
    const { c, errors } = make(id)
    expect(await c.start()).toBe(true)
    const result = await c.guard(WORST, async (hold) => {
      // The call is in flight when the agent is paused, and the client learns it.
      await setPaused(id, true)
      expect(await c.toolCall('search')).toBe(false)
      expect(c.paused).toBe(true)
      return hold.llmCall(CALL)
    })
    // The report went: the call was made. It answers false (paused), and nothing more is sent.
    expect(result).toMatchObject({ allowed: true, value: false })
    expect((await agent(id)).body).toMatchObject({ llm_calls: 1, held_usd: 0, total_cost_usd: 0.0075 })
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect((await agent(id)).body).toMatchObject({ llm_calls: 1 })
    expect(errors).toEqual([])
  })

  it('releases the hold when fn throws, and rejects with its error', async () => {
    const id = agentName('guard-throw')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 1 })
    const boom = new Error('the provider is down')
    await expect(
      c.guard(WORST, async () => {
        expect(nano((await agent(id)).body.held_usd)).toBe(WORST_NANO)
        throw boom
      }),
    ).rejects.toBe(boom)
    expect(releases(p)).toEqual([expect.stringMatching(/^\/holds\/[0-9a-f-]{36} 200$/)])
    expect((await agent(id)).body).toMatchObject({ held_usd: 0, llm_calls: 0 })
    expect(errors).toEqual([])
  })

  it('releases the hold when fn reports nothing burnrate acknowledged; a hold that is no longer open is no error', async () => {
    const id = agentName('guard-silent')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 1, maxRetries: 0 })

    // No report at all.
    expect(await c.guard(WORST, () => 42)).toMatchObject({ allowed: true, value: 42 })
    expect(releases(p)).toEqual([expect.stringMatching(/ 200$/)])
    expect((await agent(id)).body).toMatchObject({ held_usd: 0, llm_calls: 0 })

    // A report burnrate refused to take (its store down): not settled, so released.
    p.on('POST /events', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    expect(await c.guard(WORST, (hold) => hold.llmCall(CALL))).toMatchObject({ allowed: true, value: true })
    expect(releases(p)).toHaveLength(2)
    expect(releases(p)[1]).toMatch(/ 200$/)
    expect(errors.map((e) => [e.operation, e.code])).toEqual([['event', 'store_unavailable']])

    // A report that settled the hold but whose answer was lost: the release finds it gone (404), quietly.
    p.on('POST /events', { kind: 'cut' })
    expect(await c.guard(WORST, (hold) => hold.llmCall(CALL))).toMatchObject({ allowed: true, value: true })
    expect(releases(p)[2]).toMatch(/ 404$/)
    expect(errors.map((e) => [e.operation, e.code])).toEqual([['event', 'store_unavailable'], ['event', 'network_error']])

    // A hold that expired while fn ran (ttl 1 s): the same.
    expect(
      await c.guard({ ...WORST, ttlSeconds: 1 }, () => waitFor(async () => ((await agent(id)).body.held_usd === 0 ? 'expired' : undefined), 10_000, 'the hold to expire')),
    ).toMatchObject({ allowed: true, value: 'expired' })
    expect(releases(p)[3]).toMatch(/ 404$/)
    expect(errors).toHaveLength(2)

    const read = await agent(id)
    expect(read.body).toMatchObject({ held_usd: 0, llm_calls: 1 }) // the cut one, counted once
    expect(nano(read.body.total_cost_usd)).toBe(CALL_NANO)
  })

  it('a hold request is retried like an event (429, 5xx)', async () => {
    const p = await proxy()
    p.on('POST /holds', { kind: 'reply', status: 429, headers: { 'retry-after': '0' }, body: { status: 429, code: 'rate_limited' } })
    p.on('POST /holds', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    const { c, errors } = make(agentName('guard-retry'), { baseUrl: p.url })
    expect(await c.guard(WORST, (hold) => hold.llmCall(CALL))).toMatchObject({ allowed: true, value: true })
    expect(holdPosts(p).map((s) => s.status)).toEqual([429, 503, 200])
    expect(errors).toEqual([])
  })

  it('fail-open: burnrate unreachable for the hold, fn runs without one and reports without hold_id', async () => {
    const id = agentName('guard-open')
    const p = await proxy()
    p.on('POST /holds', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    const { c, errors } = make(id, { baseUrl: p.url, maxRetries: 0 })
    const result = await c.guard(WORST, async (hold) => {
      expect([hold.holdId, hold.heldUsd, hold.expiresAt]).toEqual([null, 0, null])
      return hold.llmCall(CALL)
    })
    expect(result).toEqual({ allowed: true, value: true, holdId: null })
    expect(eventPosts(p)[0]!.body).not.toHaveProperty('hold_id')
    expect(releases(p)).toEqual([])
    expect(errors.map((e) => [e.operation, e.code])).toEqual([['hold', 'store_unavailable']])
    expect((await agent(id)).body).toMatchObject({ llm_calls: 1, held_usd: 0 })

    // Nothing answers at all: the same, every failure told to onError.
    const port = await deadPort()
    const dead = make(agentName('guard-open-dead'), { baseUrl: `http://127.0.0.1:${port}`, maxRetries: 1 })
    expect(await dead.c.guard(WORST, (hold) => hold.llmCall(CALL))).toEqual({ allowed: true, value: true, holdId: null })
    expect(dead.errors.map((e) => [e.operation, e.code, e.attempts])).toEqual([['hold', 'network_error', 2], ['event', 'network_error', 2]])
  })

  it('fail-closed: burnrate unreachable for the hold (or for the start-up config), fn does not run', async () => {
    const port = await deadPort()
    const { c, errors } = make(agentName('guard-closed'), { baseUrl: `http://127.0.0.1:${port}`, maxRetries: 0, failMode: 'closed' })
    const fn = vi.fn()
    const unreachable = { allowed: false, reason: 'unreachable', pausedReason: null, pausedPeriod: null, remainingUsd: null, worstCaseUsd: null }
    expect(await c.guard(WORST, fn)).toEqual(unreachable)
    expect(c.paused).toBe(false)
    expect(errors.map((e) => [e.operation, e.code])).toEqual([['hold', 'network_error']])

    // The budget this client sets could not be sent: the hold could not be judged against it.
    const p = await proxy()
    p.on('POST /config', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    const cfg = make(agentName('guard-closed-config'), { baseUrl: p.url, maxRetries: 0, failMode: 'closed', costThresholdUsd: 1 })
    expect(await cfg.c.guard(WORST, fn)).toEqual(unreachable)
    expect(p.seen.map((s) => `${s.method} ${s.path}`)).toEqual(['POST /config'])
    expect(cfg.errors.map((e) => e.operation)).toEqual(['config'])
    expect(fn).not.toHaveBeenCalled()
    // Once it goes through, so do holds.
    expect(await cfg.c.guard(WORST, (hold) => hold.llmCall(CALL))).toMatchObject({ allowed: true, value: true })
  })
})

describe('usage helpers on SDK-shaped usage objects, priced by the server', () => {
  it('OpenAI Chat Completions, OpenAI Responses and Anthropic report input, output and cache tokens right', async () => {
    const id = agentName('usage')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url })

    // Typed with the SDKs' own types (dev dependencies of these tests, not of the client).
    // ChatCompletion.usage: prompt_tokens includes the cached ones.
    const chatUsage: OpenAI.CompletionUsage = {
      prompt_tokens: 1000,
      completion_tokens: 200,
      total_tokens: 1200,
      prompt_tokens_details: { cached_tokens: 600, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 64, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
    }
    // Response.usage (Responses API).
    const responsesUsage: OpenAI.Responses.ResponseUsage = {
      input_tokens: 1000,
      input_tokens_details: { cached_tokens: 400, cache_write_tokens: 0 },
      output_tokens: 300,
      output_tokens_details: { reasoning_tokens: 128 },
      total_tokens: 1300,
    }
    // Message.usage (Anthropic): input_tokens excludes the cache.
    const anthropicUsage: Anthropic.Usage = {
      input_tokens: 100,
      cache_creation_input_tokens: 200,
      cache_read_input_tokens: 700,
      cache_creation: { ephemeral_5m_input_tokens: 200, ephemeral_1h_input_tokens: 0 },
      output_tokens: 50,
      server_tool_use: null,
      service_tier: 'standard',
      inference_geo: null,
      output_tokens_details: null,
      speed: null,
    }

    const expected = [
      // 400 × 2 + 600 × 0.5 + 200 × 8 (USD per 1M) = 0.0027 USD
      { send: () => c.fromOpenAIChat('test-openai', chatUsage), event: fromOpenAIChat('test-openai', chatUsage), wire: { provider: 'openai', api_flavor: 'chat', usage: chatUsage }, tokens: { input_tokens: 1000, output_tokens: 200, cache_read_tokens: 600 }, nano: 2_700_000 },
      // 600 × 2 + 400 × 0.5 + 300 × 8 = 0.0038 USD
      { send: () => c.fromOpenAIResponses('test-openai', responsesUsage), event: fromOpenAIResponses('test-openai', responsesUsage), wire: { provider: 'openai', api_flavor: 'responses', usage: responsesUsage }, tokens: { input_tokens: 1000, output_tokens: 300, cache_read_tokens: 400 }, nano: 3_800_000 },
      // 100 × 3 + 700 × 0.3 + 200 × 3.75 + 50 × 15 = 0.00201 USD
      { send: () => c.fromAnthropic('test-anthropic', anthropicUsage), event: fromAnthropic('test-anthropic', anthropicUsage), wire: { provider: 'anthropic', usage: anthropicUsage }, tokens: { input_tokens: 1000, output_tokens: 50, cache_read_tokens: 700, cache_write_tokens: 200 }, nano: 2_010_000 },
    ]
    for (const x of expected) {
      // The SDK's usage object goes as it is; the server reads the quantities from it.
      expect(x.event).toEqual({ event_type: 'llm_call', model: x.event.model, ...x.wire })
      expect(await x.send()).toBe(true)
      expect(nano(c.lastResponse!.cost_usd)).toBe(x.nano)
      const sent = eventPosts(p).at(-1)!.body
      expect(sent).toEqual({ ...x.event, agent_id: id, event_id: expect.stringMatching(UUID_V4) })
    }

    const NO_CACHE = { cache_read_tokens: 0, cache_write_tokens: 0 }
    const read = await agent(id)
    expect(read.body.llm_calls).toBe(3)
    expect(nano(read.body.total_cost_usd)).toBe(2_700_000 + 3_800_000 + 2_010_000)
    const stored = new Map(read.body.events.map((e: { event_id: string }) => [e.event_id, e]))
    const posts = eventPosts(p)
    expected.forEach((x, i) => {
      const e = stored.get(posts[i]!.body.event_id)
      expect(e).toMatchObject({ event_type: 'llm_call', ...NO_CACHE, ...x.tokens })
      expect(nano((e as { cost_usd: number }).cost_usd)).toBe(x.nano)
    })
    expect(errors).toEqual([])
  })
})
