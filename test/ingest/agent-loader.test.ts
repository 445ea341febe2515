import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { ClickHouseClient } from '@clickhouse/client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fleetOf } from '../../src/hot-state/agent-ref.ts'
import { DEFAULT_POLICY } from '../../src/hot-state/meters.ts'
import { agentLoader } from '../../src/ingest/rebuild.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { configRow } from '../../src/storage/configs.ts'
import { migrate } from '../../src/storage/migrations.ts'
import { insert } from '../../src/storage/query.ts'
import type { JournalEntry } from '../../src/journal/types.ts'
import { eventRow } from '../helpers/rows.ts'

// Agents missing from Redis are loaded in batches, one batch of reads for
// all that are missing at that moment, on the real engine.
const NOW = Date.UTC(2026, 5, 1, 12, 0, 0)
let clickhouse: ClickHouseClient
let n = 0
const id = () => `00000000-0000-4000-c000-${String(++n).padStart(12, '0')}`

beforeAll(async () => {
  clickhouse = createClickHouse({ clickhouse: { kind: 'embedded', path: join(mkdtempSync(join(tmpdir(), 'burnrate-loader-')), 'ch') }, clickhouseDatabase: 'default' })
  await migrate(clickhouse)
  // u1's agent "a" and u2's agent "b" have history; u1 has no "b" and u2 no "a".
  await insert(clickhouse, 'events', [
    eventRow({ user_id: 'u1', agent_id: 'a', event_id: id(), at: NOW - 60_000, cost_nano: 5 }),
    eventRow({ user_id: 'u1', agent_id: 'a', event_id: id(), at: NOW - 60_000, cost_nano: 7 }),
    eventRow({ user_id: 'u2', agent_id: 'b', event_id: id(), at: NOW - 120_000, cost_nano: 11 }),
    eventRow({ user_id: 'u2', agent_id: 'b', event_id: id(), at: NOW - 25 * 3_600_000, cost_nano: 1000 }), // out of the window
  ])
  await insert(clickhouse, 'agent_configs', [configRow({ userId: 'u2', agentId: 'b' }, { ...DEFAULT_POLICY, thresholdNano: 3, autoResume: true }, NOW, 'system')])
})
afterAll(() => clickhouse?.close())

describe('loading agents from ClickHouse', () => {
  it('loads the agents asked for in one turn in one batch, each with exactly its own state', async () => {
    const load = agentLoader(clickhouse)
    const fresh = Array.from({ length: 200 }, (_, i) => load({ userId: 'u3', agentId: `new-${i}` }, NOW))
    const [a, b, u1b, u2a] = await Promise.all([
      load({ userId: 'u1', agentId: 'a' }, NOW),
      load({ userId: 'u2', agentId: 'b' }, NOW),
      load({ userId: 'u1', agentId: 'b' }, NOW),
      load({ userId: 'u2', agentId: 'a' }, NOW),
    ])
    expect(load.stats).toEqual({ batches: 1, agents: 204 })
    expect(a!.minutes.reduce((s, m) => s + m.costNano, 0)).toBe(12)
    expect(a!.seen).toHaveLength(2)
    expect(a!.policy).toBeNull()
    expect(b).toMatchObject({ minutes: [{ costNano: 11, llmCalls: 1 }], policy: { thresholdNano: 3, autoResume: true } })
    expect(b!.seen).toHaveLength(1)
    // The other user's agent of the same name is not theirs.
    for (const none of [u1b, u2a, ...(await Promise.all(fresh))]) expect(none).toEqual({ minutes: [], seen: [], policy: null, policyVersion: 0, pause: null, ignored: null })
  })

  it('loads a fleet (the agent \'\' of its user) as the sums of all its agents\' minutes, with its own config, in the same batch', async () => {
    await insert(clickhouse, 'events', [
      eventRow({ user_id: 'f', agent_id: 'x', event_id: id(), at: NOW - 60_000, cost_nano: 5 }),
      eventRow({ user_id: 'f', agent_id: 'y', event_id: id(), at: NOW - 60_000, cost_nano: 7 }),
      eventRow({ user_id: 'f', agent_id: 'y', event_id: id(), at: NOW - 180_000, cost_nano: 2 }),
    ])
    await insert(clickhouse, 'agent_configs', [configRow(fleetOf('f'), { ...DEFAULT_POLICY, thresholdNano: 20, alertAt: [0.5] }, NOW, 'key-1')])
    const load = agentLoader(clickhouse)
    const [fleet, x, other] = await Promise.all([load(fleetOf('f'), NOW), load({ userId: 'f', agentId: 'x' }, NOW), load(fleetOf('u1'), NOW)])
    expect(load.stats.batches).toBe(1)
    const minute = Math.floor(NOW / 60_000)
    expect(fleet).toEqual({
      minutes: [
        { minute: minute - 3, costNano: 2, llmCalls: 1 },
        { minute: minute - 1, costNano: 12, llmCalls: 2 },
      ],
      seen: [],
      policy: { ...DEFAULT_POLICY, thresholdNano: 20, alertAt: [0.5] },
      policyVersion: expect.any(Number),
      pause: null,
      ignored: null,
    })
    expect(x!.minutes).toEqual([{ minute: minute - 1, costNano: 5, llmCalls: 1 }])
    expect(other!.minutes.reduce((s, m) => s + m.costNano, 0)).toBe(12) // u1's agent "a"
  })

  it('adds what the journal holds and ClickHouse does not, each event once, and the newer config and pause', async () => {
    const minute = Math.floor(NOW / 60_000)
    const shipped = eventRow({ user_id: 'j', agent_id: 'x', event_id: id(), at: NOW - 120_000, cost_nano: 3 })
    const alsoJournaled = eventRow({ user_id: 'j', agent_id: 'x', event_id: id(), at: NOW - 60_000, cost_nano: 5 })
    await insert(clickhouse, 'events', [shipped, alsoJournaled])
    await insert(clickhouse, 'agent_configs', [configRow({ userId: 'j', agentId: 'x' }, { ...DEFAULT_POLICY, thresholdNano: 40 }, NOW - 60_000, 'system')])
    // A stream of an instance that died: a batch shipped but not trimmed, and rows never shipped
    // (an earlier release's config row among them, without the columns added since).
    const unshipped = eventRow({ user_id: 'j', agent_id: 'x', event_id: id(), at: NOW - 30_000, cost_nano: 7 })
    const { period_budgets: _p, run_budget_nano: _r, ...oldConfig } = configRow({ userId: 'j', agentId: 'x' }, { ...DEFAULT_POLICY, thresholdNano: 50 }, NOW - 30_000, 'system')
    const pause = { user_id: 'j', agent_id: 'x', at: '2026-06-01 11:59:30.000', version: oldConfig.version + 1, is_paused: true, reason: 'manual', override: false, total_nano: 15, actor: 'k' }
    const rows = [
      { table: 'events', at: NOW - 60_000, row: alsoJournaled },
      { table: 'events', at: NOW - 30_000, row: unshipped },
      { table: 'events', at: NOW - 30_000, row: eventRow({ user_id: 'other', agent_id: 'x', event_id: id(), at: NOW - 30_000, cost_nano: 1000 }) },
      { table: 'agent_configs', at: NOW - 30_000, row: oldConfig },
      { table: 'pause_transitions', at: NOW - 30_000, row: pause },
    ] as JournalEntry[]
    const asked: string[][] = []
    const load = agentLoader(clickhouse, {
      journalRows: async function* (users) {
        asked.push([...users])
        yield* rows
      },
    })
    const [x, fleet] = await Promise.all([load({ userId: 'j', agentId: 'x' }, NOW), load(fleetOf('j'), NOW)])
    expect(asked).toEqual([['j']])
    expect(x!.minutes).toEqual([
      { minute: minute - 2, costNano: 3, llmCalls: 1 },
      { minute: minute - 1, costNano: 5, llmCalls: 1 },
      { minute: minute - 1, costNano: 7, llmCalls: 1 },
    ])
    expect(x!.seen.map((e) => e.eventId).sort()).toEqual([shipped.event_id, alsoJournaled.event_id, unshipped.event_id].sort())
    expect(x!.policy).toEqual({ ...DEFAULT_POLICY, thresholdNano: 50 })
    expect(x!.policyVersion).toBe(oldConfig.version)
    expect(x!.pause).toMatchObject({ paused: true, reason: 'manual' })
    expect(fleet!.minutes.reduce((s, m) => s + m.costNano, 0)).toBe(15)
  })

  it('gathers the agents asked for while a batch runs into the next one, within its concurrency', async () => {
    const load = agentLoader(clickhouse, { concurrency: 1 })
    const first = load({ userId: 'u1', agentId: 'a' }, NOW)
    await new Promise((r) => setImmediate(r)) // the first batch is under way
    const later = Array.from({ length: 30 }, (_, i) => load({ userId: 'u4', agentId: `later-${i}` }, NOW))
    await Promise.all([first, ...later])
    expect(load.stats).toEqual({ batches: 2, agents: 31 })
  })
})
