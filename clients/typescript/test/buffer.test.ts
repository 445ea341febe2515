import { execFile, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { api, cleanup, createKey, drained, freshDataDir, nano, startServe, waitFor, type ServerProcess } from '../../../test/helpers/process.ts'
import { Burnrate, BurnrateError, type BurnrateOptions } from '../src/index.ts'
import { deadPort, startProxy, type Proxy, type Seen } from '../../../test/helpers/proxy.ts'

// The buffered mode against a real `burnrate serve` (embedded chDB, in-memory hot state),
// started for this file: tool calls, starts, ends and flagged llm_calls go in POST
// /events/batch requests. Where a test needs the network to misbehave, a real HTTP proxy
// sits between the client and the server; nothing of burnrate is mocked.

const PRICES = { models: { 'gpt-4o': { input: 2.5, output: 10 } } }
/** gpt-4o, 1000 in / 500 out: 0.0025 + 0.005 USD. */
const CALL = { inputTokens: 1000, outputTokens: 500 }
const CALL_NANO = 7_500_000
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
/** Long enough that no batch leaves by age while a test looks. */
const NEVER = 600_000

let server: ServerProcess
let dataDir: string
let key: string
const proxies: Proxy[] = []

beforeAll(async () => {
  const pricesFile = join(freshDataDir(), 'prices.json')
  writeFileSync(pricesFile, JSON.stringify(PRICES))
  dataDir = freshDataDir()
  server = await startServe(dataDir, { PRICES_FILE: pricesFile, CONFIG_RATE_LIMIT: '100000', READS_RATE_LIMIT: '100000', PAUSE_GRACE_MS: '0' })
  key = (await createKey(dataDir, 'alice', ['--rate-limit', '100000'])).key
})

afterEach(async () => {
  for (const p of proxies.splice(0)) await p.close()
})

afterAll(async () => {
  await cleanup()
})

function agentName(what: string): string {
  return `tsb-${what}-${randomUUID().slice(0, 8)}`
}

async function proxy(): Promise<Proxy> {
  const p = await startProxy(server.url)
  proxies.push(p)
  return p
}

/** A buffered client with fast retries that collects what it reports; through `baseUrl` (a proxy) when given. */
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
    buffer: { maxAgeMs: NEVER },
    ...opts,
  })
  return { c, errors }
}

/** The agent as burnrate shows it, once every acknowledged event is readable (its events list included). */
async function agent(agentId: string, apiKey = key) {
  await drained(server.url)
  return api(server.url, 'GET', `/agents/${encodeURIComponent(agentId)}?limit=1000`, apiKey)
}

/** The stored events' ids, sorted (a batch's events share their arrival time). */
async function storedIds(agentId: string, apiKey = key): Promise<string[]> {
  const read = await agent(agentId, apiKey)
  expect(read.status).toBe(200)
  return (read.body.events as Array<{ event_id: string }>).map((e) => e.event_id).sort()
}

const batches = (p: Proxy): Seen[] => p.seen.filter((s) => s.method === 'POST' && s.path === '/events/batch')
const singles = (p: Proxy): Seen[] => p.seen.filter((s) => s.method === 'POST' && s.path === '/events')
const idsOf = (s: Seen): string[] => (s.body.events as Array<{ event_id: string }>).map((e) => e.event_id)
const routes = (p: Proxy): string[] => p.seen.map((s) => `${s.method} ${s.path}${s.status === undefined ? '' : ` ${s.status}`}`)

describe('buffered mode: what goes in batches, and when', () => {
  it('queues tool calls, start, end and flagged llm_calls, answers at once, and end() sends them in one batch that is stored', async () => {
    const id = agentName('batch')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 5 })

    const own = randomUUID()
    const answers = [
      await c.start({ run: 1 }),
      await c.toolCall('search', { q: 'burnrate' }),
      await c.toolCall('fetch', undefined, { eventId: own }),
      await c.llmCall('gpt-4o', CALL, { buffered: true, metadata: { step: 1 } }),
      await c.fromOpenAIChat('gpt-4o', { prompt_tokens: 1000, completion_tokens: 500, total_tokens: 1500 }, { buffered: true }),
      await c.send({ event_type: 'tool_call', tool_name: 'write' }),
      await c.send({ event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500 }, { buffered: true }),
    ]
    // Every one resolved without a request: nothing has reached the server yet, not even the config.
    expect(answers).toEqual([true, true, true, true, true, true, true])
    expect(p.seen).toEqual([])
    expect(c.pendingEvents).toBe(7)
    expect(c.lastResponse).toBeUndefined()

    expect(await c.end({ ok: true })).toBe(true)
    expect(c.pendingEvents).toBe(0)
    expect(routes(p)).toEqual(['POST /config 200', 'POST /events/batch 200'])
    const [batch] = batches(p)
    expect(batch!.body.events.map((e: { event_type: string }) => e.event_type)).toEqual(['agent_start', 'tool_call', 'tool_call', 'llm_call', 'llm_call', 'tool_call', 'llm_call', 'agent_end'])
    // Each carries the run start() began, the end included.
    const run = batch!.body.events[0].run_id as string
    expect(run).toMatch(UUID_V4)
    expect(batch!.body.events.map((e: { run_id: string }) => e.run_id)).toEqual(Array(8).fill(run))
    expect(batch!.body.events[0]).toEqual({ agent_id: id, event_type: 'agent_start', metadata: { run: 1 }, run_id: run, event_id: expect.stringMatching(UUID_V4) })
    expect(batch!.body.events[3]).toEqual({ agent_id: id, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, metadata: { step: 1 }, run_id: run, event_id: expect.stringMatching(UUID_V4) })
    expect(batch!.body.events[4]).toMatchObject({ provider: 'openai', api_flavor: 'chat', usage: { prompt_tokens: 1000 } })
    const sent = idsOf(batch!)
    expect(sent[2]).toBe(own)
    expect(new Set(sent).size).toBe(8)
    expect(batch!.answer.results.map((r: { ok: boolean }) => r.ok)).toEqual(Array(8).fill(true))

    // The batch's answers are the client's as POST /events answers are.
    expect(c.lastResponse).toMatchObject({ ok: true, event_id: sent[7], cost_usd: 0, paused: false })
    expect(nano(c.remainingUsd!)).toBe(5_000_000_000 - 3 * CALL_NANO)

    const read = await agent(id)
    expect(read.body).toMatchObject({ agent_id: id, llm_calls: 3, is_paused: false })
    expect(nano(read.body.total_cost_usd)).toBe(3 * CALL_NANO)
    expect(read.body.config.cost_threshold_usd).toBe(5)
    expect(await storedIds(id)).toEqual([...sent].sort())
    // The user's list of all agents counts them too.
    const list = await api(server.url, 'GET', '/agents', key)
    expect(list.body.agents.find((a: { agent_id: string }) => a.agent_id === id)).toMatchObject({ llm_calls: 3 })
    expect(errors).toEqual([])
  })

  it('flushes by size: a batch each time maxEvents are queued; flush() sends the rest and resolves once it is answered', async () => {
    const id = agentName('size')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, buffer: { maxEvents: 3, maxAgeMs: NEVER } })
    for (const round of [0, 1]) {
      for (let i = 0; i < 3; i++) {
        expect(batches(p)).toHaveLength(round)
        expect(await c.toolCall(`tool-${round * 3 + i}`)).toBe(true)
      }
      await waitFor(() => (batches(p).length === round + 1 && c.pendingEvents === 0 ? true : undefined), 10_000, `full batch ${round + 1} answered`)
    }
    expect(await c.toolCall('tool-6')).toBe(true)
    expect(c.pendingEvents).toBe(1)
    expect(batches(p).map((b) => b.body.events.length)).toEqual([3, 3])
    expect(singles(p)).toEqual([])

    expect(await c.flush()).toBe(true)
    expect(c.pendingEvents).toBe(0)
    expect(batches(p).map((b) => b.body.events.map((e: { tool_name: string }) => e.tool_name))).toEqual([
      ['tool-0', 'tool-1', 'tool-2'],
      ['tool-3', 'tool-4', 'tool-5'],
      ['tool-6'],
    ])
    // Nothing queued: flush() sends nothing.
    expect(await c.flush()).toBe(true)
    expect(batches(p)).toHaveLength(3)
    expect(await storedIds(id)).toEqual(batches(p).flatMap(idsOf).sort())
    expect(errors).toEqual([])
  })

  it('flushes by age: the oldest event waits maxAgeMs, then its batch goes with what joined it', async () => {
    const id = agentName('age')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, buffer: { maxAgeMs: 300 } })
    const t0 = Date.now()
    await c.start()
    await c.toolCall('search')
    const [batch] = await waitFor(() => (batches(p).length === 1 ? batches(p) : undefined), 10_000, 'the batch by age')
    expect(batch!.at - t0).toBeGreaterThanOrEqual(290) // a timer may fire a millisecond early by the wall clock
    expect(batch!.body.events.map((e: { event_type: string }) => e.event_type)).toEqual(['agent_start', 'tool_call'])
    await waitFor(() => (c.pendingEvents === 0 ? true : undefined), 10_000, 'the batch answered')

    // The next event starts the clock again.
    const t1 = Date.now()
    await c.toolCall('fetch')
    await waitFor(() => (batches(p).length === 2 ? true : undefined), 10_000, 'the second batch by age')
    expect(batches(p)[1]!.at - t1).toBeGreaterThanOrEqual(290)
    expect(await storedIds(id)).toEqual(batches(p).flatMap(idsOf).sort())
    expect(errors).toEqual([])
  })

  it('splits what is queued into batches of at most 1000 events', async () => {
    const id = agentName('split')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, buffer: { maxEvents: 2500, maxAgeMs: NEVER } })
    for (let i = 0; i < 2499; i++) await c.llmCall('gpt-4o', { inputTokens: 1, outputTokens: 1 }, { buffered: true })
    expect(p.seen).toEqual([])
    expect(await c.flush()).toBe(true)
    expect(batches(p).map((b) => b.body.events.length)).toEqual([1000, 1000, 499])
    expect((await agent(id)).body.llm_calls).toBe(2499)
    expect(errors).toEqual([])
  })

  it('llm_calls without the flag are posted at once and answer `paused` at once; tool calls wait in the buffer meanwhile', async () => {
    const id = agentName('direct')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 0.01 })
    expect(await c.toolCall('search')).toBe(true)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(routes(p)).toEqual(['POST /config 200', 'POST /events 200'])
    expect(c.pendingEvents).toBe(1)

    expect(await c.llmCall('gpt-4o', CALL)).toBe(false) // 0.015 > 0.01: the answer says paused
    expect([c.paused, c.pausedReason]).toEqual([true, 'budget'])
    expect(singles(p)).toHaveLength(2)
    // Paused: buffered calls resolve false and queue nothing, as send() sends nothing.
    expect(await c.toolCall('fetch')).toBe(false)
    expect(await c.llmCall('gpt-4o', CALL, { buffered: true })).toBe(false)
    expect(c.pendingEvents).toBe(1)

    // What was queued before the pause is still reported; end() itself is not (paused).
    expect(await c.end()).toBe(false)
    expect(batches(p).map((b) => b.body.events.map((e: { tool_name?: string }) => e.tool_name))).toEqual([['search']])
    const read = await agent(id)
    expect(read.body).toMatchObject({ llm_calls: 2, is_paused: true })
    expect(read.body.events).toHaveLength(3)
    expect(errors).toEqual([])
  })

  it('a tool call with `buffered: false` is posted at once; without a buffer the flag changes nothing', async () => {
    const p = await proxy()
    const { c, errors } = make(agentName('unflagged'), { baseUrl: p.url })
    expect(await c.toolCall('search', undefined, { buffered: false })).toBe(true)
    expect(await c.start(undefined, { buffered: false })).toBe(true)
    expect(routes(p)).toEqual(['POST /events 200', 'POST /events 200'])
    expect(c.pendingEvents).toBe(0)

    const plain = make(agentName('no-buffer'), { baseUrl: p.url, buffer: false })
    expect(await plain.c.llmCall('gpt-4o', CALL, { buffered: true })).toBe(true)
    expect(await plain.c.toolCall('search')).toBe(true)
    expect(await plain.c.flush()).toBe(true)
    expect(await plain.c.close()).toBe(true)
    expect(routes(p).slice(2)).toEqual(['POST /events 200', 'POST /events 200'])
    expect(errors).toEqual([])
    expect(plain.errors).toEqual([])
  })

  it('close() flushes and stops the timer; afterwards each event is posted at once', async () => {
    const id = agentName('close')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, buffer: { maxAgeMs: 200 } })
    await c.toolCall('search')
    expect(await c.close()).toBe(true)
    expect(routes(p)).toEqual(['POST /events/batch 200'])
    expect(await c.toolCall('fetch')).toBe(true)
    expect(routes(p)).toEqual(['POST /events/batch 200', 'POST /events 200'])
    expect(c.pendingEvents).toBe(0)
    expect(await storedIds(id)).toHaveLength(2)
    expect(errors).toEqual([])
  })

  it("guard()'s hold reports are posted at once, even flagged buffered: the hold is settled by their answer", async () => {
    const id = agentName('guard')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url })
    await c.start()
    const result = await c.guard({ model: 'gpt-4o', inputTokens: 1000, maxOutputTokens: 1000 }, (hold) => hold.llmCall(CALL, { buffered: true }))
    expect(result).toMatchObject({ allowed: true, value: true })
    expect(routes(p)).toEqual(['POST /holds 200', 'POST /events 200'])
    expect(singles(p)[0]!.body.hold_id).toBe((result as { holdId: string }).holdId)
    expect(c.pendingEvents).toBe(1) // the start
    expect(await c.flush()).toBe(true)
    expect((await agent(id)).body).toMatchObject({ llm_calls: 1, held_usd: 0 })
    expect(errors).toEqual([])
  })

  it('the timer does not keep a Node process alive, and close() delivers what waits before it exits', async () => {
    // The published build, as an agent would load it, in a process of its own.
    const out = freshDataDir()
    const root = fileURLToPath(new URL('../../../', import.meta.url))
    await promisify(execFile)(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'clients/typescript/tsconfig.build.json'), '--outDir', out], { timeout: 60_000 })
    const run = (agentId: string, close: boolean) =>
      new Promise<{ code: number | null; stdout: string; ms: number }>((resolve, reject) => {
        const script = `
          import { Burnrate } from ${JSON.stringify(pathToFileURL(join(out, 'index.js')).href)}
          const c = new Burnrate({ baseUrl: ${JSON.stringify(server.url)}, apiKey: ${JSON.stringify(key)}, agentId: ${JSON.stringify(agentId)}, buffer: { maxAgeMs: ${NEVER} } })
          await c.toolCall('search')
          console.log('queued', c.pendingEvents)
          ${close ? "console.log('closed', await c.close(), c.pendingEvents)" : ''}`
        const t0 = Date.now()
        const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
        let stdout = ''
        child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
        const timer = setTimeout(() => {
          child.kill('SIGKILL')
          reject(new Error(`the agent process did not exit (stdout: ${stdout})`))
        }, 20_000)
        child.on('exit', (code) => {
          clearTimeout(timer)
          resolve({ code, stdout, ms: Date.now() - t0 })
        })
      })

    const left = agentName('exit')
    const a = await run(left, false)
    expect(a).toMatchObject({ code: 0, stdout: 'queued 1\n' })
    expect(a.ms).toBeLessThan(10_000) // not the 600 s the event could wait
    expect((await agent(left)).status).toBe(404) // never sent: an agent that exits without close() loses what waits

    const closed = agentName('exit-close')
    expect(await run(closed, true)).toMatchObject({ code: 0, stdout: 'queued 1\nclosed true 0\n' })
    expect(await storedIds(closed)).toHaveLength(1)
  }, 90_000)
})

describe('buffered mode: answers and failures', () => {
  it('a batch whose answer is lost is sent again, the same events with the same ids, and counted once', async () => {
    const id = agentName('cut')
    const p = await proxy()
    p.on('POST /events/batch', { kind: 'cut' }) // the server stores the batch, the client never hears back
    const { c, errors } = make(id, { baseUrl: p.url })
    await c.start()
    await c.llmCall('gpt-4o', CALL, { buffered: true })
    await c.llmCall('gpt-4o', CALL, { buffered: true })
    expect(await c.flush()).toBe(true)

    const sent = batches(p)
    expect(sent.map((s) => s.action)).toEqual(['cut', 'forward'])
    expect(sent[1]!.body).toEqual(sent[0]!.body)
    expect(sent[0]!.answer.results.map((r: { duplicate?: boolean }) => r.duplicate ?? false)).toEqual([false, false, false])
    expect(sent[1]!.answer.results.map((r: { duplicate?: boolean }) => r.duplicate ?? false)).toEqual([true, true, true])
    expect(c.lastResponse!.duplicate).toBe(true)
    const read = await agent(id)
    expect(read.body.llm_calls).toBe(2)
    expect(nano(read.body.total_cost_usd)).toBe(2 * CALL_NANO)
    expect(await storedIds(id)).toEqual(idsOf(sent[0]!).sort())
    expect(errors).toEqual([])
  })

  it('a whole-request failure (5xx, network) is retried with the same batch; past the retries the events stay queued, in order', async () => {
    const id = agentName('503')
    const p = await proxy()
    p.on('POST /events/batch', { kind: 'reply', status: 503, headers: { 'retry-after': '0' }, body: { status: 503, code: 'store_unavailable' } }, 2)
    const { c, errors } = make(id, { baseUrl: p.url, maxRetries: 2 })
    await c.toolCall('a')
    await c.toolCall('b')
    expect(await c.flush()).toBe(true)
    expect(batches(p).map((s) => s.status)).toEqual([503, 503, 200])
    expect(new Set(batches(p).map((s) => JSON.stringify(s.body))).size).toBe(1)
    expect(errors).toEqual([])

    // Always 503: after 1 + maxRetries attempts flush() says so, reports it once, and the events wait.
    p.on('POST /events/batch', { kind: 'reply', status: 503, headers: { 'retry-after': '0' }, body: { status: 503, code: 'store_unavailable', detail: 'ClickHouse is down' } }, 3)
    await c.toolCall('c')
    await c.toolCall('d')
    expect(await c.flush()).toBe(false)
    expect(c.pendingEvents).toBe(2)
    expect(errors).toHaveLength(1)
    expect(errors[0]).toMatchObject({ operation: 'batch', status: 503, code: 'store_unavailable', retryable: true, attempts: 3 })
    expect(errors[0]!.message).toContain('ClickHouse is down')
    // Open: the agent goes on; what it reports meanwhile queues behind the waiting events.
    expect(await c.toolCall('e')).toBe(true)
    expect(await c.flush()).toBe(true)
    expect(batches(p).at(-1)!.body.events.map((e: { tool_name: string }) => e.tool_name)).toEqual(['c', 'd', 'e'])
    expect(await storedIds(id)).toHaveLength(5)
  })

  it('fail modes: burnrate unreachable, buffered calls resolve true ("open") or false ("closed", once a batch failed); nothing throws', async () => {
    const port = await deadPort()
    const open = make(agentName('dead-open'), { baseUrl: `http://127.0.0.1:${port}`, maxRetries: 1, costThresholdUsd: 1 })
    expect(await open.c.toolCall('search')).toBe(true)
    expect(await open.c.flush()).toBe(false)
    expect(await open.c.toolCall('fetch')).toBe(true)
    expect(await open.c.end()).toBe(true)
    expect(await open.c.close()).toBe(false)
    expect(open.c.pendingEvents).toBe(3)
    expect(open.errors.map((e) => [e.operation, e.code, e.attempts])).toEqual([
      ['config', 'network_error', 2],
      ['batch', 'network_error', 2],
      ['config', 'network_error', 2],
      ['batch', 'network_error', 2],
      ['config', 'network_error', 2],
      ['batch', 'network_error', 2],
    ])

    const closed = make(agentName('dead-closed'), { baseUrl: `http://127.0.0.1:${port}`, maxRetries: 0, failMode: 'closed' })
    expect(await closed.c.toolCall('search')).toBe(true) // nothing known to be wrong yet
    expect(await closed.c.flush()).toBe(false)
    expect(await closed.c.toolCall('fetch')).toBe(false)
    expect(await closed.c.end()).toBe(false)
    expect(closed.c.paused).toBe(false) // not paused: unreachable
    for (const e of [...open.errors, ...closed.errors]) expect(e).toBeInstanceOf(BurnrateError)

    // Once burnrate answers again, a closed client's buffered calls resolve true again.
    const p = await proxy()
    const back = make(agentName('closed-back'), { baseUrl: p.url, maxRetries: 0, failMode: 'closed' })
    p.on('POST /events/batch', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    await back.c.toolCall('search')
    expect(await back.c.flush()).toBe(false)
    expect(await back.c.toolCall('fetch')).toBe(false)
    expect(await back.c.flush()).toBe(true)
    expect(await back.c.toolCall('write')).toBe(true)
    expect(back.c.pendingEvents).toBe(1)
  })

  it('a `paused: true` in a batch pauses the client: its calls resolve false and send nothing, until refresh() sees a resume', async () => {
    const id = agentName('paused')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, costThresholdUsd: 0.01 })
    expect(await c.llmCall('gpt-4o', CALL, { buffered: true })).toBe(true)
    expect(await c.llmCall('gpt-4o', CALL, { buffered: true })).toBe(true) // queued: the total is not known yet
    expect(c.paused).toBe(false)
    expect(await c.flush()).toBe(true)
    expect(batches(p)[0]!.answer.results.map((r: { paused: boolean }) => r.paused)).toEqual([false, true])
    expect([c.paused, c.pausedReason]).toEqual([true, 'budget'])
    expect(c.lastResponse).toMatchObject({ paused: true, paused_reason: 'budget' })

    const requests = p.seen.length
    expect(await c.toolCall('search')).toBe(false)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(await c.end()).toBe(false)
    expect(c.pendingEvents).toBe(0)
    expect(p.seen).toHaveLength(requests)

    // An operator's pause arrives the same way.
    const manual = agentName('paused-manual')
    const m = make(manual, { baseUrl: p.url })
    await m.c.start()
    expect(await m.c.flush()).toBe(true)
    expect((await api(server.url, 'POST', '/config/pause', key, { agent_id: manual, is_paused: true })).status).toBe(200)
    expect(await m.c.toolCall('search')).toBe(true) // not known yet
    expect(await m.c.flush()).toBe(true)
    expect([m.c.paused, m.c.pausedReason]).toEqual([true, 'manual'])
    expect(await m.c.toolCall('fetch')).toBe(false)
    expect((await api(server.url, 'POST', '/config/pause', key, { agent_id: manual, is_paused: false })).status).toBe(200)
    expect(await m.c.refresh()).toBe(false)
    expect(await m.c.toolCall('fetch')).toBe(true)
    expect(m.c.pendingEvents).toBe(1)
    expect([...errors, ...m.errors]).toEqual([])
  })

  it('an event burnrate refuses as invalid (400) is reported and dropped, never sent again; the rest of its batch is stored', async () => {
    const id = agentName('400')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url })
    await c.toolCall('search')
    // The client lets a provider id of up to 256 characters through; the server takes 64.
    const bad = randomUUID()
    await c.fromUsage({ provider: 'p'.repeat(65) }, 'gpt-4o', { input_tokens: 1000, output_tokens: 500 }, { buffered: true, eventId: bad })
    await c.llmCall('gpt-4o', CALL, { buffered: true })
    expect(await c.flush()).toBe(true)
    expect(c.pendingEvents).toBe(0)

    expect(batches(p)).toHaveLength(1)
    expect(batches(p)[0]!.answer.results[1]).toMatchObject({ ok: false, index: 1, status: 400, code: 'invalid_body' })
    expect(errors).toHaveLength(1)
    expect(errors[0]).toMatchObject({ operation: 'event', status: 400, code: 'invalid_body', retryable: false, eventId: bad })
    expect(errors[0]!.problem!.errors).toEqual([{ field: 'events.1.provider', message: expect.any(String) }])

    expect(await c.flush()).toBe(true)
    expect(batches(p)).toHaveLength(1)
    const stored = await storedIds(id)
    expect(stored).toEqual(idsOf(batches(p)[0]!).filter((e) => e !== bad).sort())
    expect((await agent(id)).body.llm_calls).toBe(1)
  })

  it('events refused for the key\'s rate limit (429) stay queued and go again after Retry-After: by the timer, and within flush()', async () => {
    // Keys of 4 events a minute: a fixed window from the first event; Retry-After is what is left of it.
    const run = async (what: 'timer' | 'flush') => {
      const limited = (await createKey(dataDir, agentName(`limited-${what}`), ['--rate-limit', '4'])).key
      const id = agentName(`429-${what}`)
      const p = await proxy()
      const { c, errors } = make(id, { baseUrl: p.url, apiKey: limited, maxRetryDelayMs: 90_000, buffer: { maxEvents: 6, maxAgeMs: NEVER } })
      const t0 = Date.now()
      for (let i = 0; i < 3; i++) {
        await c.toolCall(`tool-${i}`)
        await c.llmCall('gpt-4o', CALL, { buffered: true })
      }
      // Six queued: maxEvents. The timer path lets the size trigger send them; the other flushes.
      if (what === 'flush') expect(await c.flush()).toBe(true)
      else await waitFor(() => (batches(p).length === 2 && c.pendingEvents === 0 ? true : undefined), 90_000, 'the refused events sent again')
      const [first, second] = batches(p)
      expect(first!.answer.results.map((r: { ok: boolean; status?: number }) => (r.ok ? 200 : r.status))).toEqual([200, 200, 200, 200, 429, 429])
      const retryAfter = Number(first!.headers!['retry-after'])
      expect(retryAfter).toBeGreaterThanOrEqual(1)
      expect(retryAfter).toBeLessThanOrEqual(60)
      // The two refused ones again, and only they, once the window is over.
      expect(idsOf(second!)).toEqual(idsOf(first!).slice(4))
      expect(second!.at - first!.at).toBeGreaterThanOrEqual(retryAfter * 1000)
      expect(second!.answer.results.map((r: { ok: boolean; duplicate?: boolean }) => [r.ok, r.duplicate ?? false])).toEqual([[true, false], [true, false]])
      if (what === 'flush') expect(Date.now() - t0).toBeGreaterThanOrEqual(retryAfter * 1000)
      expect(batches(p)).toHaveLength(2)
      const read = await agent(id, limited)
      expect(read.body.llm_calls).toBe(3)
      expect(nano(read.body.total_cost_usd)).toBe(3 * CALL_NANO)
      expect(await storedIds(id, limited)).toEqual(idsOf(first!).sort())
      expect(errors).toEqual([])
    }
    // Side by side: each waits out its own key's minute.
    await Promise.all([run('timer'), run('flush')])
  }, 150_000)

  it('past maxQueued the oldest events are dropped, reported once; the newest are sent once burnrate answers again', async () => {
    const id = agentName('bound')
    const p = await proxy()
    p.on('POST /events/batch', { kind: 'reply', status: 503, body: { status: 503, code: 'store_unavailable' } })
    const { c, errors } = make(id, { baseUrl: p.url, maxRetries: 0, buffer: { maxQueued: 5, maxAgeMs: NEVER } })
    const ids = Array.from({ length: 8 }, () => randomUUID())
    for (const eventId of ids) expect(await c.toolCall('search', undefined, { eventId })).toBe(true)
    expect(c.pendingEvents).toBe(5)
    expect(errors.map((e) => [e.operation, e.code, e.eventId])).toEqual([['event', 'buffer_full', ids[0]]])

    expect(await c.flush()).toBe(false) // the 503
    expect(idsOf(batches(p)[0]!)).toEqual(ids.slice(3))
    expect(c.pendingEvents).toBe(5)
    expect(await c.flush()).toBe(true)
    expect(idsOf(batches(p)[1]!)).toEqual(ids.slice(3))
    expect(await storedIds(id)).toEqual(ids.slice(3).sort())
    expect(errors.map((e) => e.code)).toEqual(['buffer_full', 'store_unavailable'])
  })

  it('a batch too large for what stands in front of burnrate (413) goes as halves; a burnrate without the endpoint (404) gets each event by POST /events', async () => {
    const id = agentName('413')
    const p = await proxy()
    p.on('POST /events/batch', { kind: 'reply', status: 413, body: { status: 413, code: 'payload_too_large' } })
    const { c, errors } = make(id, { baseUrl: p.url })
    for (let i = 0; i < 5; i++) await c.toolCall(`tool-${i}`)
    expect(await c.flush()).toBe(true)
    expect(batches(p).map((b) => [b.status, b.body.events.length])).toEqual([[413, 5], [200, 3], [200, 2]])
    expect(await storedIds(id)).toEqual(idsOf(batches(p)[0]!).sort())
    expect(errors).toEqual([])

    const old = agentName('404')
    const q = await proxy()
    q.on('POST /events/batch', { kind: 'reply', status: 404, body: { status: 404, code: 'not_found', detail: 'Route POST:/events/batch not found' } })
    const o = make(old, { baseUrl: q.url, costThresholdUsd: 0.01 })
    await o.c.start()
    await o.c.llmCall('gpt-4o', CALL, { buffered: true })
    await o.c.llmCall('gpt-4o', CALL, { buffered: true })
    expect(await o.c.flush()).toBe(true)
    expect(routes(q)).toEqual(['POST /config 200', 'POST /events/batch 404', 'POST /events 200', 'POST /events 200', 'POST /events 200'])
    expect(singles(q).map((s) => s.body.event_id)).toEqual(idsOf(batches(q)[0]!))
    expect(o.c.paused).toBe(true) // the answers count as they would in a batch
    // From then on, no batch is tried.
    expect((await api(server.url, 'POST', '/config', key, { agent_id: old, cost_threshold_usd: 1 })).status).toBe(200)
    expect((await api(server.url, 'POST', '/config/pause', key, { agent_id: old, is_paused: false })).status).toBe(200)
    expect(await o.c.refresh()).toBe(false)
    await o.c.toolCall('search')
    expect(await o.c.flush()).toBe(true)
    expect(routes(q).slice(5)).toEqual([`GET /agents/${old} 200`, 'POST /events 200'])
    expect(o.errors).toEqual([])
  })
})
