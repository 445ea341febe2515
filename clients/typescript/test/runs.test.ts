import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { api, cleanup, createKey, drained, freshDataDir, startServe, type ServerProcess } from '../../../test/helpers/process.ts'
import { Burnrate, type BurnrateError, type BurnrateOptions } from '../src/index.ts'
import { startProxy, type Proxy, type Seen } from '../../../test/helpers/proxy.ts'

// Runs in the TypeScript client, against a real `burnrate serve` (embedded chDB, in-memory hot
// state) started for this file: the run id start() makes and every event carries until end(),
// read back with GET /runs/{run_id} and GET /agents/{agent_id}. Nothing of burnrate is mocked.

const PRICES = { models: { 'gpt-4o': { input: 2.5, output: 10 } } }
/** gpt-4o, 1000 in / 500 out: 0.0075 USD. */
const CALL = { inputTokens: 1000, outputTokens: 500 }
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
/** Long enough that no batch leaves by age while a test looks. */
const NEVER = 600_000

let server: ServerProcess
let key: string
const proxies: Proxy[] = []

beforeAll(async () => {
  const pricesFile = join(freshDataDir(), 'prices.json')
  writeFileSync(pricesFile, JSON.stringify(PRICES))
  const dataDir = freshDataDir()
  server = await startServe(dataDir, { PRICES_FILE: pricesFile, CONFIG_RATE_LIMIT: '100000', READS_RATE_LIMIT: '100000' })
  key = (await createKey(dataDir, 'alice', ['--rate-limit', '100000'])).key
})

afterEach(async () => {
  for (const p of proxies.splice(0)) await p.close()
})

afterAll(async () => {
  await cleanup()
})

function agentName(what: string): string {
  return `tsr-${what}-${randomUUID().slice(0, 8)}`
}

async function proxy(): Promise<Proxy> {
  const p = await startProxy(server.url)
  proxies.push(p)
  return p
}

function make(agentId: string, opts: Partial<BurnrateOptions> = {}): { c: Burnrate; errors: BurnrateError[] } {
  const errors: BurnrateError[] = []
  const c = new Burnrate({ baseUrl: server.url, apiKey: key, agentId, timeoutMs: 5000, retryBaseDelayMs: 10, maxRetryDelayMs: 2000, onError: (e) => errors.push(e), ...opts })
  return { c, errors }
}

interface StoredEvent {
  event_id: string
  event_type: string
  run_id: string | null
  tool_name: string | null
}

/** The agent's stored events, oldest first, once every acknowledged one is readable. */
async function storedEvents(agentId: string): Promise<StoredEvent[]> {
  await drained(server.url)
  const res = await api(server.url, 'GET', `/agents/${encodeURIComponent(agentId)}?limit=1000`, key)
  expect(res.status).toBe(200)
  return (res.body.events as StoredEvent[]).reverse()
}

/** GET /runs/{run_id}, once every acknowledged event is readable. */
async function run(runId: string) {
  await drained(server.url)
  const res = await api(server.url, 'GET', `/runs/${encodeURIComponent(runId)}?limit=1000`, key)
  expect(res.status).toBe(200)
  return res.body
}

/** What the events of the agent were, in order: their type (or tool) and run. */
const shape = (events: StoredEvent[]) => events.map((e) => [e.tool_name ?? e.event_type, e.run_id])
const wire = (seen: Seen[]) => seen.flatMap((s) => (s.path === '/events/batch' ? s.body.events : s.path === '/events' ? [s.body] : []) as Array<Record<string, unknown>>)

describe('run ids', () => {
  it('start() makes a run id that every event carries until end(), the end included; a second run has its own', async () => {
    const id = agentName('plain')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url })
    expect(c.runId).toBeNull()
    expect(await c.toolCall('before')).toBe(true)

    expect(await c.start({ task: 1 })).toBe(true)
    const first = c.runId
    expect(first).toMatch(UUID_V4)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await c.toolCall('search')).toBe(true)
    expect(await c.fromOpenAIChat('gpt-4o', { prompt_tokens: 1000, completion_tokens: 500, total_tokens: 1500 })).toBe(true)
    expect(await c.send({ event_type: 'tool_call', tool_name: 'raw' })).toBe(true)
    const guarded = await c.guard({ model: 'gpt-4o', inputTokens: 1000, maxOutputTokens: 1000 }, (hold) => hold.llmCall(CALL))
    expect(guarded).toMatchObject({ allowed: true, value: true })
    expect(c.runId).toBe(first)
    expect(await c.end()).toBe(true)
    expect(c.runId).toBeNull()
    expect(await c.toolCall('between')).toBe(true)

    expect(await c.start()).toBe(true)
    const second = c.runId
    expect(second).toMatch(UUID_V4)
    expect(second).not.toBe(first)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await c.end()).toBe(true)

    expect(shape(await storedEvents(id))).toEqual([
      ['before', null],
      ['agent_start', first],
      ['llm_call', first],
      ['search', first],
      ['llm_call', first],
      ['raw', first],
      ['llm_call', first],
      ['agent_end', first],
      ['between', null],
      ['agent_start', second],
      ['llm_call', second],
      ['agent_end', second],
    ])
    // The guarded call's hold and its report, which settled it, named the run.
    expect(p.seen.filter((s) => s.path === '/holds').map((s) => [s.body.run_id, s.status])).toEqual([[first, 200]])
    expect(wire(p.seen).find((e) => e.hold_id !== undefined)).toMatchObject({ run_id: first })
    const one = await run(first!)
    expect(one).toMatchObject({ run_id: first, agent_ids: [id], status: 'ended', llm_calls: 3, tool_calls: 2, event_count: 7 })
    expect(await run(second!)).toMatchObject({ status: 'ended', llm_calls: 1, event_count: 3 })
    const runs = await api(server.url, 'GET', `/agents/${encodeURIComponent(id)}/runs`, key)
    expect(runs.body.runs.map((r: { run_id: string; status: string }) => [r.run_id, r.status])).toEqual([
      [second, 'ended'],
      [first, 'ended'],
    ])
    expect(errors).toEqual([])
  })

  it('buffered: the queued events carry the run they were queued in, also when the batch leaves after the next start()', async () => {
    const id = agentName('buffered')
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, buffer: { maxAgeMs: NEVER } })
    await c.toolCall('before')
    await c.start()
    const first = c.runId!
    await c.toolCall('search')
    await c.llmCall('gpt-4o', CALL, { buffered: true })
    // Posted at once, ahead of the queued events: the same run.
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    // A start() without end(): a new run; the events queued before it keep theirs.
    await c.start()
    const second = c.runId!
    expect(second).not.toBe(first)
    await c.toolCall('fetch')
    expect(p.seen.filter((s) => s.path === '/events/batch')).toHaveLength(0)
    expect(await c.end()).toBe(true)
    expect(c.runId).toBeNull()
    await c.toolCall('after')
    expect(await c.flush()).toBe(true)

    const sent = wire(p.seen)
    expect(sent.map((e) => [e.tool_name ?? e.event_type, e.run_id ?? null])).toEqual([
      ['llm_call', first],
      ['before', null],
      ['agent_start', first],
      ['search', first],
      ['llm_call', first],
      ['agent_start', second],
      ['fetch', second],
      ['agent_end', second],
      ['after', null],
    ])
    expect(await run(first)).toMatchObject({ status: 'open', llm_calls: 2, tool_calls: 1, event_count: 4 })
    expect(await run(second)).toMatchObject({ status: 'ended', tool_calls: 1, event_count: 3 })
    expect(errors).toEqual([])
  })

  it('takes the run id given to start(); an event that names its own run keeps it; an invalid one is a TypeError and starts nothing', async () => {
    const id = agentName('given')
    const { c, errors } = make(id)
    const mine = `nightly-${randomUUID().slice(0, 8)}`
    const other = `handed-over-${randomUUID().slice(0, 8)}`
    expect(await c.start({ task: 'nightly' }, { runId: mine })).toBe(true)
    expect(c.runId).toBe(mine)
    expect(await c.toolCall('own', undefined, { runId: other })).toBe(true)
    expect(await c.llmCall('gpt-4o', CALL, { runId: other })).toBe(true)
    expect(await c.send({ event_type: 'tool_call', tool_name: 'raw', run_id: other })).toBe(true)
    expect(await c.toolCall('search')).toBe(true)

    await expect(c.start(undefined, { runId: '' })).rejects.toThrow(TypeError)
    await expect(c.toolCall('bad', undefined, { runId: 'x'.repeat(129) })).rejects.toThrow(TypeError)
    await expect(c.send({ event_type: 'tool_call', tool_name: 'bad', run_id: 'tab\there' })).rejects.toThrow(TypeError)
    expect(c.runId).toBe(mine)
    expect(await c.end()).toBe(true)

    expect(shape(await storedEvents(id))).toEqual([
      ['agent_start', mine],
      ['own', other],
      ['llm_call', other],
      ['raw', other],
      ['search', mine],
      ['agent_end', mine],
    ])
    expect(errors).toEqual([])
  })
})

/** A gpt-4o call's worst case for guard(): 1000 in, 1000 out = 0.0125 USD. */
const WORST = { model: 'gpt-4o', inputTokens: 1000, maxOutputTokens: 1000 }

async function setRunBudget(agentId: string, usd: number | null): Promise<void> {
  const res = await api(server.url, 'POST', '/config', key, { agent_id: agentId, run_budget_usd: usd })
  expect(res.status).toBe(200)
}

describe('a run budget', () => {
  it('the call that takes the run over it resolves false: the run stops, not the agent, until end(); the next run is metered', async () => {
    const id = agentName('budget')
    const p = await proxy()
    // 0.02 a run: the third 0.0075 call takes it over.
    const { c, errors } = make(id, { baseUrl: p.url, runBudgetUsd: 0.02 })
    // A second process of the same agent, in a run of its own.
    const other = make(id)
    expect(await c.start()).toBe(true)
    expect(await other.c.start()).toBe(true)
    const first = c.runId!
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect([c.runStopped, c.runStoppedReason]).toEqual([false, null])
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(c.lastResponse).toMatchObject({ paused: true, paused_reason: 'run_budget' })
    expect([c.runStopped, c.runStoppedReason, c.runId]).toEqual([true, 'run_budget', first])
    // The agent is not paused: its pause state says nothing of the run.
    expect([c.paused, c.pausedReason]).toEqual([false, null])

    // Nothing more of the run is sent.
    const requests = p.seen.length
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(await c.toolCall('search')).toBe(false)
    expect(await c.send({ event_type: 'tool_call', tool_name: 'raw' })).toBe(false)
    expect(await c.fromOpenAIChat('gpt-4o', { prompt_tokens: 1000, completion_tokens: 500, total_tokens: 1500 })).toBe(false)
    const fn = vi.fn()
    expect(await c.guard(WORST, fn)).toEqual({ allowed: false, reason: 'run_budget', pausedReason: 'run_budget', pausedPeriod: null, remainingUsd: null, worstCaseUsd: null })
    expect(fn).not.toHaveBeenCalled()
    expect(p.seen.length).toBe(requests)
    // The agent-level pause logic does not see it, nor clear it.
    expect(await c.refresh()).toBe(false)
    expect(await c.waitUntilResumed({ pollIntervalMs: 10, timeoutMs: 1000 })).toBe(true)
    expect([c.paused, c.runStopped]).toEqual([false, true])
    expect((await api(server.url, 'GET', `/agents/${id}`, key)).body).toMatchObject({ is_paused: false, paused_reason: null })

    // The agent's other run goes on.
    expect(await other.c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(other.c.lastResponse).toMatchObject({ paused: false, paused_reason: null })
    expect(other.c.runStopped).toBe(false)

    // end() still closes the run, and clears the stop.
    expect(await c.end()).toBe(true)
    expect(p.seen.slice(requests).map((s) => `${s.method} ${s.path}`)).toEqual([`GET /agents/${id}`, `GET /agents/${id}`, 'POST /events'])
    expect(p.seen.at(-1)!.body).toMatchObject({ event_type: 'agent_end', run_id: first })
    expect([c.runStopped, c.runStoppedReason, c.runId]).toEqual([false, null, null])
    expect(shape(await storedEvents(id)).filter(([, run]) => run === first)).toEqual([
      ['agent_start', first],
      ['llm_call', first],
      ['llm_call', first],
      ['llm_call', first],
      ['agent_end', first],
    ])
    expect(await run(first)).toMatchObject({ status: 'ended', llm_calls: 3, cost_usd: 0.0225 })

    // The next run runs, and is metered against a budget of its own.
    expect(await c.start()).toBe(true)
    const second = c.runId!
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await c.toolCall('search')).toBe(true)
    expect(await c.end()).toBe(true)
    expect(await run(second)).toMatchObject({ status: 'ended', llm_calls: 1, tool_calls: 1, cost_usd: 0.0075 })
    expect(await other.c.end()).toBe(true)
    expect([...errors, ...other.errors]).toEqual([])
  })

  it('buffered: a run_budget answer in a batch stops the run; one about an older run stops nothing', async () => {
    const id = agentName('budget-buffered')
    await setRunBudget(id, 0.01)
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url, buffer: { maxAgeMs: NEVER } })
    await c.start()
    const first = c.runId!
    expect(await c.llmCall('gpt-4o', CALL, { buffered: true })).toBe(true)
    expect(await c.llmCall('gpt-4o', CALL, { buffered: true })).toBe(true) // queued: not known yet
    expect(await c.flush()).toBe(true)
    const [batch] = p.seen.filter((s) => s.path === '/events/batch')
    expect(batch!.answer.results.map((r: { paused: boolean; paused_reason: string | null }) => r.paused_reason)).toEqual([null, null, 'run_budget'])
    expect([c.runStopped, c.runStoppedReason, c.paused]).toEqual([true, 'run_budget', false])
    // The run's calls resolve false, queued or not, and nothing is queued.
    expect(await c.toolCall('search')).toBe(false)
    expect(await c.llmCall('gpt-4o', CALL, { buffered: true })).toBe(false)
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(c.pendingEvents).toBe(0)
    expect(await c.end()).toBe(true)
    expect(c.runStopped).toBe(false)
    expect(shape(await storedEvents(id))).toEqual([
      ['agent_start', first],
      ['llm_call', first],
      ['llm_call', first],
      ['agent_end', first],
    ])

    // Events of a run that left after the next start(): their answer stops nothing now.
    await c.start()
    const old = c.runId!
    await c.llmCall('gpt-4o', CALL, { buffered: true })
    await c.llmCall('gpt-4o', CALL, { buffered: true })
    await c.start()
    const current = c.runId!
    expect(await c.flush()).toBe(true)
    const late = p.seen.filter((s) => s.path === '/events/batch').at(-1)!
    expect(late.body.events.map((e: { run_id: string }) => e.run_id)).toEqual([old, old, old, current])
    expect(late.answer.results.map((r: { paused_reason: string | null }) => r.paused_reason)).toEqual([null, null, 'run_budget', null])
    expect([c.runStopped, c.runId]).toEqual([false, current])
    expect(await c.llmCall('gpt-4o', CALL)).toBe(true)
    expect(await c.end()).toBe(true)
    expect(await run(old)).toMatchObject({ llm_calls: 2, status: 'open' })
    expect(await run(current)).toMatchObject({ llm_calls: 1, status: 'ended' })
    expect(errors).toEqual([])
  })

  it("guard(): a hold that would take the run over is refused, the run goes on; a hold of a run stopped elsewhere stops the client's run", async () => {
    const id = agentName('budget-guard')
    await setRunBudget(id, 0.015)
    const p = await proxy()
    const { c, errors } = make(id, { baseUrl: p.url })
    const shared = `shared-${randomUUID().slice(0, 8)}`
    expect(await c.start(undefined, { runId: shared })).toBe(true)
    // 0.0125 held, 0.0075 reported: the hold settled.
    expect(await c.guard(WORST, (hold) => hold.llmCall(CALL))).toMatchObject({ allowed: true, value: true })
    // 0.0075 spent and 0.0125 held would be 0.02: over the run's 0.015.
    const fn = vi.fn()
    expect(await c.guard(WORST, fn)).toEqual({ allowed: false, reason: 'run_budget', pausedReason: null, pausedPeriod: null, remainingUsd: expect.any(Number), worstCaseUsd: 0.0125 })
    expect(fn).not.toHaveBeenCalled()
    expect([c.runStopped, c.paused]).toEqual([false, false]) // a smaller call may fit
    expect(p.seen.filter((s) => s.path === '/holds').map((s) => s.body.run_id)).toEqual([shared, shared])

    // Another process of the agent takes the same run over its budget.
    const { c: helper } = make(id)
    expect(await helper.llmCall('gpt-4o', CALL, { runId: shared })).toBe(true) // 0.015: not over
    expect(await helper.llmCall('gpt-4o', CALL, { runId: shared })).toBe(true) // over, but not the helper's run: it goes on
    expect(helper.lastResponse).toMatchObject({ paused: true, paused_reason: 'run_budget' })
    expect(helper.runStopped).toBe(false)
    // This client learns of it from the hold's refusal.
    expect(await c.guard(WORST, fn)).toEqual({ allowed: false, reason: 'run_budget', pausedReason: 'run_budget', pausedPeriod: null, remainingUsd: expect.any(Number), worstCaseUsd: 0.0125 })
    expect([c.runStopped, c.runStoppedReason, c.paused]).toEqual([true, 'run_budget', false])
    const requests = p.seen.length
    expect(await c.llmCall('gpt-4o', CALL)).toBe(false)
    expect(await c.guard(WORST, fn)).toMatchObject({ allowed: false, reason: 'run_budget', pausedReason: 'run_budget', remainingUsd: null })
    expect(p.seen.length).toBe(requests)
    expect(await c.end()).toBe(true)
    expect(await c.start()).toBe(true)
    expect(await c.guard(WORST, (hold) => hold.llmCall(CALL))).toMatchObject({ allowed: true, value: true })
    expect(fn).not.toHaveBeenCalled()
    expect(errors).toEqual([])
  })

  it('runBudgetUsd goes with the start-up config; an invalid one throws', async () => {
    const id = agentName('budget-config')
    const p = await proxy()
    const { c } = make(id, { baseUrl: p.url, runBudgetUsd: 2.5, costThresholdUsd: 10 })
    expect(await c.start()).toBe(true)
    expect(p.seen[0]!.body).toEqual({ agent_id: id, cost_threshold_usd: 10, run_budget_usd: 2.5 })
    expect((await api(server.url, 'GET', `/agents/${id}`, key)).body.config.run_budget_usd).toBe(2.5)
    for (const bad of [0, -1, 1_000_001, Number.NaN, '1' as unknown as number]) expect(() => make(id, { runBudgetUsd: bad })).toThrow(TypeError)
  })
})
