import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * Runs against a plain model: random events (starts, calls of two models, tool calls, ends,
 * in any order, over a few agents sharing a few run ids, with gaps of hours between some) are
 * sent, and the same figures are computed here from what was sent. Paging through an agent's
 * runs with any page size gives exactly the model's list, in its order, each run once; GET
 * /runs/{id} gives the model's figures over every agent of the run.
 */
const HOUR_MS = 3_600_000
const ABANDONED_AFTER_MS = 24 * HOUR_MS
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
let h: Harness
beforeAll(async () => {
  h = await startHarness({ clock })
})
afterAll(() => h.close())

const AGENTS = ['a0', 'a1', 'a2']
const RUNS = ['r0', 'r1', 'r2', 'r3', 'r4', 'r5']
type Kind = 'agent_start' | 'gpt-4o' | 'gpt-4o-mini' | 'tool_call' | 'agent_end' | 'no_run' | 'gap'
const COST_NANO: Record<string, number> = { 'gpt-4o': 7_500_000, 'gpt-4o-mini': 450_000 }

interface Op {
  agent: number
  run: number
  kind: Kind
}

/** One agent's part of a run as the model keeps it (epoch ms: the clock moves in whole seconds). */
interface Part {
  first: number
  last: number
  start: number | null
  end: number | null
  costNano: number
  events: number
  llm: number
  tools: number
  models: Set<string>
}

const op: fc.Arbitrary<Op> = fc.record({
  agent: fc.integer({ min: 0, max: AGENTS.length - 1 }),
  run: fc.integer({ min: 0, max: RUNS.length - 1 }),
  kind: fc.constantFrom<Kind>('agent_start', 'gpt-4o', 'gpt-4o', 'gpt-4o-mini', 'tool_call', 'agent_end', 'no_run', 'gap'),
})

function body(o: Op) {
  const base = { agent_id: AGENTS[o.agent]!, run_id: RUNS[o.run]! }
  switch (o.kind) {
    case 'agent_start':
    case 'agent_end':
      return { ...base, event_type: o.kind }
    case 'tool_call':
      return { ...base, event_type: 'tool_call', tool_name: 'search' }
    case 'no_run':
      return { agent_id: base.agent_id, event_type: 'tool_call', tool_name: 'search' }
    default:
      return { ...base, event_type: 'llm_call', model: o.kind, input_tokens: 1000, output_tokens: 500 }
  }
}

function record(parts: Map<string, Part>, o: Op, at: number): void {
  const k = `${AGENTS[o.agent]}\u0000${RUNS[o.run]}`
  const p = parts.get(k) ?? { first: at, last: at, start: null, end: null, costNano: 0, events: 0, llm: 0, tools: 0, models: new Set<string>() }
  p.first = Math.min(p.first, at)
  p.last = Math.max(p.last, at)
  if (o.kind === 'agent_start') p.start = Math.min(p.start ?? at, at)
  if (o.kind === 'agent_end') p.end = Math.max(p.end ?? at, at)
  if (o.kind === 'tool_call') p.tools++
  if (o.kind === 'gpt-4o' || o.kind === 'gpt-4o-mini') {
    p.llm++
    p.costNano += COST_NANO[o.kind]!
    p.models.add(o.kind)
  }
  p.events++
  parts.set(k, p)
}

const iso = (ms: number) => new Date(ms).toISOString().replace('Z', '000Z')

/** What the API shows of a part or of a whole run, as of `now`. */
function shown(p: Part, now: number) {
  const started = p.start ?? p.first
  return {
    started_at: iso(started),
    ended_at: p.end === null ? null : iso(p.end),
    last_event_at: iso(p.last),
    status: p.end !== null ? 'ended' : now - p.last > ABANDONED_AFTER_MS ? 'abandoned' : 'open',
    duration_ms: Math.max(0, (p.end ?? p.last) - started),
    cost_usd: p.costNano / 1e9,
    llm_calls: p.llm,
    tool_calls: p.tools,
    event_count: p.events,
    models: [...p.models].sort(),
    // No run budget here: test/run-budget.test.ts has runs it stops.
    budget_stopped_at: null,
  }
}

function whole(parts: Part[]): Part {
  const starts = parts.flatMap((p) => (p.start === null ? [] : [p.start]))
  const ends = parts.flatMap((p) => (p.end === null ? [] : [p.end]))
  return {
    first: Math.min(...parts.map((p) => p.first)),
    last: Math.max(...parts.map((p) => p.last)),
    start: starts.length ? Math.min(...starts) : null,
    end: ends.length ? Math.max(...ends) : null,
    costNano: parts.reduce((s, p) => s + p.costNano, 0),
    events: parts.reduce((s, p) => s + p.events, 0),
    llm: parts.reduce((s, p) => s + p.llm, 0),
    tools: parts.reduce((s, p) => s + p.tools, 0),
    models: new Set(parts.flatMap((p) => [...p.models])),
  }
}

describe('runs against a model of the events sent', () => {
  it('pages through each agent’s runs in the model’s order, each once, and shows each run as the model folds it', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 30 }), fc.integer({ min: 1, max: 4 }), async (ops, limit) => {
        const key = await h.key(unique('u'))
        const parts = new Map<string, Part>()
        for (const o of ops) {
          if (o.kind === 'gap') {
            clock.advance(13 * HOUR_MS)
            continue
          }
          clock.advance(1000)
          const res = await h.post('/events', body(o), key)
          expect(res.statusCode, res.body).toBe(200)
          if (o.kind !== 'no_run') record(parts, o, clock.now())
        }
        const now = clock.now()
        for (const agent of AGENTS) {
          const expected = RUNS.flatMap((run) => {
            const p = parts.get(`${agent}\u0000${run}`)
            return p ? [{ run_id: run, agent_id: agent, ...shown(p, now), at: p.start ?? p.first }] : []
          })
            .sort((x, y) => y.at - x.at || (x.run_id < y.run_id ? 1 : -1))
            .map(({ at: _, ...r }) => r)
          const listed: unknown[] = []
          let cursor: string | null = null
          let pages = 0
          do {
            const res = await h.get(`/agents/${agent}/runs?limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`, key)
            const sentByAgent = ops.some((o) => o.kind !== 'gap' && AGENTS[o.agent] === agent)
            if (!sentByAgent) {
              expect(res.statusCode).toBe(404)
              break
            }
            expect(res.statusCode, res.body).toBe(200)
            const page = res.json() as { runs: unknown[]; next_cursor: string | null }
            expect(page.runs.length).toBeLessThanOrEqual(limit)
            listed.push(...page.runs)
            cursor = page.next_cursor
            pages++
          } while (cursor !== null && pages <= RUNS.length)
          expect(listed).toEqual(expected)
        }
        for (const run of RUNS) {
          const mine = AGENTS.flatMap((agent) => {
            const p = parts.get(`${agent}\u0000${run}`)
            return p ? [{ agent, p }] : []
          })
          const res = await h.get(`/runs/${run}?limit=1000`, key)
          if (mine.length === 0) {
            expect(res.statusCode).toBe(404)
            continue
          }
          expect(res.statusCode, res.body).toBe(200)
          const { events, cost_by_model: _, next_before, ...figures } = res.json() as { events: Array<{ run_id: string }>; cost_by_model: unknown; next_before: unknown }
          expect(figures).toEqual({
            run_id: run,
            agent_ids: mine.map((m) => m.agent),
            ...shown(whole(mine.map((m) => m.p)), now),
            by_agent: mine.map((m) => ({ agent_id: m.agent, ...shown(m.p, now) })),
          })
          expect(events).toHaveLength(whole(mine.map((m) => m.p)).events)
          expect(events.every((e) => e.run_id === run)).toBe(true)
          expect(next_before).toBeNull()
        }
      }),
      { numRuns: 25 },
    )
  }, 300_000)
})
