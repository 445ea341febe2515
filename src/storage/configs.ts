import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import type { AgentRef } from '../hot-state/agent-ref.ts'
import { agentPolicyJson, type AgentPolicy, type PeriodBudget } from '../hot-state/meters.ts'
import { isCalendar, periodName } from '../periods.ts'
import { nanoToUsd, type Nano } from '../money.ts'
import { maskWebhookUrl } from '../notify/webhook.ts'
import { toChDateTime } from './clickhouse.ts'
import { agentsFilter, agentsParams } from './events.ts'
import { select } from './query.ts'
import { nextVersion } from './version.ts'

const int = z.coerce.number().int()
const latestRow = z.object({
  user_id: z.string(),
  agent_id: z.string(),
  threshold_nano: int,
  slack_webhook_url: z.string().nullable(),
  auto_resume: z.coerce.boolean(),
  alert_at: z.array(z.coerce.number()),
  velocity_limit_nano: int,
  velocity_window_minutes: int,
  period_budgets: z.string(),
  run_budget_nano: int,
  last_updated_at: z.string(),
  last_version: z.coerce.number().int(),
}).transform(({ last_updated_at, last_version, ...r }) => ({ ...r, updated_at: last_updated_at, version: last_version }))

/** A row of agent_configs, as written and as read back: the newest version is the agent's config. */
export interface ConfigRow {
  user_id: string
  agent_id: string
  threshold_nano: Nano
  slack_webhook_url: string | null
  auto_resume: boolean
  alert_at: readonly number[]
  /** 0: no velocity limit (sql/0014; storedVelocityLimit). */
  velocity_limit_nano: Nano
  velocity_window_minutes: number
  /** JSON of the policy's periodBudgets (sql/0017); '[]': none. */
  period_budgets: string
  /** 0: no run budget (sql/0023). */
  run_budget_nano: Nano
  updated_at: string
  version: number
}

/** What a written row adds for the audit log (sql/0012): who set it, and the config as shown. */
export interface WrittenConfigRow extends ConfigRow {
  actor: string
  shown: string
  /** The config it replaced as shown, '' for an agent's first; last, so a Redis script can append it. */
  replaced?: string
}

/**
 * A config row as the journal holds it. One journaled by an earlier release (a journal left
 * unshipped across an upgrade) lacks the columns added since; ClickHouse gives them their
 * DEFAULT when the row is shipped, and this gives them the same where the row is read before
 * that (the hot state's rebuild at start-up).
 */
export function journaledConfigRow(row: WrittenConfigRow): WrittenConfigRow {
  const columnsAdded: Pick<ConfigRow, 'period_budgets' | 'run_budget_nano'> = { period_budgets: '[]', run_budget_nano: 0 } // sql/0017, sql/0023
  return { ...columnsAdded, ...row }
}

/** A velocity limit as the table keeps it: 0 is none. */
function storedVelocityLimit(limit: Nano | null): Nano {
  return limit ?? 0
}

/** The row of a config set now by `actor` (versions grow within this process). */
export function configRow(ref: AgentRef, policy: AgentPolicy, nowMs: number, actor: string, replaced?: string): WrittenConfigRow {
  // Only a fleet's default policy has no daily budget, and it is never written: a fleet's
  // first config names one (agents/service.ts). A 0 here would be a budget of nothing.
  if (policy.thresholdNano === null) throw new Error('a config row needs a daily budget')
  return {
    user_id: ref.userId,
    agent_id: ref.agentId,
    threshold_nano: policy.thresholdNano,
    slack_webhook_url: policy.webhookUrl,
    auto_resume: policy.autoResume,
    alert_at: policy.alertAt,
    velocity_limit_nano: storedVelocityLimit(policy.velocityLimitNano),
    velocity_window_minutes: policy.velocityWindowMinutes,
    period_budgets: JSON.stringify(policy.periodBudgets),
    run_budget_nano: policy.runBudgetNano ?? 0,
    updated_at: toChDateTime(nowMs),
    version: nextVersion(nowMs),
    actor,
    shown: shownConfig(policy),
    ...(replaced === undefined ? {} : { replaced }),
  }
}

/** A config as the API shows it: USD, the webhook URL masked (GET /agents/{id}, the audit log). */
export function formatConfig(p: AgentPolicy) {
  return {
    cost_threshold_usd: p.thresholdNano === null ? null : nanoToUsd(p.thresholdNano),
    slack_webhook_url: p.webhookUrl === null ? null : maskWebhookUrl(p.webhookUrl),
    auto_resume: p.autoResume,
    alert_at: p.alertAt,
    velocity_limit_usd: p.velocityLimitNano === null ? null : nanoToUsd(p.velocityLimitNano),
    velocity_window_minutes: p.velocityWindowMinutes,
    period_budgets: p.periodBudgets.map(formatPeriodBudget),
    run_budget_usd: p.runBudgetNano === null ? null : nanoToUsd(p.runBudgetNano),
  }
}

/** A period budget as POST /config takes it and the API shows it. */
export function formatPeriodBudget({ spec, limitNano }: PeriodBudget) {
  const limit_usd = nanoToUsd(limitNano)
  if (!isCalendar(spec)) return { period: periodName(spec), window_days: spec.windowDays, limit_usd }
  return { period: spec.period, limit_usd, time_zone: spec.timeZone, week_starts: spec.weekStarts, month_starts_on: spec.monthStartsOn }
}

/** formatConfig as the JSON text the audit log keeps. */
export function shownConfig(p: AgentPolicy): string {
  return JSON.stringify(formatConfig(p))
}

// argMax over the version rather than FINAL: the newest row wins even before a merge.
// (argMax skips NULLs, so a removed webhook URL is kept as '' in the row, read as null.)
const LATEST = `SELECT user_id, agent_id,
    argMax(threshold_nano, version) AS threshold_nano,
    nullIf(argMax(ifNull(slack_webhook_url, ''), version), '') AS slack_webhook_url,
    argMax(auto_resume, version) AS auto_resume,
    argMax(alert_at, version) AS alert_at,
    argMax(velocity_limit_nano, version) AS velocity_limit_nano,
    argMax(velocity_window_minutes, version) AS velocity_window_minutes,
    argMax(period_budgets, version) AS period_budgets,
    argMax(run_budget_nano, version) AS run_budget_nano,
    toString(argMax(updated_at, version)) AS last_updated_at,
    max(version) AS last_version
  FROM agent_configs`

/** Every agent's current config, or those of a batch of agents, for rebuilding the hot state. */
export function allConfigs(client: ClickHouseClient, refs?: readonly AgentRef[]): Promise<ConfigRow[]> {
  return select(client, `${LATEST} WHERE 1 ${agentsFilter(refs)} GROUP BY user_id, agent_id`, agentsParams(refs), latestRow)
}

/** The policy a stored config row holds. */
export function policyOf(c: ConfigRow): AgentPolicy {
  return {
    thresholdNano: c.threshold_nano,
    autoResume: c.auto_resume,
    webhookUrl: c.slack_webhook_url,
    alertAt: c.alert_at,
    velocityLimitNano: c.velocity_limit_nano > 0 ? c.velocity_limit_nano : null,
    velocityWindowMinutes: c.velocity_window_minutes,
    periodBudgets: storedPeriodBudgets.parse(JSON.parse(c.period_budgets)),
    runBudgetNano: c.run_budget_nano > 0 ? c.run_budget_nano : null,
  }
}

const storedPeriodBudgets = agentPolicyJson.shape.periodBudgets
