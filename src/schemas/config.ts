import { z } from 'zod'
import { agentId } from './event.ts'

const webhookUrl = z.string().max(2048, 'must be at most 2048 characters').nullable()

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

/** POST /config: omitted fields keep their current value (a new config starts from the defaults). */
export const configBody = z.strictObject({ agent_id: agentId, ...policyFields }).superRefine(oneWebhookUrl).transform(resolveAlias)

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
