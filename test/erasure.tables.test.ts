import { randomBytes, randomUUID } from 'node:crypto'
import fc from 'fast-check'
import { z } from 'zod'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { countUserRows, deleteUserRows, NO_USER_DATA, USER_DATA, waitForReplacedParts } from '../src/storage/erasure.ts'
import { select } from '../src/storage/query.ts'
import { filesHoldingAny } from './helpers/erasure.ts'
import { startHarness, type Harness } from './helpers/harness.ts'

// The list of tables an erasure works through (storage/erasure.ts USER_DATA) against the
// schema the migrations build, and the erasure on the real engine (chDB in process).

let h: Harness
beforeAll(async () => {
  h = await startHarness()
})
afterAll(() => h?.close())

const tables = () =>
  select(
    h.services.clickhouse,
    `SELECT name, engine, create_table_query AS ddl, has((SELECT groupArray(name) FROM system.columns WHERE database = currentDatabase() AND table = t.name), 'user_id') AS has_user
     FROM system.tables AS t WHERE database = currentDatabase()`,
    {},
    z.object({ name: z.string(), engine: z.string(), ddl: z.string(), has_user: z.coerce.number() }),
  )

describe('the tables an erasure works through', () => {
  it('names every table of the schema: with user data, without, or a view that stores nothing of its own', async () => {
    const listed = new Set(USER_DATA.map((t) => t.table))
    const unclassified: string[] = []
    for (const t of await tables()) {
      // An inner table is its view's storage: the view is what is listed.
      if (t.name.startsWith('.inner')) continue
      // A view that writes to a table of its own (TO …) holds nothing: its target is classified.
      if (t.engine === 'MaterializedView' && /^CREATE MATERIALIZED VIEW \S+ TO /.test(t.ddl)) continue
      if (t.has_user === 1) expect(listed.has(t.name), `${t.name} has a user_id column`).toBe(true)
      if (!listed.has(t.name) && NO_USER_DATA[t.name] === undefined) unclassified.push(t.name)
    }
    expect(unclassified, 'tables neither in USER_DATA nor in NO_USER_DATA (storage/erasure.ts)').toEqual([])
    const existing = new Set((await tables()).map((t) => t.name))
    for (const t of listed) expect(existing.has(t), `${t} is listed but does not exist`).toBe(true)
  })

  it("deletes a user's rows from every listed table, nothing of another, and no file keeps them", { timeout: 120_000 }, async () => {
    const ch = h.services.clickhouse
    const victim = `tablevictim${randomBytes(6).toString('hex')}`
    const other = `tableother${randomBytes(6).toString('hex')}`
    for (const user of [victim, other]) {
      // Through events (the views fill hourly_cost, hourly_dimensions, hourly_dimension_keys, runs) …
      await ch.insert({
        table: 'events',
        format: 'JSONEachRow',
        values: [{ user_id: user, agent_id: `${user}-agent`, timestamp: '2026-11-27 10:00:00.000000', event_id: randomUUID(), event_type: 'llm_call', model: 'gpt-4o', metadata: JSON.stringify({ team: `${user}-team` }), run_id: `${user}-run` }],
      })
      // … and a row of each other table, its columns but user_id left to their defaults.
      for (const { table } of USER_DATA) {
        if (['events', 'hourly_cost', 'hourly_dimensions', 'hourly_dimension_keys', 'runs', 'dead_letters'].includes(table)) continue
        await ch.command({ query: `INSERT INTO ${table} (user_id) VALUES ({user:String})`, query_params: { user } })
      }
      await ch.insert({ table: 'dead_letters', format: 'JSONEachRow', values: [{ target_table: 'events', row: JSON.stringify({ user_id: user }), error: 'test' }] })
    }
    const before = { victim: await countUserRows(ch, victim), other: await countUserRows(ch, other) }
    for (const { table } of USER_DATA) expect(before.victim[table], table).toBeGreaterThan(0)

    await deleteUserRows(ch, victim)
    expect(Object.values(await countUserRows(ch, victim)).every((n) => n === 0)).toBe(true)
    expect(await countUserRows(ch, other)).toEqual(before.other)
    await waitForReplacedParts(ch, 90_000)
    expect(filesHoldingAny(h.dataDir, [victim])).toEqual({})
    expect(Object.keys(filesHoldingAny(h.dataDir, [other]))).toEqual([other])
  })
})

describe('erasures among other users’ events', () => {
  it('every acknowledged event of the other users is kept once, whatever the interleaving', { timeout: 240_000 }, async () => {
    const others = await Promise.all(['a', 'b'].map(async (n) => ({ user: `keep-${n}-${randomUUID()}`, key: '' })))
    for (const o of others) o.key = await h.key(o.user)
    const acked = new Map<string, string[]>(others.map((o) => [o.user, []]))

    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(fc.record({ kind: fc.constant('ingest' as const), who: fc.nat(1), n: fc.integer({ min: 1, max: 4 }) }), fc.record({ kind: fc.constant('erase' as const) })), { minLength: 2, maxLength: 6 }),
        fc.array(fc.nat(3), { minLength: 6, maxLength: 6 }),
        async (ops, gaps) => {
          const victims: string[] = []
          const running: Promise<unknown>[] = []
          for (const [i, op] of ops.entries()) {
            if (op.kind === 'ingest') {
              const o = others[op.who]!
              running.push(
                (async () => {
                  for (let j = 0; j < op.n; j++) {
                    const id = randomUUID()
                    const res = await h.post('/events', { event_id: id, agent_id: 'keep-agent', event_type: 'tool_call', tool_name: 't' }, o.key)
                    expect(res.statusCode).toBe(200)
                    acked.get(o.user)!.push(id)
                  }
                })(),
              )
            } else {
              const victim = `propvictim-${randomUUID()}`
              victims.push(victim)
              const key = await h.key(victim)
              expect((await h.post('/events', { event_id: randomUUID(), agent_id: 'gone', event_type: 'agent_start' }, key)).statusCode).toBe(200)
              running.push(h.services.eraseUser(victim, 'test'))
            }
            // Some operations start only after those before them ended: the interleavings vary.
            if (gaps[i % gaps.length] === 0) await Promise.all(running.splice(0))
          }
          await Promise.all(running)
          await h.flush()
          for (const victim of victims) expect(Object.values(await countUserRows(h.services.clickhouse, victim)).every((n) => n === 0)).toBe(true)
          for (const o of others) {
            const rows = await select(
              h.services.clickhouse,
              'SELECT toString(event_id) AS id, count() AS n FROM events WHERE user_id = {user:String} GROUP BY id',
              { user: o.user },
              z.object({ id: z.string(), n: z.coerce.number() }),
            )
            expect(rows.every((r) => r.n === 1)).toBe(true)
            expect(rows.map((r) => r.id).sort()).toEqual([...acked.get(o.user)!].sort())
          }
        },
      ),
      { numRuns: 4 },
    )
  })
})
