import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { costsQuery } from '../src/schemas/costs.ts'
import { startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * GET /costs/dimensions: the metadata keys a user's events carried in a range, the most used
 * first, read from hourly_dimensions: the keys the dashboard offers to group cost by.
 */
const HOUR = 3_600_000
const START = Date.UTC(2026, 4, 10, 12, 0, 0)
const clock = new ManualClock(START)
let h: Harness
beforeAll(async () => {
  h = await startHarness({ clock })
})
afterAll(() => h.close())

const iso = (ms: number) => new Date(ms).toISOString()

async function post(key: string, metadata: Record<string, unknown>, at: number, agent = 'a') {
  clock.set(at)
  const res = await h.post('/events', { agent_id: agent, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 100, output_tokens: 10, metadata }, key)
  expect(res.statusCode, res.body).toBe(200)
}

async function keysOf(key: string, query = '') {
  const res = await h.get(`/costs/dimensions${query ? `?${query}` : ''}`, key)
  expect(res.statusCode, res.body).toBe(200)
  return res.json() as { from: string; to: string; keys: Array<{ key: string; events: number }> }
}

// Keys an agent may send, hostile ones among them: SQL, a parameter's placeholder, quotes
// and backslashes, a dot, unicode beyond the BMP, and the longest key GET /costs takes
// (256 characters, the last one beyond the BMP).
const HOSTILE = ["x'); DROP TABLE events; --", '{k0:String}', 'a.b', 'é"🚀\\', `${'k'.repeat(255)}🚀`, "\\' OR 1=1 --"]
// Keys GET /costs cannot group by, which are never offered: empty, too long (257 characters), control characters.
const UNUSABLE = ['', `${'k'.repeat(256)}🚀`, 'tab\there', 'c1\u0085', 'del\u007f']

describe('GET /costs/dimensions', () => {
  it("lists the user's metadata keys of the range, the most used first, each counted by its events; not another user's", async () => {
    const key = await h.key(unique('u'))
    const other = await h.key(unique('u'))
    const at = START + 2 * HOUR
    // customer: 3 events, feature: 2, tier: 2 (a tie, by key), flag: 1. Objects, arrays and
    // nulls are not dimensions: `nested` and `none` are no keys.
    await post(key, { customer: 'acme', feature: 'chat', tier: 1 }, at)
    await post(key, { customer: 'globex', feature: 'search', tier: 2, nested: { a: 1 } }, at + 10 * 60_000, 'b')
    await post(key, { customer: 'acme', flag: true, none: null, list: [1] }, at + HOUR)
    // Another user's events in the same hours, with the same keys and more of them: never counted.
    for (let i = 0; i < 5; i++) await post(other, { customer: 'x', secret_key: 'y', flag: false }, at)

    // The range: whole UTC hours, as GET /costs takes it (an instant on the hour ends there).
    const both = `from=${iso(at)}&to=${iso(at + 2 * HOUR)}`
    const body = await keysOf(key, both)
    expect(body).toEqual({
      from: iso(at),
      to: iso(at + 2 * HOUR),
      keys: [
        { key: 'customer', events: 3 },
        { key: 'feature', events: 2 },
        { key: 'tier', events: 2 },
        { key: 'flag', events: 1 },
      ],
    })
    expect((await keysOf(other, both)).keys).toEqual([
      { key: 'customer', events: 5 },
      { key: 'flag', events: 5 },
      { key: 'secret_key', events: 5 },
    ])

    // The second hour alone holds one event.
    expect((await keysOf(key, `from=${iso(at + HOUR + 1)}&to=${iso(at + HOUR + 2)}`)).keys).toEqual([
      { key: 'customer', events: 1 },
      { key: 'flag', events: 1 },
    ])
    expect((await keysOf(key, `from=${iso(at - 5 * HOUR)}&to=${iso(at - 1)}`)).keys).toEqual([])
    // limit: the top ones only.
    expect((await keysOf(key, `${both}&limit=2`)).keys.map((k) => k.key)).toEqual(['customer', 'feature'])

    // By default, the 24 hours that end with the current one.
    clock.set(at + 23 * HOUR)
    const day = await keysOf(key)
    expect([day.from, day.to]).toEqual([iso(at), iso(at + 24 * HOUR)])
    expect(day.keys.map((k) => k.key)).toEqual(['customer', 'feature', 'tier', 'flag'])
    clock.set(at + 24 * HOUR)
    expect((await keysOf(key)).keys.map((k) => k.key)).toEqual(['customer', 'flag'])
  })

  it('offers hostile keys as they are, each one GET /costs groups by; never one it would refuse', async () => {
    const key = await h.key(unique('u'))
    const at = START + 30 * HOUR
    const metadata = Object.fromEntries([...HOSTILE, ...UNUSABLE].map((k, i) => [k, `v${i}`]))
    await post(key, metadata, at)
    await post(key, { [HOSTILE[0]!]: 'again' }, at)

    const range = `from=${iso(at)}&to=${iso(at + 1)}`
    const { keys } = await keysOf(key, range)
    const byCount = [{ key: HOSTILE[0]!, events: 2 }, ...[...HOSTILE.slice(1)].sort(byBytes).map((k) => ({ key: k, events: 1 }))]
    expect(keys).toEqual(byCount)
    // Each key offered is one GET /costs takes, and groups by: its value, and its events.
    for (const { key: k, events } of keys) {
      expect(costsQuery(at).safeParse({ group_by: `metadata.${k}` }).success, k).toBe(true)
      const res = await h.get(`/costs?group_by=${encodeURIComponent(`metadata.${k}`)}&${range}`, key)
      expect(res.statusCode, res.body).toBe(200)
      const groups = res.json().groups as Array<{ group: Record<string, string | null>; events: number }>
      expect(groups.filter((g) => g.group[`metadata.${k}`] !== null).reduce((n, g) => n + g.events, 0), k).toBe(events)
    }
    // What is left out is what GET /costs refuses.
    for (const k of UNUSABLE) expect(costsQuery(at).safeParse({ group_by: `metadata.${k}` }).success, JSON.stringify(k)).toBe(false)
  })

  it.each([
    ['limit=0', 'limit'],
    ['limit=1001', 'limit'],
    ['limit=ten', 'limit'],
    ['from=yesterday', 'from'],
    ['from=2026-05-02T00:00:00Z&to=2026-05-01T00:00:00Z', 'from'],
    ['from=2024-01-01T00:00:00Z&to=2026-01-01T00:00:00Z', 'from'],
    ['group_by=agent', 'group_by'],
  ])('%s → 400 naming %s', async (query, field) => {
    const key = await h.key(unique('u'))
    const res = await h.get(`/costs/dimensions?${query}`, key)
    expect(res.statusCode, res.body).toBe(400)
    expect(res.json()).toMatchObject({ code: 'invalid_query' })
    expect(res.json().errors.map((e: { field: string }) => e.field)).toContain(field)
  })

  it('needs an API key', async () => {
    expect((await h.get('/costs/dimensions', null)).statusCode).toBe(401)
  })
})

/** ClickHouse orders strings by their bytes. */
function byBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b))
}
