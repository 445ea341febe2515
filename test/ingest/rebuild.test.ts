import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { ClickHouseClient } from '@clickhouse/client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MemoryHotState } from '../../src/hot-state/memory.ts'
import { rebuildHotState } from '../../src/ingest/rebuild.ts'
import { SegmentLog } from '../../src/journal/segment-log.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { configRow, upsertConfig } from '../../src/storage/configs.ts'
import { insertEvents } from '../../src/storage/events.ts'
import { migrate } from '../../src/storage/migrations.ts'
import { transitionRow } from '../../src/storage/transitions.ts'
import { eventRow } from '../helpers/rows.ts'

// Issue 8: the embedded hot state is rebuilt from ClickHouse plus the journal rows not yet
// shipped, each event counted once and each agent's config and pause state the newest by version.
const NOW = Date.UTC(2026, 5, 1, 12, 0, 0)
let clickhouse: ClickHouseClient
beforeAll(async () => {
  clickhouse = createClickHouse({ clickhouse: { kind: 'embedded', path: join(mkdtempSync(join(tmpdir(), 'burnrate-rebuild-')), 'ch') }, clickhouseDatabase: 'default' })
  await migrate(clickhouse)
})
afterAll(() => clickhouse?.close())

const policy = (usd: number) => ({ thresholdNano: usd * 1e9, webhookUrl: null, autoResume: false, alertAt: [0.8] })
const transition = (agentId: string, paused: boolean, at: number) =>
  transitionRow({ userId: 'u', agentId, at, version: 0, actor: 'key-1', paused, reason: 'manual', override: false, totalNano: 0, thresholdNano: 0, webhookUrl: null })

describe('rebuilding the in-process hot state', () => {
  it('counts an event found in both once, and takes the newest config and pause state wherever it is', async () => {
    const journal = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-rebuild-j-')), fsync: false, maxRows: 1000 })
    const shipped = eventRow({ user_id: 'u', agent_id: 'a', event_id: '00000000-0000-4000-d000-000000000001', at: NOW - 60_000, cost_nano: 5 })
    const unshipped = eventRow({ user_id: 'u', agent_id: 'a', event_id: '00000000-0000-4000-d000-000000000002', at: NOW - 30_000, cost_nano: 7 })
    await insertEvents(clickhouse, [shipped])
    // ClickHouse has an older config of "a" and a newer one of "b" than the journal.
    await upsertConfig(clickhouse, configRow({ userId: 'u', agentId: 'a' }, policy(1), NOW - 5000, 'system'))
    const staleB = configRow({ userId: 'u', agentId: 'b' }, policy(2), NOW - 4000, 'system')
    const newerA = configRow({ userId: 'u', agentId: 'a' }, policy(3), NOW - 3000, 'system')
    await upsertConfig(clickhouse, configRow({ userId: 'u', agentId: 'b' }, policy(4), NOW - 2000, 'system'))
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

  it('takes the alert levels the totals are at as fired: a restart sends no alert again (issue 12)', async () => {
    const journal = await SegmentLog.open({ dir: mkdtempSync(join(tmpdir(), 'burnrate-rebuild-j-')), fsync: false, maxRows: 1000 })
    const ref = { userId: 'alerts', agentId: 'a' }
    // 0.85 of a 1 USD budget with levels 0.5 and 0.9: 0.5 fired before the restart, 0.9 not yet.
    await upsertConfig(clickhouse, configRow(ref, { ...policy(1), alertAt: [0.5, 0.9] }, NOW - 5000, 'system'))
    await insertEvents(clickhouse, [eventRow({ user_id: 'alerts', agent_id: 'a', event_id: '00000000-0000-4000-d000-0000000000a1', at: NOW - 60_000, cost_nano: 0.85e9 })])
    const hs = new MemoryHotState(journal)
    await rebuildHotState(clickhouse, hs, NOW, journal.unshipped())
    const next = (id: string, costNano: number) => ({ ...ref, eventId: id, costNano, llmCall: true, at: NOW, row: eventRow({ user_id: 'alerts', agent_id: 'a', event_id: id, at: NOW, cost_nano: costNano }) })
    expect((await hs.record(next('00000000-0000-4000-d000-0000000000a2', 1), NOW)).alerts).toEqual([])
    expect((await hs.record(next('00000000-0000-4000-d000-0000000000a3', 0.05e9), NOW)).alerts.map((a) => a.level)).toEqual([0.9])
    await journal.close()
  })
})
