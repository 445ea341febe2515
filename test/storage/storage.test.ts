import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { ClickHouseClient } from '@clickhouse/client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprint } from '../../src/hot-state/dedup.ts'
import { DEFAULT_POLICY } from '../../src/hot-state/meters.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { allConfigs, configRow } from '../../src/storage/configs.ts'
import { costsByDimension, dimensionKeys } from '../../src/storage/costs.ts'
import {
  agentTotals,
  costByModel,
  hourlyCost,
  scanWindow,
  seenEvents,
  windowMinutes,
} from '../../src/storage/events.ts'
import { migrate, readMigrations } from '../../src/storage/migrations.ts'
import { insert, insertJsonLines } from '../../src/storage/query.ts'
import { startClickHouseServer } from '../helpers/clickhouse-server.ts'
import { dockerAvailable } from '../helpers/docker.ts'
import { eventRow } from '../helpers/rows.ts'

/**
 * The same storage cases run against the in-process engine (always) and against a real
 * ClickHouse server in a container (where Docker is available), so the SQL is proven on both.
 */
const T = Date.UTC(2026, 5, 1, 10, 20, 0)

const row = eventRow

function storageSuite(open: () => Promise<{ client: ClickHouseClient; close: () => Promise<void> }>) {
  let client: ClickHouseClient
  let close: () => Promise<void>
  beforeAll(async () => {
    ;({ client, close } = await open())
  }, 180_000)
  afterAll(() => close?.())

  it('applies every migration once and records it', async () => {
    const all = (await readMigrations()).map((m) => m.name)
    expect(all[0]).toBe('0001_events')
    expect(await migrate(client)).toEqual(all)
    expect(await migrate(client)).toEqual([])
    const rs = await client.query({ query: 'SELECT name FROM schema_migrations ORDER BY version', format: 'JSONEachRow' })
    expect((await rs.json<{ name: string }>()).map((r) => r.name)).toEqual(all)
  })

  it('sums per agent and model, fills the hourly view, and counts a twice-stored event id once for rebuilds', async () => {
    const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`
    await insert(client, 'events', [
      row({ event_id: id(1), at: T }),
      row({ event_id: id(2), at: T + 1, model: 'gpt-4o-mini', cost_nano: 7 }),
      row({ event_id: id(3), at: T + 2, event_type: 'tool_call', model: '', tool_name: 'x', cost_nano: 0 }),
      row({ event_id: id(4), at: T + 3_600_000, cost_nano: 1000 }),
      row({ event_id: id(1), at: T + 5, user_id: 'u' }), // the same id stored again
      row({ event_id: id(1), at: T, user_id: 'v', cost_nano: 5 }), // another user's event
    ])
    expect(await agentTotals(client, 'u', T)).toEqual([{ agent_id: 'a', cost_nano: 100 + 7 + 1000 + 100, llm_calls: 4 }])
    expect(await costByModel(client, 'u', 'a', T)).toEqual([
      { model: 'gpt-4o', cost_nano: 1200, llm_calls: 3, input_tokens: 30, output_tokens: 15 },
      { model: 'gpt-4o-mini', cost_nano: 7, llm_calls: 1, input_tokens: 10, output_tokens: 5 },
    ])
    const hours = await hourlyCost(client, 'u', 'a', T - 3_600_000)
    expect(hours.map((h) => [new Date(h.hour_ms).toISOString(), h.cost_nano, h.llm_calls])).toEqual([
      ['2026-06-01T10:00:00.000Z', 207, 3],
      ['2026-06-01T11:00:00.000Z', 1000, 1],
    ])
    const ua = [{ userId: 'u', agentId: 'a' }]
    const minutes = (await windowMinutes(client, T, ua)).filter((m) => m.user_id === 'u')
    expect(minutes.reduce((s, m) => s + m.cost_nano, 0)).toBe(1107)
    expect(minutes.reduce((s, m) => s + m.llm_calls, 0)).toBe(3)
    const seen = (await seenEvents(client, T, ua)).filter((s) => s.user_id === 'u').map((s) => s.event_id).sort()
    expect(seen).toEqual([id(1), id(2), id(3), id(4)])
  })

  it("scans the window agent by agent, oldest first, with each id's fingerprint as the hot state computes it", async () => {
    const id = (n: number) => `00000000-0000-4000-c000-${String(n).padStart(12, '0')}`
    const at = T + 86_400_000 * 30 // a window of its own, past the other tests' rows
    const rows = [
      row({ event_id: id(1), at: at + 3, user_id: 'scan', agent_id: 'b', cost_nano: 3 }),
      row({ event_id: id(2), at: at + 1, user_id: 'scan', agent_id: 'b', event_type: 'tool_call', model: '', tool_name: 't', cost_nano: 0 }),
      row({ event_id: id(3), at: at + 120_000, user_id: 'scan', agent_id: 'a', cost_nano: 5 }),
      row({ event_id: id(1), at: at + 9, user_id: 'scan', agent_id: 'b', cost_nano: 3 }), // stored twice: both come back
      row({ event_id: id(4), at, user_id: 'scan', agent_id: 'c', cost_nano: 2 ** 40 }),
      row({ event_id: id(5), at, user_id: 'scan2', agent_id: 'a', cost_nano: 7 }),
      row({ event_id: id(6), at: at - 1, user_id: 'scan', agent_id: 'a', cost_nano: 1 }), // before the window
    ]
    await insert(client, 'events', rows)
    // Reads of one row (agent b, of three, read in time slices, its run going on from one to
    // the next), of two, and all agents in one read give the same runs.
    for (const scanRows of [1, 2, 1_000_000]) {
      const runs: Array<{ user: string; agent: string; events: Array<[string, number, number, number]> }> = []
      const scanned = await scanWindow(
        client,
        at,
        (ref) => {
          const run = { user: ref.userId, agent: ref.agentId, events: [] as Array<[string, number, number, number]> }
          runs.push(run)
          return (fp, cost, minute, llm) => run.events.push([fp.join(','), cost, minute, llm])
        },
        scanRows,
      )
      const fp = (user: string, agent: string, n: number) => fingerprint(user, agent, id(n)).join(',')
      const m = (ms: number) => Math.floor(ms / 60_000)
      expect(runs).toEqual([
        { user: 'scan', agent: 'a', events: [[fp('scan', 'a', 3), 5, m(at + 120_000), 1]] },
        {
          user: 'scan',
          agent: 'b',
          events: [
            [fp('scan', 'b', 2), 0, m(at), 0],
            [fp('scan', 'b', 1), 3, m(at), 1],
            [fp('scan', 'b', 1), 3, m(at), 1],
          ],
        },
        { user: 'scan', agent: 'c', events: [[fp('scan', 'c', 4), 2 ** 40, m(at), 1]] },
        { user: 'scan2', agent: 'a', events: [[fp('scan2', 'a', 5), 7, m(at), 1]] },
      ])
      // Agents a, c and scan2's a are read whole; b, of three events, in ceil(3 / scanRows)
      // slices cut at its timestamps' quantiles.
      expect(scanned).toEqual({ events: 6, reads: { 1: 6, 2: 5, 1_000_000: 2 }[scanRows] })
    }
  })

  it('stores a batch delivered twice with its token once, in events and in the hourly view', async () => {
    const id = (n: number) => `00000000-0000-4000-a000-${String(n).padStart(12, '0')}`
    const batch = [row({ event_id: id(1), at: T, agent_id: 'twice', metadata: '{"customer":"acme"}' }), row({ event_id: id(2), at: T + 1, agent_id: 'twice' })]
    await insert(client, 'events', batch, 'journal:7:1-2')
    await insert(client, 'events', batch, 'journal:7:1-2') // the crash between INSERT and acknowledgement
    // Another batch whose rows differ but whose hourly sums are the same as the first's.
    await insert(client, 'events', [row({ event_id: id(3), at: T + 2, agent_id: 'twice' }), row({ event_id: id(4), at: T + 3, agent_id: 'twice' })], 'journal:7:3-4')
    expect(await agentTotals(client, 'u', T, 'twice')).toEqual([{ agent_id: 'twice', cost_nano: 400, llm_calls: 4 }])
    const hours = await hourlyCost(client, 'u', 'twice', T - 3_600_000)
    expect(hours.map((h) => [h.cost_nano, h.llm_calls])).toEqual([[400, 4]])
    // And in the hourly cost of each metadata value (GET /costs).
    const byCustomer = await costsByDimension(client, 'u', {
      groupBy: [{ kind: 'metadata', key: 'customer' }],
      fromMs: Math.floor(T / 3_600_000) * 3_600_000,
      toMs: Math.floor(T / 3_600_000) * 3_600_000 + 3_600_000,
      agentIds: ['twice'],
      models: [],
      metadata: [],
      limit: 10,
      cursor: undefined,
      format: 'json',
    })
    expect(byCustomer.groups.map((g) => [g.values, g.costNano, g.events])).toEqual([
      [[null], '300', 3],
      [['acme'], '100', 1],
    ])
    // And in the keys of each hour (GET /costs/dimensions).
    const hour = Math.floor(T / 3_600_000) * 3_600_000
    expect(await dimensionKeys(client, 'u', { fromMs: hour, toMs: hour + 3_600_000, limit: 10 })).toEqual([{ key: 'customer', events: 1 }])
  })

  it('stores the records of a batch the shipper sends again once, and their audit records once', async () => {
    const user = 'records-twice'
    const at = '2026-06-01 10:20:00.000'
    const rows: Record<string, object> = {
      pause_transitions: { user_id: user, agent_id: 'a', at, version: 1, is_paused: true, reason: 'budget', override: false, total_nano: 5, actor: 'system' },
      budget_alerts: { user_id: user, agent_id: 'a', at, version: 2, level: 0.8, total_nano: 4, threshold_nano: 5 },
      ignored_pauses: { user_id: user, agent_id: 'a', at, version: 3, paused_at_ms: 1, calls: 1, cost_nano: 1 },
      run_stops: { user_id: user, agent_id: 'a', run_id: 'r', at, version: 4, spent_nano: 6, held_nano: 0, budget_nano: 5 },
    }
    for (let attempt = 0; attempt < 2; attempt++) {
      // As the shipper sends a batch again after a crash between its INSERT and its commit.
      for (const [table, r] of Object.entries(rows)) await insertJsonLines(client, table, Buffer.from(JSON.stringify(r) + '\n'), `journal:records:${table}`)
    }
    for (const table of Object.keys(rows)) {
      const rs = await client.query({ query: `SELECT count() AS n FROM ${table} WHERE user_id = {u:String}`, query_params: { u: user }, format: 'JSONEachRow' })
      expect((await rs.json<{ n: string }>())[0]!.n, table).toBe('1')
    }
    const audit = await client.query({ query: 'SELECT action FROM audit_log WHERE user_id = {u:String} ORDER BY action', query_params: { u: user }, format: 'JSONEachRow' })
    expect((await audit.json<{ action: string }>()).map((r) => r.action)).toEqual(['alert', 'ignoring_pause', 'pause', 'run_paused'])
  })

  it('inserts rows kept as JSON lines as they are, once per token', async () => {
    const id = (n: number) => `00000000-0000-4000-b000-${String(n).padStart(12, '0')}`
    const lines = [row({ event_id: id(1), at: T, agent_id: 'lines', metadata: '{"q":"a\\nb"}' }), row({ event_id: id(2), at: T + 1, agent_id: 'lines' })].map((r) => JSON.stringify(r))
    const body = Buffer.from(lines.join('\n'))
    await insertJsonLines(client, 'events', body, 'journal:lines:0-2')
    await insertJsonLines(client, 'events', body, 'journal:lines:0-2')
    expect(await agentTotals(client, 'u', T, 'lines')).toEqual([{ agent_id: 'lines', cost_nano: 200, llm_calls: 2 }])
  })

  it('reads the newest config, even for two writes in one millisecond', async () => {
    const ref = { userId: 'u', agentId: 'cfg' }
    await insert(client, 'agent_configs', [configRow(ref, { ...DEFAULT_POLICY, thresholdNano: 1, webhookUrl: 'https://hooks.example.com/x' }, T, 'system')])
    await insert(client, 'agent_configs', [configRow(ref, { ...DEFAULT_POLICY, thresholdNano: 2 }, T, 'system')])
    const configs = await allConfigs(client, [ref])
    expect(configs).toHaveLength(1)
    expect(configs[0]).toMatchObject({ threshold_nano: 2, slack_webhook_url: null })
    expect(await allConfigs(client, [{ userId: 'v', agentId: 'cfg' }])).toEqual([])
  })
}

describe('storage on the in-process engine (chDB)', () => {
  storageSuite(async () => {
    const client = createClickHouse({
      clickhouse: { kind: 'embedded', path: join(mkdtempSync(join(tmpdir(), 'burnrate-storage-')), 'clickhouse') },
      clickhouseDatabase: 'default',
    })
    return { client, close: () => client.close() }
  })
})

describe('storage over the ClickHouse HTTP interface (@clickhouse/client without chDB)', () => {
  storageSuite(async () => {
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
})

const docker = await dockerAvailable()
if (!docker) console.warn('[storage] no Docker engine here: the ClickHouse-server variant of the storage tests is skipped')

describe.skipIf(!docker)('storage on a ClickHouse server (testcontainers)', () => {
  storageSuite(async () => {
    const { ClickHouseContainer } = await import('@testcontainers/clickhouse')
    const container = await new ClickHouseContainer('clickhouse/clickhouse-server:25.8-alpine').start()
    const client = createClickHouse({
      clickhouse: { kind: 'server', url: container.getHttpUrl(), username: container.getUsername(), password: container.getPassword() },
      clickhouseDatabase: container.getDatabase(),
    })
    return {
      client,
      close: async () => {
        await client.close()
        await container.stop()
      },
    }
  })
})
