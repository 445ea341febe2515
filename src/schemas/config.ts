import { z } from 'zod'
import { agentId } from './event.ts'
import { isTimeZone, periodName, type PeriodSpec } from '../periods.ts'

const webhookUrl = z.string().max(2048, 'must be at most 2048 characters').nullable()

const limitUsd = z.number().gt(0, 'must be > 0').max(1_000_000, 'must be <= 1000000')

/** A calendar period in a time zone: a day, a week or a month, from local midnight. */
const calendarBudget = z
  .strictObject({
    period: z.enum(['day', 'week', 'month'], { error: 'must be "day", "week" or "month"' }),
    limit_usd: limitUsd,
    time_zone: z.string().refine(isTimeZone, 'must be an IANA time zone name, such as "Europe/Paris" or "UTC"').default('UTC'),
    week_starts: z.enum(['monday', 'sunday'], { error: 'must be "monday" or "sunday"' }).default('monday'),
    month_starts_on: z.number().int('must be an integer').min(1, 'must be 1 to 28').max(28, 'must be 1 to 28').default(1),
  })
  .transform(({ period, limit_usd, time_zone, week_starts, month_starts_on }) => ({
    spec: { period, timeZone: time_zone, weekStarts: week_starts, monthStartsOn: month_starts_on } satisfies PeriodSpec,
    limitUsd: limit_usd,
  }))

/** A rolling window of whole days, sliding an hour at a time. */
const rollingBudget = z
  .strictObject({
    window_days: z.number().int('must be an integer').min(1, 'must be 1 to 31').max(31, 'must be 1 to 31'),
    limit_usd: limitUsd,
  })
  .transform(({ window_days, limit_usd }) => ({ spec: { windowDays: window_days } satisfies PeriodSpec, limitUsd: limit_usd }))

/**
 * One entry: a calendar period (it names `period`) or a rolling window (it names
 * `window_days`); an entry that is neither is told what the nearer one lacks (routes/parse.ts).
 */
const periodBudget = z.union([calendarBudget, rollingBudget])

/** At most four period budgets, one per period; null or [] removes them all. */
const periodBudgets = z
  .array(periodBudget, { error: 'must be an array of period budgets, or null' })
  .max(4, 'must hold at most 4 period budgets')
  .superRefine((budgets, ctx) => {
    const names = budgets.map((b) => periodName(b.spec))
    names.forEach((name, i) => {
      if (names.indexOf(name) !== i) ctx.addIssue({ code: 'custom', path: [i], message: `repeats the period ${JSON.stringify(name)}: one budget per period` })
    })
  })
  .nullable()

/** A budget's fields, of an agent (POST /config) or of a fleet (POST /config/fleet). */
const policyFields = {
  cost_threshold_usd: z.number().min(0, 'must be >= 0').max(1_000_000, 'must be <= 1000000').optional(),
  slack_webhook_url: webhookUrl.optional(),
  chat_webhook_url: webhookUrl.optional(),
  auto_resume: z.boolean().optional(),
  // Fractions of the threshold at which one alert fires per crossing.
  alert_at: z
    .array(z.number().gt(0, 'each level must be > 0').lt(1, 'each level must be < 1'), { error: 'must be an array of numbers' })
    .max(5, 'must hold at most 5 levels')
    .refine((levels) => new Set(levels).size === levels.length, 'must not repeat a level')
    .transform((levels) => [...levels].sort((a, b) => a - b))
    .optional(),
  // A pause when more than this is spent within the last velocity_window_minutes; null: none.
  velocity_limit_usd: z.number().gt(0, 'must be > 0').max(1_000_000, 'must be <= 1000000').nullable().optional(),
  velocity_window_minutes: z.number().int('must be an integer').min(1, 'must be 1 to 60').max(60, 'must be 1 to 60').optional(),
  // Budgets over calendar periods and rolling windows of days, beside the rolling 24 h one.
  period_budgets: periodBudgets.optional(),
}

type Aliased = { slack_webhook_url?: string | null; chat_webhook_url?: string | null }

/** `chat_webhook_url` is an alias of `slack_webhook_url`: both may be sent only alike. */
function oneWebhookUrl(c: Aliased, ctx: z.RefinementCtx): void {
  if (c.slack_webhook_url !== undefined && c.chat_webhook_url !== undefined && c.slack_webhook_url !== c.chat_webhook_url) {
    ctx.addIssue({ code: 'custom', path: ['chat_webhook_url'], message: 'is an alias of slack_webhook_url; send one of them' })
  }
}

function resolveAlias<T extends Aliased>({ chat_webhook_url, slack_webhook_url, ...rest }: T) {
  return { ...rest, slack_webhook_url: slack_webhook_url !== undefined ? slack_webhook_url : chat_webhook_url }
}

/**
 * POST /config: omitted fields keep their current value (a new config starts from the
 * defaults). An agent's config alone has a run budget: what one of its runs may cost.
 */
export const configBody = z
  .strictObject({ agent_id: agentId, ...policyFields, run_budget_usd: limitUsd.nullable().optional() })
  .superRefine(oneWebhookUrl)
  .transform(resolveAlias)

/** POST /config/fleet: the same fields, for all of the key's user's agents together. */
export const fleetConfigBody = z.strictObject(policyFields).superRefine(oneWebhookUrl).transform(resolveAlias)

/** The fields of a budget, of an agent or a fleet. */
export type PolicyBody = z.output<typeof fleetConfigBody>
export type ConfigBody = z.output<typeof configBody>

export const pauseBody = z.strictObject({
  agent_id: agentId,
  is_paused: z.boolean(),
})

export type PauseBody = z.output<typeof pauseBody>

/** POST /config/fleet/pause. */
export const fleetPauseBody = z.strictObject({
  is_paused: z.boolean(),
})
