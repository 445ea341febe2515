import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { firstInOrder } from '../src/agents/service.ts'
import { ManualClock } from '../src/clock.ts'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'
import { startRedis } from './helpers/redis.ts'

/**
 * GET /agents in pages (limit, cursor), sorted (cost, recent, agent_id) and filtered (paused,
 * prefix), embedded and with REDIS_URL: paging through gives every agent of the whole list
 * once, in its order; bad parameters are a 400 naming the field; a cursor carries a position,
 * never another user's data.
 */
let redis: Awaited<ReturnType<typeof startRedis>> | undefined
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
const modes: Array<[string, () => Promise<Harness>]> = [
  ['embedded', () => startHarness({ clock })],
  [
    'REDIS_URL',
    async () => {
      redis = await startRedis()
      return startHarness({ clock, env: { REDIS_URL: redis.url } })
    },
  ],
]

interface Row {
  agent_id: string
  total_cost_usd: number
  is_paused: boolean
}

describe.each(modes)('GET /agents in pages (%s)', (_mode, start) => {
  let h: Harness
  let key: string
  // Each agent's minute of its last event (for sort=recent), as sent.
  const lastMinute = new Map<string, number>()

  beforeAll(async () => {
    h = await start()
    key = await h.key(unique('u'))
    // 40 agents under two prefixes, costs with ties (out of 5 levels), last events over
    // 40 minutes in an order unrelated to their cost or id; three paused by hand.
    for (let i = 0; i < 40; i++) {
      const agent = `${i % 2 ? 'build' : 'chat'}-${String((i * 7) % 40).padStart(2, '0')}`
      clock.advance(60_000)
      const res = await h.post('/events', llmCall(agent, { output_tokens: 100 * ((i * 3) % 5) }), key)
      expect(res.statusCode).toBe(200)
      lastMinute.set(agent, Math.floor(clock.now() / 60_000))
    }
    for (const agent of ['chat-00', 'build-07', 'chat-14']) expect((await h.post('/config/pause', { agent_id: agent, is_paused: true }, key)).statusCode).toBe(200)
  })
  afterAll(async () => {
    await h.close()
    await redis?.stop()
  })

  const list = async (query: string, as = key) => {
    const res = await h.get(`/agents?${query}`, as)
    expect(res.statusCode, res.body).toBe(200)
    return res.json() as { agents: Row[]; next_cursor?: string | null; total?: number; summary?: unknown }
  }

  it('lists the whole list, without limit, in the order asked', async () => {
    const byCost = (await list('')).agents
    expect(byCost).toHaveLength(40)
    expect((await list('sort=cost')).agents).toEqual(byCost)
    for (let i = 1; i < byCost.length; i++) {
      const [a, b] = [byCost[i - 1]!, byCost[i]!]
      expect(a.total_cost_usd > b.total_cost_usd || (a.total_cost_usd === b.total_cost_usd && a.agent_id < b.agent_id)).toBe(true)
    }
    const ids = [...lastMinute.keys()]
    expect((await list('sort=agent_id')).agents.map((a) => a.agent_id)).toEqual([...ids].sort())
    const recent = [...ids].sort((a, b) => lastMinute.get(b)! - lastMinute.get(a)! || (a < b ? -1 : 1))
    expect((await list('sort=recent')).agents.map((a) => a.agent_id)).toEqual(recent)
    expect((await list('paused=true')).agents.map((a) => a.agent_id).sort()).toEqual(['build-07', 'chat-00', 'chat-14'])
    expect((await list('paused=false')).agents).toHaveLength(37)
    expect((await list('prefix=build-')).agents.every((a) => a.agent_id.startsWith('build-'))).toBe(true)
    expect((await list('prefix=build-')).agents).toHaveLength(20)
    expect((await list('prefix=nobody')).agents).toEqual([])
    expect((await list('ignoring_pause=true')).agents).toEqual([])
    expect((await list('alerted=false&ignoring_pause=false')).agents).toHaveLength(40)
  })

  it('says with a page how many agents match, and sums up the whole list whatever the filters', async () => {
    const whole = (await list('')).agents
    const page = await list('limit=2&paused=true')
    expect(page.agents).toHaveLength(2)
    expect(page).toMatchObject({
      total: 3,
      summary: { agents: 40, paused: 3, ignoring_pause: 0, alerted: 0, total_cost_usd: expect.closeTo(whole.reduce((n, a) => n + a.total_cost_usd, 0), 9) },
    })
    expect((await list('limit=50&prefix=chat-')).total).toBe(20)
    // The SPEC's form without limit: the list alone.
    expect(Object.keys(await list('paused=true'))).toEqual(['agents'])
  })

  it('gives every agent of the whole list once, in its order, whatever the page size, order and filters (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('cost', 'recent', 'agent_id'),
        fc.integer({ min: 1, max: 45 }),
        fc.constantFrom('', '&paused=true', '&paused=false'),
        fc.constantFrom('', '&prefix=chat-', '&prefix=build-1', '&prefix=c'),
        async (sort, limit, paused, prefix) => {
          const filters = `sort=${sort}${paused}${prefix}`
          const whole = (await list(filters)).agents
          const paged: Row[] = []
          let cursor: string | null | undefined
          for (let pages = 0; ; pages++) {
            const page = await list(`${filters}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`)
            expect(page.agents.length).toBeLessThanOrEqual(limit)
            paged.push(...page.agents)
            cursor = page.next_cursor
            if (cursor === null) break
            expect(pages).toBeLessThan(45)
          }
          expect(paged).toEqual(whole)
        },
      ),
      { numRuns: 40 },
    )
  })

  it('refuses bad parameters with a 400 naming the field', async () => {
    const cursor = (await list('limit=2')).next_cursor!
    const cases: Array<[string, string]> = [
      ['limit=0', 'limit'],
      ['limit=1001', 'limit'],
      ['limit=ten', 'limit'],
      ['sort=cheapest', 'sort'],
      ['paused=yes', 'paused'],
      ['ignoring_pause=1', 'ignoring_pause'],
      ['alerted=maybe', 'alerted'],
      ['prefix=', 'prefix'],
      [`prefix=${'x'.repeat(129)}`, 'prefix'],
      ['limit=5&cursor=bm90IGEgY3Vyc29y', 'cursor'],
      ['limit=5&cursor=%F0%9F%92%A5', 'cursor'],
      [`cursor=${cursor}`, 'cursor'], // a cursor without limit
      [`limit=2&sort=recent&cursor=${cursor}`, 'cursor'], // a cursor of another order
      ['limit=2&page=2', 'page'],
    ]
    for (const [query, field] of cases) {
      const res = await h.get(`/agents?${query}`, key)
      expect(res.statusCode, query).toBe(400)
      expect(res.json(), query).toMatchObject({ code: 'invalid_query', errors: [expect.objectContaining({ field })] })
    }
  })

  it("answers a cursor with the caller's own agents only, and moves past agents that joined meanwhile without repeating any", async () => {
    const other = await h.key(unique('u'))
    await h.post('/events', llmCall('theirs'), other)
    const first = await list('limit=10')
    // Another user presenting this user's cursor sees their own list from that position: none.
    expect((await list(`limit=10&cursor=${first.next_cursor}`, other)).agents.map((a) => a.agent_id)).not.toContain('chat-00')
    expect((await list('limit=10', other)).agents.map((a) => a.agent_id)).toEqual(['theirs'])

    // An agent that joins between two pages is never answered twice, nor is any other.
    await h.post('/events', llmCall('zz-late', { output_tokens: 1_000_000 }), key)
    const seen = [...first.agents.map((a) => a.agent_id)]
    let cursor = first.next_cursor
    while (cursor) {
      const page = await list(`limit=10&cursor=${cursor}`)
      seen.push(...page.agents.map((a) => a.agent_id))
      cursor = page.next_cursor
    }
    expect(new Set(seen).size).toBe(seen.length)
    expect(seen).toHaveLength(40) // the newcomer costs the most: it sorts before the cursor
  })
})

describe('GET /agents after Redis lost the hot state (REDIS_URL)', () => {
  let h: Harness
  let own: Awaited<ReturnType<typeof startRedis>>
  beforeAll(async () => {
    own = await startRedis()
    h = await startHarness({ env: { REDIS_URL: own.url } })
  })
  afterAll(async () => {
    await h.close()
    await own.stop()
  })

  it('lists every agent with its totals at once, loading the states it misses together', async () => {
    const key = await h.key(unique('u'))
    // More agents than one install call takes (500): the loads go in several.
    const N = 1200
    for (let i = 0; i < N; i += 600) {
      const events = Array.from({ length: 600 }, (_, k) => llmCall(`a${String(i + k).padStart(4, '0')}`, { output_tokens: 100 * ((i + k) % 3) }))
      expect((await h.post('/events/batch', { events }, key)).statusCode).toBe(200)
    }
    const before = (await h.get('/agents?sort=agent_id', key)).json().agents
    expect(before).toHaveLength(N)
    await h.flush() // the events reach ClickHouse, from which the states are loaded again
    await own.redis.flushall()
    const res = await h.get('/agents?sort=agent_id', key)
    expect(res.statusCode, res.body).toBe(200)
    expect(res.json().agents).toEqual(before)
  })
})

describe('firstInOrder (a page without sorting the whole list)', () => {
  it('is the first n of the whole list in its order, ties by id included', () => {
    const row = fc.record({ value: fc.integer({ min: 0, max: 5 }), agentId: fc.string({ minLength: 1, maxLength: 3 }) })
    fc.assert(
      fc.property(fc.uniqueArray(row, { selector: (r) => r.agentId, maxLength: 300 }), fc.integer({ min: 1, max: 320 }), (rows, n) => {
        const order = (a: { value: number; agentId: string }, b: { value: number; agentId: string }) => b.value - a.value || (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0)
        expect(firstInOrder(rows, n, order)).toEqual([...rows].sort(order).slice(0, n))
      }),
      { numRuns: 300 },
    )
  })
})
