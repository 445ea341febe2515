import { cpSync, mkdtempSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { ClickHouseClient } from '@clickhouse/client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { runEvents } from '../../src/storage/events.ts'
import { migrate, readMigrations } from '../../src/storage/migrations.ts'
import { insert, insertJsonLines } from '../../src/storage/query.ts'
import type { EventRow } from '../../src/storage/rows.ts'
import { agentRuns, runParts, type RunPart } from '../../src/storage/runs.ts'
import { startClickHouseServer } from '../helpers/clickhouse-server.ts'
import { eventRow } from '../helpers/rows.ts'

/**
 * The runs view (sql/0020) and its reads, on the in-process engine and over the ClickHouse
 * HTTP interface: rows of several INSERTs fold into one run, a batch delivered twice with its
 * token reaches the view once, pages follow the listing's order, and the migration folds the
 * events stored before it once, however often it runs.
 */
const T = Date.UTC(2026, 5, 1, 10, 0, 0)
const SQL_DIR = fileURLToPath(new URL('../../sql/', import.meta.url))

let n = 0
const id = () => `00000000-0000-4000-8000-${String(++n).padStart(12, '0')}`
const ev = (o: Partial<EventRow> & { at: number }) => eventRow({ event_id: id(), ...o })
const start = (o: Partial<EventRow> & { at: number }) => ev({ event_type: 'agent_start', model: '', input_tokens: 0, output_tokens: 0, cost_nano: 0, ...o })
const end = (o: Partial<EventRow> & { at: number }) => ev({ event_type: 'agent_end', model: '', input_tokens: 0, output_tokens: 0, cost_nano: 0, ...o })

/** A part's figures without its names. */
const figures = (p: RunPart) => {
  const { agent_id: _a, run_id: _r, ...rest } = p
  return rest
}

function runsSuite(open: () => Promise<{ client: ClickHouseClient; close: () => Promise<void> }>) {
  let client: ClickHouseClient
  let close: () => Promise<void>
  beforeAll(async () => {
    ;({ client, close } = await open())
    await migrate(client)
  }, 180_000)
  afterAll(() => close?.())

  it("folds a run's rows of several INSERTs into one per agent: first and last event, start, end, sums and cost by model", async () => {
    const u = 'fold'
    await insert(client, 'events', [start({ user_id: u, run_id: 'r', at: T }), ev({ user_id: u, run_id: 'r', at: T + 1000, cost_nano: 100 })])
    await insert(client, 'events', [
      ev({ user_id: u, run_id: 'r', at: T + 2000, model: 'gpt-4o-mini', cost_nano: 7, input_tokens: 3, output_tokens: 4 }),
      ev({ user_id: u, run_id: 'r', at: T + 3000, event_type: 'tool_call', model: '', tool_name: 'x', cost_nano: 0, input_tokens: 0, output_tokens: 0 }),
      ev({ user_id: u, run_id: 'r', agent_id: 'b', at: T + 3500, cost_nano: 50 }),
      ev({ user_id: u, at: T + 3600 }), // no run
    ])
    await insert(client, 'events', [ev({ user_id: u, run_id: 'r', at: T + 4000, cost_nano: 100 }), end({ user_id: u, run_id: 'r', at: T + 5000 })])
    const a = {
      first_us: T * 1000,
      last_us: (T + 5000) * 1000,
      start_us: T * 1000,
      end_us: (T + 5000) * 1000,
      cost_nano: 207,
      events: 6,
      llm_calls: 3,
      tool_calls: 1,
      byModel: [
        { model: 'gpt-4o', cost_nano: 200, llm_calls: 2, input_tokens: 20, output_tokens: 10 },
        { model: 'gpt-4o-mini', cost_nano: 7, llm_calls: 1, input_tokens: 3, output_tokens: 4 },
      ],
    }
    const b = { first_us: (T + 3500) * 1000, last_us: (T + 3500) * 1000, start_us: null, end_us: null, cost_nano: 50, events: 1, llm_calls: 1, tool_calls: 0, byModel: [{ model: 'gpt-4o', cost_nano: 50, llm_calls: 1, input_tokens: 10, output_tokens: 5 }] }
    expect(await agentRuns(client, { userId: u, agentId: 'a', limit: 10 })).toEqual([{ agent_id: 'a', run_id: 'r', ...a }])
    expect(await runParts(client, u, 'r')).toEqual([
      { agent_id: 'a', run_id: 'r', ...a },
      { agent_id: 'b', run_id: 'r', ...b },
    ])
    expect(await runParts(client, 'another-user', 'r')).toEqual([])
    // The run's events: of its agents, within its span, its own only.
    const events = await runEvents(client, { userId: u, runId: 'r', agentIds: ['a', 'b'], fromUs: T * 1000, untilUs: (T + 5000) * 1000, before: undefined, limit: 100 })
    expect(events.map((e) => [e.agent_id, e.event_type, e.timestamp])).toEqual([
      ['a', 'agent_end', new Date(T + 5000).toISOString().replace('Z', '000Z')],
      ['a', 'llm_call', new Date(T + 4000).toISOString().replace('Z', '000Z')],
      ['b', 'llm_call', new Date(T + 3500).toISOString().replace('Z', '000Z')],
      ['a', 'tool_call', new Date(T + 3000).toISOString().replace('Z', '000Z')],
      ['a', 'llm_call', new Date(T + 2000).toISOString().replace('Z', '000Z')],
      ['a', 'llm_call', new Date(T + 1000).toISOString().replace('Z', '000Z')],
      ['a', 'agent_start', new Date(T).toISOString().replace('Z', '000Z')],
    ])
  })

  it('stores a batch delivered twice with its token once in the runs view, and two batches that fold alike both', async () => {
    const u = 'twice'
    const batch = [start({ user_id: u, run_id: 'r', at: T }), ev({ user_id: u, run_id: 'r', at: T + 1 })]
    await insert(client, 'events', batch, 'journal:runs:1-2')
    await insert(client, 'events', batch, 'journal:runs:1-2') // a crash between the INSERT and its acknowledgement
    const lines = Buffer.from([ev({ user_id: u, run_id: 'r', at: T + 2 }), ev({ user_id: u, run_id: 'r', at: T + 3 })].map((r) => JSON.stringify(r)).join('\n'))
    await insertJsonLines(client, 'events', lines, 'journal:runs:3-4')
    await insertJsonLines(client, 'events', lines, 'journal:runs:3-4')
    // Rows that differ, in a batch of its own, whose run row is the same as the one before's.
    await insert(client, 'events', [ev({ user_id: u, run_id: 'r', at: T + 2 }), ev({ user_id: u, run_id: 'r', at: T + 3 })], 'journal:runs:5-6')
    const [part] = await runParts(client, u, 'r')
    expect(part).toMatchObject({ events: 6, llm_calls: 5, cost_nano: 500 })
  })

  it("lists an agent's runs by start (an agent_start's, else the first event's), then by id, newest first, in pages after a position", async () => {
    const u = 'order'
    await insert(client, 'events', [
      ev({ user_id: u, run_id: 'late-start', at: T }), // its first event comes before the start it is ordered by
      start({ user_id: u, run_id: 'late-start', at: T + 5000 }),
      ev({ user_id: u, run_id: 'b', at: T + 1000 }),
      ev({ user_id: u, run_id: 'c', at: T + 1000 }), // the same start as b: by id
      start({ user_id: u, run_id: 'a', at: T + 1000 }),
      ev({ user_id: u, run_id: 'old', at: T - 1000 }),
      ev({ user_id: u, agent_id: 'other', run_id: 'z', at: T + 9000 }),
    ])
    const all = await agentRuns(client, { userId: u, agentId: 'a', limit: 10 })
    expect(all.map((r) => r.run_id)).toEqual(['late-start', 'c', 'b', 'a', 'old'])
    const pages: string[][] = []
    let after: { startedUs: number; runId: string } | undefined
    for (;;) {
      const page = await agentRuns(client, { userId: u, agentId: 'a', limit: 2, after })
      if (page.length === 0) break
      pages.push(page.map((r) => r.run_id))
      const last = page.at(-1)!
      after = { startedUs: last.start_us ?? last.first_us, runId: last.run_id }
    }
    expect(pages).toEqual([['late-start', 'c'], ['b', 'a'], ['old']])
    expect(all.map(figures)[0]).toMatchObject({ first_us: T * 1000, start_us: (T + 5000) * 1000 })
  })
}

describe('runs on the in-process engine (chDB)', () => {
  runsSuite(async () => {
    const client = createClickHouse({ clickhouse: { kind: 'embedded', path: join(mkdtempSync(join(tmpdir(), 'burnrate-runs-')), 'clickhouse') }, clickhouseDatabase: 'default' })
    return { client, close: () => client.close() }
  })
})

describe('runs over the ClickHouse HTTP interface (@clickhouse/client without chDB)', () => {
  runsSuite(async () => {
    const server = await startClickHouseServer()
    const client = createClickHouse({ clickhouse: { kind: 'server', url: server.url }, clickhouseDatabase: 'default' })
    return {
      client,
      close: async () => {
        await client.close()
        await server.stop()
      },
    }
  })

  it('folds the events stored with a run_id before the migration into runs once, however often its backfill runs', async () => {
    const server = await startClickHouseServer()
    const client = createClickHouse({ clickhouse: { kind: 'server', url: server.url }, clickhouseDatabase: 'default' })
    try {
      // The schema as it was before the runs view.
      const before = mkdtempSync(join(tmpdir(), 'burnrate-sql-'))
      for (const f of readdirSync(SQL_DIR).filter((f) => /^\d{4}_/.test(f) && Number(f.slice(0, 4)) < 20)) cpSync(join(SQL_DIR, f), join(before, f))
      await migrate(client, before)
      await insert(client, 'events', [
        start({ user_id: 'old', run_id: 'r', at: T }),
        ev({ user_id: 'old', run_id: 'r', at: T + 1000 }),
        ev({ user_id: 'old', run_id: 'r', agent_id: 'b', at: T + 1500 }),
        ev({ user_id: 'old', at: T + 2000 }), // no run
      ])
      expect(await migrate(client)).toContain('0020_runs')
      const folded = { events: 2, llm_calls: 1, cost_nano: 100, start_us: T * 1000, last_us: (T + 1000) * 1000 }
      expect(await runParts(client, 'old', 'r')).toEqual([expect.objectContaining({ agent_id: 'a', ...folded }), expect.objectContaining({ agent_id: 'b', events: 1 })])
      // A crash between the backfill and the migration's record runs it again: nothing twice.
      const backfill = (await readMigrations()).find((m) => m.name === '0020_runs')!.statements.at(-1)!
      expect(backfill).toMatch(/^INSERT INTO runs/)
      await client.command({ query: backfill })
      // Events after the migration reach the run through the view, once.
      await insert(client, 'events', [end({ user_id: 'old', run_id: 'r', at: T + 3000 })])
      await client.command({ query: backfill })
      expect(await runParts(client, 'old', 'r')).toEqual([
        expect.objectContaining({ agent_id: 'a', ...folded, events: 3, end_us: (T + 3000) * 1000, last_us: (T + 3000) * 1000 }),
        expect.objectContaining({ agent_id: 'b', events: 1 }),
      ])
    } finally {
      await client.close()
      await server.stop()
    }
  }, 60_000)
})
