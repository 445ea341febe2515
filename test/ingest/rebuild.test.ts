import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { ClickHouseClient } from '@clickhouse/client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MemoryHotState } from '../../src/hot-state/memory.ts'
import { fleetOf } from '../../src/hot-state/agent-ref.ts'
import { DEFAULT_POLICY } from '../../src/hot-state/meters.ts'
import { rebuildHotState } from '../../src/ingest/rebuild.ts'
import { SegmentLog } from '../../src/journal/segment-log.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { configRow } from '../../src/storage/configs.ts'
import { migrate } from '../../src/storage/migrations.ts'
import { ignoredRow } from '../../src/storage/ignored.ts'
import { insert } from '../../src/storage/query.ts'
import { transitionRow } from '../../src/storage/transitions.ts'
import { eventRow } from '../helpers/rows.ts'

// The embedded hot state is rebuilt from ClickHouse plus the journal rows not yet
// shipped, each event counted once and each agent's config and pause state the newest by version.
const NOW = Date.UTC(2026, 5, 1, 12, 0, 0)
let clickhouse: ClickHouseClient
beforeAll(async () => {
  clickhouse = createClickHouse({ clickhouse: { kind: 'embedded', path: join(mkdtempSync(join(tmpdir(), 'burnrate-rebuild-')), 'ch') }, clickhouseDatabase: 'default' })
  await migrate(clickhouse)
})
afterAll(() => clickhouse?.close())

const policy = (usd: number) => ({ ...DEFAULT_POLICY, thresholdNano: usd * 1e9 })
const transition = (agentId: string, paused: boolean, at: number) =>
  transitionRow({ userId: 'u', agentId, at, version: 0, actor: 'key-1', paused, reason: 'manual', override: false, totalNano: 0, thresholdNano: 0, webhookUrl: null })

describe('rebuilding the in-process hot state', () => {
  it('counts an event found in both once, and takes the newest config and pause state wherever it is', async () => {
    const journal = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-rebuild-j-')), fsync: false, maxRows: 1000 })
    const shipped = eventRow({ user_id: 'u', agent_id: 'a', event_id: '00000000-0000-4000-d000-000000000001', at: NOW - 60_000, cost_nano: 5 })
    const unshipped = eventRow({ user_id: 'u', agent_id: 'a', event_id: '00000000-0000-4000-d000-000000000002', at: NOW - 30_000, cost_nano: 7 })
    await insert(clickhouse, 'events', [shipped])
    // ClickHouse has an older config of "a" and a newer one of "b" than the journal.
    await insert(clickhouse, 'agent_configs', [configRow({ userId: 'u', agentId: 'a' }, policy(1), NOW - 5000, 'system')])
    const staleB = configRow({ userId: 'u', agentId: 'b' }, policy(2), NOW - 4000, 'system')
    const newerA = configRow({ userId: 'u', agentId: 'a' }, policy(3), NOW - 3000, 'system')
    await insert(clickhouse, 'agent_configs', [configRow({ userId: 'u', agentId: 'b' }, policy(4), NOW - 2000, 'system')])
    const paused = { ...transition('a', true, NOW - 1000), version: newerA.version + 1 }
    await journal.append(
      [
        { table: 'events', row: shipped }, // shipped, its commit lost to a crash
        { table: 'events', row: unshipped },
        { table: 'agent_configs', row: staleB },
        { table: 'agent_configs', row: newerA },
        { table: 'pause_transitions', row: paused },
      ],
      NOW,
    )
    const hs = new MemoryHotState(journal)
    await rebuildHotState(clickhouse, hs, NOW, journal.unshipped())
    const a = (await hs.get({ userId: 'u', agentId: 'a' }, NOW)).snapshot
    expect(a).toMatchObject({ totalNano: 12, llmCalls: 2, policy: { thresholdNano: 3e9 }, pause: { paused: true, reason: 'manual' } })
    expect((await hs.get({ userId: 'u', agentId: 'b' }, NOW)).snapshot.policy.thresholdNano).toBe(4e9)
    await journal.close()
  })

  it('sums every agent of a user into its fleet, with the fleet\'s config and pause state, and acts on a crossing stored before a crash', async () => {
    const journal = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-rebuild-j-')), fsync: false, maxRows: 1000 })
    const row = (agent_id: string, n: number, cost_nano: number) =>
      eventRow({ user_id: 'fleet-u', agent_id, event_id: `00000000-0000-4000-f000-00000000000${n}`, at: NOW - 60_000, cost_nano })
    await insert(clickhouse, 'events', [row('a', 1, 5e8), row('b', 2, 4e8)])
    await insert(clickhouse, 'agent_configs', [configRow(fleetOf('fleet-u'), policy(1), NOW - 5000, 'key-1')])
    await insert(clickhouse, 'agent_configs', [configRow(fleetOf('paused-u'), policy(1), NOW - 5000, 'key-1')])
    // The fleet's events, a and b shipped and c in the journal, cross its budget together
    // without a transition stored (a budget lowered by a config, or a crash of an earlier
    // release); another user's fleet was paused by hand.
    await journal.append([{ table: 'events', row: row('c', 3, 2e8) }, { table: 'pause_transitions', row: { ...transition('', true, NOW - 1000), user_id: 'paused-u' } }], NOW)
    const hs = new MemoryHotState(journal)
    const transitions = await rebuildHotState(clickhouse, hs, NOW, journal.unshipped())
    expect(transitions.map((t) => [t.userId, t.agentId, t.reason])).toEqual([['fleet-u', '', 'budget']])
    expect((await hs.get(fleetOf('fleet-u'), NOW)).snapshot).toMatchObject({ totalNano: 11e8, llmCalls: 3, configured: true, pause: { paused: true, reason: 'budget' } })
    expect((await hs.get(fleetOf('paused-u'), NOW)).snapshot.pause).toEqual({ paused: true, reason: 'manual', override: false, since: NOW - 1000 })
    expect((await hs.listAgents('fleet-u', NOW)).map((a) => a.agentId).sort()).toEqual(['a', 'b', 'c'])
    await journal.close()
  })

  it('keeps an ignoring-pause flag raised for the pause that still holds: a restart raises it no second time', async () => {
    const journal = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-rebuild-j-')), fsync: false, maxRows: 1000 })
    const ref = { userId: 'deaf-u', agentId: 'deaf' }
    const pausedAt = NOW - 120_000
    await insert(clickhouse, 'pause_transitions', [{ ...transition('deaf', true, pausedAt), user_id: 'deaf-u', version: 1 }])
    await insert(clickhouse, 'ignored_pauses', [ignoredRow({ ...ref, at: NOW - 30_000, pausedSince: pausedAt, calls: 3, costNano: 7, version: 2, webhookUrl: null })])
    const hs = new MemoryHotState(journal)
    await rebuildHotState(clickhouse, hs, NOW, journal.unshipped())
    expect((await hs.get(ref, NOW)).snapshot.ignored).toEqual({ since: pausedAt, calls: 3, nano: 7, flagged: true })
    const e = { ...ref, eventId: 'late', costNano: 5, llmCall: true, at: NOW }
    const step = await hs.record({ ...e, row: eventRow({ user_id: 'deaf-u', agent_id: 'deaf', event_id: '00000000-0000-4000-e000-000000000001', at: NOW, cost_nano: 5 }) }, NOW)
    expect(step).toMatchObject({ paused: true, ignored: null })
    expect((await hs.get(ref, NOW)).snapshot.ignored).toEqual({ since: pausedAt, calls: 4, nano: 12, flagged: true })
    await journal.close()
  })

  it('takes the alert levels the totals are at as fired: a restart sends no alert again', async () => {
    const journal = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-rebuild-j-')), fsync: false, maxRows: 1000 })
    const ref = { userId: 'alerts', agentId: 'a' }
    // 0.85 of a 1 USD budget with levels 0.5 and 0.9: 0.5 fired before the restart, 0.9 not yet.
    await insert(clickhouse, 'agent_configs', [configRow(ref, { ...policy(1), alertAt: [0.5, 0.9] }, NOW - 5000, 'system')])
    await insert(clickhouse, 'events', [eventRow({ user_id: 'alerts', agent_id: 'a', event_id: '00000000-0000-4000-d000-0000000000a1', at: NOW - 60_000, cost_nano: 0.85e9 })])
    const hs = new MemoryHotState(journal)
    await rebuildHotState(clickhouse, hs, NOW, journal.unshipped())
    const next = (id: string, costNano: number) => ({ ...ref, eventId: id, costNano, llmCall: true, at: NOW, row: eventRow({ user_id: 'alerts', agent_id: 'a', event_id: id, at: NOW, cost_nano: costNano }) })
    expect((await hs.record(next('00000000-0000-4000-d000-0000000000a2', 1), NOW)).alerts).toEqual([])
    expect((await hs.record(next('00000000-0000-4000-d000-0000000000a3', 0.05e9), NOW)).alerts.map((a) => a.level)).toEqual([0.9])
    await journal.close()
  })
})
