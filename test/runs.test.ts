import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * GET /agents/{agent_id}/runs and GET /runs/{run_id} over the real service: runs opened and
 * closed in every order, shared by two agents, retried events, abandoned runs (the clock is
 * passed in), tenancy and bad parameters. Paging against a model: test/runs.pages.test.ts.
 */
const HOUR_MS = 3_600_000
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
let h: Harness
beforeAll(async () => {
  h = await startHarness({ clock })
})
afterAll(() => h.close())

/** gpt-4o at 2.5 / 10 USD per 1M tokens, 1000 in and 500 out; gpt-4o-mini at 0.15 / 0.6. */
const GPT4O_NANO = 7_500_000
const MINI_NANO = 450_000
const usd = (nano: number) => nano / 1e9

/** An instant as the runs and events show it: ISO 8601 with microseconds. */
const iso = (ms: number) => new Date(ms).toISOString().replace('Z', '000Z')

/** Posts an event one second after the one before (its server time is then the clock's, to the microsecond). */
async function send(key: string, body: Record<string, unknown>): Promise<{ at: number; event_id: string; duplicate?: boolean }> {
  clock.advance(1000)
  const res = await h.post('/events', body, key)
  expect(res.statusCode, res.body).toBe(200)
  return { at: clock.now(), ...(res.json() as { event_id: string; duplicate?: boolean }) }
}

const start = (agent: string, run: string) => ({ agent_id: agent, event_type: 'agent_start', run_id: run })
const end = (agent: string, run: string) => ({ agent_id: agent, event_type: 'agent_end', run_id: run })
const tool = (agent: string, run: string) => ({ agent_id: agent, event_type: 'tool_call', tool_name: 'search', run_id: run })

async function runsOf(key: string, agent: string, query = '') {
  const res = await h.get(`/agents/${encodeURIComponent(agent)}/runs${query}`, key)
  expect(res.statusCode, res.body).toBe(200)
  return res.json() as { agent_id: string; runs: Array<Record<string, unknown>>; next_cursor: string | null }
}

async function run(key: string, runId: string, query = '') {
  const res = await h.get(`/runs/${encodeURIComponent(runId)}${query}`, key)
  expect(res.statusCode, res.body).toBe(200)
  return res.json() as Record<string, unknown> & { events: Array<{ event_id: string; timestamp: string }>; next_before: string | null }
}

describe('GET /agents/{agent_id}/runs and GET /runs/{run_id}', () => {
  it('show a run from its agent_start to its agent_end: times, status, duration, cost, calls and models', async () => {
    const key = await h.key(unique('u'))
    const s = await send(key, start('a', 'r1'))
    const c1 = await send(key, llmCall('a', { run_id: 'r1' }))
    const c2 = await send(key, llmCall('a', { run_id: 'r1', model: 'gpt-4o-mini' }))
    const t = await send(key, tool('a', 'r1'))
    await send(key, llmCall('a')) // no run
    const e = await send(key, end('a', 'r1'))
    const figures = {
      started_at: iso(s.at),
      ended_at: iso(e.at),
      last_event_at: iso(e.at),
      status: 'ended',
      duration_ms: e.at - s.at,
      cost_usd: usd(GPT4O_NANO + MINI_NANO),
      llm_calls: 2,
      tool_calls: 1,
      event_count: 5,
      models: ['gpt-4o', 'gpt-4o-mini'],
      budget_stopped_at: null,
    }
    expect(await runsOf(key, 'a')).toEqual({ agent_id: 'a', runs: [{ run_id: 'r1', agent_id: 'a', ...figures }], next_cursor: null })

    const shown = await run(key, 'r1')
    expect({ ...shown, events: shown.events.map((ev) => ev.event_id) }).toEqual({
      run_id: 'r1',
      agent_ids: ['a'],
      ...figures,
      by_agent: [{ agent_id: 'a', ...figures }],
      cost_by_model: [
        { model: 'gpt-4o', cost_usd: usd(GPT4O_NANO), llm_calls: 1, input_tokens: 1000, output_tokens: 500 },
        { model: 'gpt-4o-mini', cost_usd: usd(MINI_NANO), llm_calls: 1, input_tokens: 1000, output_tokens: 500 },
      ],
      events: [e, t, c2, c1, s].map((x) => x.event_id),
      next_before: null,
    })
    expect(shown.events[0]).toMatchObject({ event_type: 'agent_end', run_id: 'r1', timestamp: iso(e.at) })
  })

  it("pages a run's events newest first, as GET /agents/{id} pages an agent's", async () => {
    const key = await h.key(unique('u'))
    const sent = [await send(key, start('a', 'paged'))]
    for (let i = 0; i < 6; i++) sent.push(await send(key, llmCall('a', { run_id: 'paged' })))
    const seen: string[] = []
    let query = '?limit=3'
    for (let page = 0; page < 5; page++) {
      const shown = await run(key, 'paged', query)
      expect(shown.events.length).toBeLessThanOrEqual(3)
      seen.push(...shown.events.map((ev) => ev.event_id))
      if (shown.next_before === null) break
      query = `?limit=3&before=${encodeURIComponent(shown.next_before)}`
    }
    expect(seen).toEqual(sent.map((x) => x.event_id).reverse())
  })

  it('opens the run an agent_start without a run_id names by its event_id', async () => {
    const key = await h.key(unique('u'))
    const s = await send(key, { agent_id: 'a', event_type: 'agent_start' })
    await send(key, llmCall('a', { run_id: s.event_id }))
    const [listed] = (await runsOf(key, 'a')).runs
    expect(listed).toMatchObject({ run_id: s.event_id, started_at: iso(s.at), status: 'open', event_count: 2, llm_calls: 1 })
    expect(await run(key, s.event_id)).toMatchObject({ run_id: s.event_id, agent_ids: ['a'], event_count: 2 })
  })

  it('ends a run whose agent_end arrives before its agent_start, started at the agent_start, never of negative duration', async () => {
    const key = await h.key(unique('u'))
    const e = await send(key, end('a', 'late'))
    await send(key, llmCall('a', { run_id: 'late' }))
    const s = await send(key, start('a', 'late'))
    expect((await runsOf(key, 'a')).runs).toEqual([
      {
        run_id: 'late',
        agent_id: 'a',
        started_at: iso(s.at),
        ended_at: iso(e.at),
        last_event_at: iso(s.at),
        status: 'ended',
        duration_ms: 0,
        cost_usd: usd(GPT4O_NANO),
        llm_calls: 1,
        tool_calls: 0,
        event_count: 3,
        models: ['gpt-4o'],
        budget_stopped_at: null,
      },
    ])
  })

  it('starts a run without an agent_start at its first event, open, lasting to its last event', async () => {
    const key = await h.key(unique('u'))
    const first = await send(key, llmCall('a', { run_id: 'headless' }))
    const last = await send(key, tool('a', 'headless'))
    expect((await runsOf(key, 'a')).runs).toEqual([
      expect.objectContaining({ run_id: 'headless', started_at: iso(first.at), ended_at: null, last_event_at: iso(last.at), status: 'open', duration_ms: last.at - first.at, event_count: 2 }),
    ])
  })

  it('keeps two runs of one agent at once apart, the later start listed first', async () => {
    const key = await h.key(unique('u'))
    const sa = await send(key, start('a', 'one'))
    const sb = await send(key, start('a', 'two'))
    await send(key, llmCall('a', { run_id: 'one' }))
    await send(key, llmCall('a', { run_id: 'two', model: 'gpt-4o-mini' }))
    const lb = await send(key, llmCall('a', { run_id: 'two', model: 'gpt-4o-mini' }))
    const ea = await send(key, end('a', 'one'))
    const { runs } = await runsOf(key, 'a')
    expect(runs.map((r) => r.run_id)).toEqual(['two', 'one'])
    expect(runs[0]).toMatchObject({ started_at: iso(sb.at), last_event_at: iso(lb.at), status: 'open', event_count: 3, llm_calls: 2, cost_usd: usd(2 * MINI_NANO), models: ['gpt-4o-mini'] })
    expect(runs[1]).toMatchObject({ started_at: iso(sa.at), ended_at: iso(ea.at), status: 'ended', event_count: 3, llm_calls: 1, cost_usd: usd(GPT4O_NANO), models: ['gpt-4o'] })
  })

  it('shows a run two agents share as one, with each agent’s part, and lists each part under its agent', async () => {
    const key = await h.key(unique('u'))
    const s = await send(key, start('lead', 'shared'))
    const y1 = await send(key, llmCall('helper', { run_id: 'shared', model: 'gpt-4o-mini' }))
    const x1 = await send(key, llmCall('lead', { run_id: 'shared' }))
    const e = await send(key, end('lead', 'shared'))
    const y2 = await send(key, tool('helper', 'shared')) // the helper's last event comes after the lead's end
    const lead = {
      agent_id: 'lead',
      started_at: iso(s.at),
      ended_at: iso(e.at),
      last_event_at: iso(e.at),
      status: 'ended',
      duration_ms: e.at - s.at,
      cost_usd: usd(GPT4O_NANO),
      llm_calls: 1,
      tool_calls: 0,
      event_count: 3,
      models: ['gpt-4o'],
      budget_stopped_at: null,
    }
    const helper = {
      agent_id: 'helper',
      started_at: iso(y1.at),
      ended_at: null,
      last_event_at: iso(y2.at),
      status: 'open',
      duration_ms: y2.at - y1.at,
      cost_usd: usd(MINI_NANO),
      llm_calls: 1,
      tool_calls: 1,
      event_count: 2,
      models: ['gpt-4o-mini'],
      budget_stopped_at: null,
    }
    expect((await runsOf(key, 'lead')).runs).toEqual([{ run_id: 'shared', ...lead }])
    expect((await runsOf(key, 'helper')).runs).toEqual([{ run_id: 'shared', ...helper }])
    const shown = await run(key, 'shared')
    expect({ ...shown, events: shown.events.map((ev) => ev.event_id) }).toEqual({
      run_id: 'shared',
      agent_ids: ['helper', 'lead'],
      // The whole run, as if one agent had sent every event: the lead's start and end, the helper's last event.
      started_at: iso(s.at),
      ended_at: iso(e.at),
      last_event_at: iso(y2.at),
      status: 'ended',
      duration_ms: e.at - s.at,
      cost_usd: usd(GPT4O_NANO + MINI_NANO),
      llm_calls: 2,
      tool_calls: 1,
      event_count: 5,
      models: ['gpt-4o', 'gpt-4o-mini'],
      budget_stopped_at: null,
      by_agent: [helper, lead],
      cost_by_model: [
        { model: 'gpt-4o', cost_usd: usd(GPT4O_NANO), llm_calls: 1, input_tokens: 1000, output_tokens: 500 },
        { model: 'gpt-4o-mini', cost_usd: usd(MINI_NANO), llm_calls: 1, input_tokens: 1000, output_tokens: 500 },
      ],
      events: [y2, e, x1, y1, s].map((x) => x.event_id),
      next_before: null,
    })
  })

  it('counts an event sent again with its event_id once', async () => {
    const key = await h.key(unique('u'))
    const id = randomUUID()
    await send(key, start('a', 'retried'))
    expect((await send(key, llmCall('a', { run_id: 'retried', event_id: id }))).duplicate).toBeUndefined()
    expect((await send(key, llmCall('a', { run_id: 'retried', event_id: id }))).duplicate).toBe(true)
    await send(key, { ...end('a', 'retried'), event_id: id.replace(/.$/, (c) => (c === '0' ? '1' : '0')) })
    expect((await runsOf(key, 'a')).runs[0]).toMatchObject({ event_count: 3, llm_calls: 1, cost_usd: usd(GPT4O_NANO), status: 'ended' })
    expect(await run(key, 'retried')).toMatchObject({ event_count: 3, llm_calls: 1 })
    expect((await run(key, 'retried')).events).toHaveLength(3)
  })

  it('shows a run with no agent_end as abandoned once its last event is older than RUN_ABANDONED_AFTER (24 h), and ended once its end arrives', async () => {
    const key = await h.key(unique('u'))
    await send(key, start('a', 'left'))
    const last = await send(key, llmCall('a', { run_id: 'left' }))
    await send(key, start('a', 'closed'))
    await send(key, end('a', 'closed'))
    clock.set(last.at + 24 * HOUR_MS)
    const status = async () => Object.fromEntries((await runsOf(key, 'a')).runs.map((r) => [r.run_id, r.status]))
    expect(await status()).toEqual({ left: 'open', closed: 'ended' })
    clock.advance(1)
    expect(await status()).toEqual({ left: 'abandoned', closed: 'ended' })
    expect(await run(key, 'left')).toMatchObject({ status: 'abandoned', ended_at: null, last_event_at: iso(last.at) })
    clock.advance(48 * HOUR_MS)
    expect(await status()).toEqual({ left: 'abandoned', closed: 'ended' })
    const e = await send(key, end('a', 'left'))
    expect((await runsOf(key, 'a')).runs.find((r) => r.run_id === 'left')).toMatchObject({ status: 'ended', ended_at: iso(e.at) })
  })

  it('answers an empty list for an agent with events or a config but no runs, and 404 for an agent with neither', async () => {
    const key = await h.key(unique('u'))
    await send(key, llmCall('busy'))
    expect(await runsOf(key, 'busy')).toEqual({ agent_id: 'busy', runs: [], next_cursor: null })
    expect((await h.post('/config', { agent_id: 'configured', cost_threshold_usd: 2 }, key)).statusCode).toBe(200)
    expect(await runsOf(key, 'configured')).toEqual({ agent_id: 'configured', runs: [], next_cursor: null })
    const res = await h.get('/agents/nobody/runs', key)
    expect(res.statusCode).toBe(404)
    expect(res.json()).toMatchObject({ status: 404, code: 'agent_not_found' })
  })
})

describe('runs are the user’s own', () => {
  it("answers 404 for another user's run id, never lists another user's runs, and keeps two users' runs of one id apart", async () => {
    const a = await h.key(unique('u'))
    const b = await h.key(unique('u'))
    await send(a, start('agent', 'mine'))
    await send(a, llmCall('agent', { run_id: 'both' }))
    await send(b, llmCall('agent', { run_id: 'both', model: 'gpt-4o-mini' }))
    await send(b, llmCall('agent', { run_id: 'both', model: 'gpt-4o-mini' }))
    const res = await h.get('/runs/mine', b)
    expect(res.statusCode).toBe(404)
    expect(res.json()).toMatchObject({ status: 404, code: 'run_not_found' })
    expect((await runsOf(b, 'agent')).runs.map((r) => r.run_id)).toEqual(['both'])
    expect((await runsOf(a, 'agent')).runs.map((r) => r.run_id).sort()).toEqual(['both', 'mine'])
    expect(await run(a, 'both')).toMatchObject({ agent_ids: ['agent'], event_count: 1, cost_usd: usd(GPT4O_NANO) })
    expect(await run(b, 'both')).toMatchObject({ agent_ids: ['agent'], event_count: 2, cost_usd: usd(2 * MINI_NANO), models: ['gpt-4o-mini'] })
    expect((await run(b, 'both')).events).toHaveLength(2)
    const other = await h.get('/agents/agent/runs', await h.key(unique('u')))
    expect(other.statusCode).toBe(404)
  })

  it('answers 401 without a key', async () => {
    expect((await h.get('/agents/a/runs', null)).statusCode).toBe(401)
    expect((await h.get('/runs/r', null)).statusCode).toBe(401)
  })
})

describe('bad parameters are a 400 naming the parameter', () => {
  const cursorOf = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  it.each([
    ['/agents/a/runs?limit=0', 'limit'],
    ['/agents/a/runs?limit=1001', 'limit'],
    ['/agents/a/runs?limit=ten', 'limit'],
    ['/agents/a/runs?limit=1e3', 'limit'],
    ['/agents/a/runs?cursor=not-a-cursor', 'cursor'],
    [`/agents/a/runs?cursor=${cursorOf([1])}`, 'cursor'],
    [`/agents/a/runs?cursor=${cursorOf([-1, 'r'])}`, 'cursor'],
    [`/agents/a/runs?cursor=${cursorOf([1.5, 'r'])}`, 'cursor'],
    [`/agents/a/runs?cursor=${cursorOf([1, ''])}`, 'cursor'],
    [`/agents/a/runs?cursor=${'x'.repeat(1025)}`, 'cursor'],
    ['/agents/a/runs?sort=cost', 'sort'],
    [`/agents/${'a'.repeat(129)}/runs`, 'agent_id'],
    [`/runs/${'r'.repeat(129)}`, 'run_id'],
    ['/runs/r%09un', 'run_id'],
    ['/runs/r?limit=0', 'limit'],
    ['/runs/r?before=yesterday', 'before'],
    ['/runs/r?cursor=x', 'cursor'],
  ])('%s', async (url, field) => {
    const key = await h.key(unique('u'))
    await send(key, start('a', 'r'))
    const res = await h.get(url, key)
    expect(res.statusCode, res.body).toBe(400)
    expect(res.json()).toMatchObject({ code: 'invalid_query', errors: [expect.objectContaining({ field })] })
  })
})
