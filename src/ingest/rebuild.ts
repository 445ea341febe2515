import type { ClickHouseClient } from '@clickhouse/client'
import type { HotState, RestoreData, Transition } from '../hot-state/types.ts'
import { allConfigs } from '../storage/configs.ts'
import { seenEvents, windowMinutes } from '../storage/events.ts'
import { latestTransitions } from '../storage/transitions.ts'
import { windowStartMs } from '../window.ts'

/**
 * Rebuilds the hot state from ClickHouse, the source of truth: the window's per-minute
 * totals (each event id once), the dedup set, every config and the latest pause state.
 * It replaces the hot state rather than adding to it, so it never counts twice.
 * Returns the transitions the rebuild decided, for the caller to persist and notify.
 */
export async function rebuildHotState(clickhouse: ClickHouseClient, hotState: HotState, now: number): Promise<Transition[]> {
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
    policies: configs.map((c) => ({
      userId: c.user_id,
      agentId: c.agent_id,
      policy: { thresholdNano: c.threshold_nano, autoResume: c.auto_resume, webhookUrl: c.slack_webhook_url },
    })),
    pauses: pauses.map((p) => ({
      userId: p.user_id,
      agentId: p.agent_id,
      pause: { paused: p.is_paused, reason: p.is_paused ? (p.reason === 'manual' ? 'manual' : 'budget') : null, override: p.override },
    })),
  }
  return hotState.restore(data, now)
}
