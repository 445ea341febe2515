import type { ClickHouseClient } from '@clickhouse/client'
import type { AgentLoad, AgentPolicy, AgentRef, HotState, PauseState, RestoreData, Transition } from '../hot-state/types.ts'
import { allConfigs, getConfig, type AgentConfigRow } from '../storage/configs.ts'
import { seenEvents, windowMinutes } from '../storage/events.ts'
import { latestTransitions, type LatestTransition } from '../storage/transitions.ts'
import { windowStartMs } from '../window.ts'

/**
 * Rebuilds the whole hot state from ClickHouse, the source of truth: the window's
 * per-minute totals (each event id once), the dedup set, every config and the latest pause
 * state. It replaces the hot state rather than adding to it, so it never counts twice.
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
    policies: configs.map((c) => ({ userId: c.user_id, agentId: c.agent_id, policy: policyOf(c) })),
    pauses: pauses.map((p) => ({ userId: p.user_id, agentId: p.agent_id, pause: pauseOf(p) })),
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

function pauseOf(p: LatestTransition): PauseState {
  return { paused: p.is_paused, reason: p.is_paused ? (p.reason === 'manual' ? 'manual' : 'budget') : null, override: p.override }
}
