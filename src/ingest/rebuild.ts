import type { ClickHouseClient } from '@clickhouse/client'
import type { AgentLoad, AgentPolicy, AgentRef, HotState, PauseState, RestoreData, Transition } from '../hot-state/types.ts'
import { allConfigs, getConfig, type AgentConfigRow } from '../storage/configs.ts'
import { seenEvents, windowMinutes } from '../storage/events.ts'
import { latestTransitions, type LatestTransition } from '../storage/transitions.ts'
import type { JournalEntry } from '../journal/types.ts'
import { chDateTimeToMs } from '../storage/clickhouse.ts'
import { minuteOf, windowStartMs } from '../window.ts'

/**
 * Rebuilds the whole hot state from ClickHouse and the rows of the journal not yet shipped
 * there: the window's per-minute totals (each event id once, wherever it is found), the
 * dedup set, every config and the latest pause state (the newest version, wherever it is
 * found). It replaces the hot state rather than adding to it, so it never counts twice.
 * Returns the transitions the rebuild decided, for the caller to persist and notify.
 */
export async function rebuildHotState(
  clickhouse: ClickHouseClient,
  hotState: HotState,
  now: number,
  unshipped: AsyncIterable<JournalEntry> = (async function* () {})(),
): Promise<Transition[]> {
  const since = windowStartMs(now)
  const [minutes, seen, configs, pauses] = await Promise.all([
    windowMinutes(clickhouse, since),
    seenEvents(clickhouse, since),
    allConfigs(clickhouse),
    latestTransitions(clickhouse),
  ])
  const data: RestoreData = {
    minutes: minutes.map((m) => ({ userId: m.user_id, agentId: m.agent_id, minute: m.minute, costNano: m.cost_nano, llmCalls: m.llm_calls })),
    seen: seen.map((s) => ({ userId: s.user_id, agentId: s.agent_id, eventId: s.event_id, costNano: s.cost_nano, minute: s.minute })),
    policies: configs.map((c) => ({ userId: c.user_id, agentId: c.agent_id, policy: policyOf(c) })),
    pauses: [],
  }
  const seenIds = new Set(seen.map((s) => `${s.user_id}\0${s.agent_id}\0${s.event_id}`))
  const latest = new Map(pauses.map((p) => [`${p.user_id}\0${p.agent_id}`, { version: p.version, pause: pauseOf(p) }]))
  for await (const { table, row } of unshipped) {
    if (table === 'events') {
      const id = `${row.user_id}\0${row.agent_id}\0${row.event_id}`
      if (seenIds.has(id)) continue // shipped already, its commit not recorded: counted once
      seenIds.add(id)
      const minute = minuteOf(chDateTimeToMs(row.timestamp))
      const ref = { userId: row.user_id, agentId: row.agent_id }
      data.minutes.push({ ...ref, minute, costNano: row.cost_nano, llmCalls: row.event_type === 'llm_call' ? 1 : 0 })
      data.seen.push({ ...ref, eventId: row.event_id, costNano: row.cost_nano, minute })
    } else {
      const agent = `${row.user_id}\0${row.agent_id}`
      if (row.version > (latest.get(agent)?.version ?? -1)) {
        latest.set(agent, { version: row.version, pause: pauseOf({ is_paused: row.is_paused, reason: row.reason, override: row.override }) })
      }
    }
  }
  for (const [agent, { pause }] of latest) {
    const [userId, agentId] = agent.split('\0') as [string, string]
    data.pauses.push({ userId, agentId, pause })
  }
  return hotState.restore(data, now)
}

/** One agent's state from ClickHouse, for a hot state that lost it (loaded on demand). */
export function agentLoader(clickhouse: ClickHouseClient) {
  return async (ref: AgentRef, now: number): Promise<AgentLoad> => {
    const since = windowStartMs(now)
    const [minutes, seen, config, pauses] = await Promise.all([
      windowMinutes(clickhouse, since, ref),
      seenEvents(clickhouse, since, ref),
      getConfig(clickhouse, ref.userId, ref.agentId),
      latestTransitions(clickhouse, ref),
    ])
    return {
      minutes: minutes.map((m) => ({ minute: m.minute, costNano: m.cost_nano, llmCalls: m.llm_calls })),
      seen: seen.map((s) => ({ eventId: s.event_id, costNano: s.cost_nano, minute: s.minute })),
      policy: config ? policyOf(config) : null,
      pause: pauses[0] ? pauseOf(pauses[0]) : null,
    }
  }
}

function policyOf(c: AgentConfigRow): AgentPolicy {
  return { thresholdNano: c.threshold_nano, autoResume: c.auto_resume, webhookUrl: c.slack_webhook_url }
}

function pauseOf(p: Pick<LatestTransition, 'is_paused' | 'reason' | 'override'>): PauseState {
  return { paused: p.is_paused, reason: p.is_paused ? (p.reason === 'manual' ? 'manual' : 'budget') : null, override: p.override }
}
