import { z } from 'zod'
import { PAUSE_REASONS } from '../hot-state/meters.ts'
import { AUDIT_SCOPES } from '../storage/audit.ts'
import { EVENT_TYPES } from './event.ts'

/**
 * What each route answers, for the OpenAPI document (src/openapi.ts). Strict objects:
 * test/openapi.test.ts checks real answers against them, so a field the service adds without
 * saying so here fails it.
 */

const usd = z.number()
const iso = z.iso.datetime({ offset: true })
const agentPausedReason = z.enum([...PAUSE_REASONS, ...PAUSE_REASONS.map((r) => `fleet_${r}` as const)]).nullable()
/** An answer about an event or a hold of a run: the run's stop by its run budget as well. */
const pausedReason = z.enum([...PAUSE_REASONS, ...PAUSE_REASONS.map((r) => `fleet_${r}` as const), 'run_budget']).nullable()
const pausedPeriod = z.string().nullable().describe('for a pause by a period budget (period_budget, fleet_period_budget): its period, e.g. "month", "window_30d"; else null')

/** A period of a period budget, as GET /agents/{id}, GET /fleet and the GET /agents rows show it. */
const period = z.strictObject({
  period: z.string().describe('"day", "week", "month" or "window_<n>d"'),
  spent_usd: usd,
  limit_usd: usd,
  remaining_usd: usd,
  starts_at: iso.describe("the period's first instant (a rolling window's first whole UTC hour)"),
  ends_at: iso.nullable().describe("a calendar period's end, the next one's start; null for a rolling window"),
  projected_exhaustion_at: iso.nullable().describe('when the limit is reached at the last hour’s rate, within the period; null: not before it ends'),
})
const periods = z.array(period)

/** A period budget, as a config shows it and POST /config takes it. */
const periodBudget = z.union([
  z.strictObject({ period: z.enum(['day', 'week', 'month']), limit_usd: usd, time_zone: z.string(), week_starts: z.enum(['monday', 'sunday']), month_starts_on: z.number().int() }),
  z.strictObject({ period: z.string(), window_days: z.number().int(), limit_usd: usd }),
])

export const okReply = z.strictObject({ ok: z.literal(true) })

export const readyReply = z.strictObject({
  ok: z.boolean(),
  clickhouse: z.enum(['up', 'down']),
  hot_state: z.literal('up'),
  journal: z.strictObject({
    rows: z.number().int(),
    bytes: z.number().int(),
    oldest_age_seconds: z.number(),
    disk_full: z.boolean().describe("DATA_DIR's filesystem is under DISK_MIN_FREE_MB (embedded): events are refused"),
    dead_letters: z.number().int(),
  }),
  retention: z
    .strictObject({
      events_days: z.number().int().nullable(),
      hourly_days: z.number().int().nullable(),
      audit_days: z.number().int().nullable(),
      oldest_event_at: iso.nullable().describe('the oldest event ClickHouse keeps (read at most once a minute); null when none, or before ClickHouse first answered'),
    })
    .describe('how many days ClickHouse keeps events, hourly totals and audit records (null: forever), and the oldest event kept'),
})

export const eventReply = z.strictObject({
  ok: z.literal(true),
  event_id: z.string(),
  cost_usd: usd,
  paused: z.boolean(),
  paused_reason: pausedReason,
  paused_period: pausedPeriod,
  total_cost_24h: usd,
  remaining_usd: usd.describe('the threshold minus the rolling total (negative when over it)'),
  projected_exhaustion_at: iso.nullable(),
  periods: periods.describe("each period of the agent's period budgets, after this event"),
  alerts: z.array(z.number()).describe("the agent's alert levels this event crossed"),
  fleet_alerts: z.array(z.number()).describe("its fleet's alert levels this event crossed"),
  duplicate: z.literal(true).optional().describe('a repeat of an event id already counted: nothing changed'),
})

/** An event of POST /events/batch refused in its place: its index and its problem. */
export const batchProblem = z.strictObject({
  ok: z.literal(false),
  index: z.number().int().describe("the event's place in the request, from 0"),
  type: z.string(),
  title: z.string(),
  status: z.number().int().describe('400: the event is invalid (errors name events.<index>.<field>); 413: the event is larger than POST /events takes (64 KiB as JSON); 404: another agent\'s hold; 429: past the key\'s budget of events'),
  code: z.string(),
  detail: z.string(),
  errors: z.array(z.strictObject({ field: z.string(), message: z.string() })).optional(),
})

export const batchReply = z.strictObject({
  ok: z.literal(true),
  results: z.array(z.union([eventReply, batchProblem])).describe("one per event, in the request's order"),
})

export const holdReply = z.strictObject({
  ok: z.literal(true),
  allowed: z.boolean(),
  reason: z.enum(['paused', 'budget', 'fleet_budget', 'period_budget', 'fleet_period_budget', 'run_budget']).nullable(),
  hold_id: z.uuid().nullable(),
  held_usd: usd,
  worst_case_usd: usd,
  remaining_usd: usd,
  expires_at: iso.nullable(),
  paused: z.boolean(),
  paused_reason: pausedReason,
  paused_period: pausedPeriod,
})

export const releaseReply = z.strictObject({ ok: z.literal(true), hold_id: z.uuid(), agent_id: z.string(), released_usd: usd })

export const pauseReply = z.strictObject({ ok: z.literal(true), agent_id: z.string(), is_paused: z.boolean() })
export const fleetPauseReply = z.strictObject({ ok: z.literal(true), is_paused: z.boolean() })

/** A config as the read API shows it: the webhook URL masked. */
const shownConfig = z.strictObject({
  cost_threshold_usd: usd,
  slack_webhook_url: z.string().nullable(),
  auto_resume: z.boolean(),
  alert_at: z.array(z.number()),
  velocity_limit_usd: usd.nullable(),
  velocity_window_minutes: z.number().int(),
  period_budgets: z.array(periodBudget),
  run_budget_usd: usd.nullable().describe("what one run of the agent may cost; null: no limit"),
})

export const agentsReply = z.strictObject({
  agents: z.array(
    z.strictObject({
      agent_id: z.string(),
      total_cost_usd: usd,
      llm_calls: z.number().int(),
      cost_threshold_usd: usd.optional().describe('present when the agent has a config'),
      is_paused: z.boolean(),
      paused_reason: agentPausedReason,
      paused_period: pausedPeriod,
      remaining_usd: usd,
      alerts_reached: z.array(z.number()),
      periods,
      ignoring_pause: z.boolean(),
    }),
  ),
  next_cursor: z.string().nullable().optional().describe('with `limit`: the `cursor` of the next page; null on the last'),
  total: z.number().int().optional().describe('with `limit`: the agents that match the filters, over every page'),
  summary: z
    .strictObject({ agents: z.number().int(), paused: z.number().int(), ignoring_pause: z.number().int(), alerted: z.number().int(), total_cost_usd: usd })
    .optional()
    .describe('with `limit`: every agent of the list, whatever the filters: how many, paused, ignoring their pause, past an alert level, and their spend'),
})

const storedEvent = z.strictObject({
  event_id: z.string(),
  agent_id: z.string(),
  event_type: z.enum(EVENT_TYPES),
  model: z.string().nullable(),
  input_tokens: z.number().int(),
  output_tokens: z.number().int(),
  cache_read_tokens: z.number().int(),
  cache_write_tokens: z.number().int(),
  quantities: z.record(z.string(), z.number()),
  unpriced_quantities: z.array(z.string()),
  service_tier: z.string().nullable(),
  tool_name: z.string().nullable(),
  run_id: z.string().nullable(),
  metadata: z.record(z.string(), z.unknown()),
  cost_usd: usd,
  price_fallback: z.boolean(),
  timestamp: iso,
})

export const eventsReply = z.strictObject({ events: z.array(storedEvent) })

export const agentReply = z.strictObject({
  agent_id: z.string(),
  total_cost_usd: usd,
  llm_calls: z.number().int(),
  is_paused: z.boolean(),
  paused_reason: agentPausedReason,
  paused_period: pausedPeriod,
  paused_at: iso.nullable(),
  ignoring_pause: z.boolean(),
  ignored_calls: z.number().int(),
  ignored_usd: usd,
  remaining_usd: usd,
  held_usd: usd,
  projected_exhaustion_at: iso.nullable(),
  alerts_reached: z.array(z.number()),
  periods,
  config: shownConfig.nullable(),
  cost_by_model: z.array(z.strictObject({ model: z.string(), cost_usd: usd, llm_calls: z.number().int(), input_tokens: z.number().int(), output_tokens: z.number().int() })),
  events: z.array(storedEvent),
  next_before: iso.nullable().describe('pass as ?before= for the next page; null on the last'),
})

export const hourlyReply = z.strictObject({
  agent_id: z.string(),
  hours: z.number().int(),
  buckets: z.array(z.strictObject({ hour: iso, cost_usd: usd, llm_calls: z.number().int(), input_tokens: z.number().int(), output_tokens: z.number().int() })),
})

export const costsReply = z.strictObject({
  from: iso,
  to: iso,
  group_by: z.array(z.string()),
  groups: z.array(
    z.strictObject({
      // Each dimension's value, by its name in group_by; null: the events without it.
      group: z.record(z.string(), z.string().nullable()),
      cost_usd: usd,
      llm_calls: z.number().int(),
      input_tokens: z.number().int(),
      output_tokens: z.number().int(),
      events: z.number().int(),
    }),
  ),
  next_cursor: z.string().nullable(),
})

export const costDimensionsReply = z.strictObject({
  from: iso,
  to: iso,
  // The metadata keys of the range's events, the most used first: each as GET /costs takes it after "metadata.".
  keys: z.array(z.strictObject({ key: z.string(), events: z.number().int() })),
})

export const fleetReply = z.strictObject({
  total_cost_usd: usd,
  llm_calls: z.number().int(),
  cost_threshold_usd: usd.nullable(),
  remaining_usd: usd.nullable(),
  held_usd: usd,
  projected_exhaustion_at: iso.nullable(),
  is_paused: z.boolean(),
  paused_reason: agentPausedReason,
  paused_period: pausedPeriod,
  paused_at: iso.nullable(),
  override: z.boolean(),
  alerts_reached: z.array(z.number()),
  periods,
  config: shownConfig.nullable(),
})

export const auditReply = z.strictObject({
  records: z.array(
    z.strictObject({
      at: iso,
      agent_id: z.string().nullable(),
      scope: z.enum(AUDIT_SCOPES),
      action: z.string(),
      reason: z.string(),
      actor: z.string(),
      details: z.record(z.string(), z.unknown()),
    }),
  ),
  next_before: z.string().nullable(),
})

/** A run's figures: of one agent's part (GET /agents/{id}/runs) or of the whole run (GET /runs/{id}). */
const runFigures = {
  started_at: iso.describe("its agent_start's time, else its first event's"),
  ended_at: iso.nullable().describe("its agent_end's time (the latest, if several); null while it has none"),
  last_event_at: iso,
  status: z.enum(['open', 'ended', 'abandoned']).describe('ended: an agent_end arrived; abandoned: none did and its last event is older than RUN_ABANDONED_AFTER (24 h by default); else open'),
  duration_ms: z.number().int().describe('from started_at to ended_at, or to last_event_at without an end; never negative'),
  cost_usd: usd,
  llm_calls: z.number().int(),
  tool_calls: z.number().int(),
  event_count: z.number().int().describe('its events of every type'),
  models: z.array(z.string()).describe('the models of its llm_calls, distinct, sorted'),
  budget_stopped_at: iso.nullable().describe("when its agent's run budget stopped it (the first agent's, for a shared run); null when it did not"),
}

export const runsReply = z.strictObject({
  agent_id: z.string(),
  runs: z.array(z.strictObject({ run_id: z.string(), agent_id: z.string(), ...runFigures })).describe('newest start first'),
  next_cursor: z.string().nullable().describe('the `cursor` of the next page; null on the last'),
})

export const runReply = z.strictObject({
  run_id: z.string(),
  agent_ids: z.array(z.string()).describe('every agent that sent events with this run_id, sorted'),
  ...runFigures,
  by_agent: z.array(z.strictObject({ agent_id: z.string(), ...runFigures })).describe("each agent's part of the run, as GET /agents/{id}/runs lists it"),
  cost_by_model: z.array(z.strictObject({ model: z.string(), cost_usd: usd, llm_calls: z.number().int(), input_tokens: z.number().int(), output_tokens: z.number().int() })),
  events: z.array(storedEvent).describe('newest first'),
  next_before: iso.nullable().describe('pass as ?before= for the next page; null on the last'),
})

/** RFC 9457 problem details, as every error is answered (errors.ts). */
export const problemReply = z.strictObject({
  type: z.string(),
  title: z.string(),
  status: z.number().int(),
  code: z.string(),
  detail: z.string(),
  errors: z.array(z.strictObject({ field: z.string(), message: z.string() })).optional(),
})
