import type { FastifyPluginAsync } from 'fastify'
import { isoOrNull } from '../clock.ts'
import type { HoldService } from '../holds/service.ts'
import { nanoToUsd } from '../money.ts'
import { holdBody, holdParams } from '../schemas/hold.ts'
import type { RouteLimits } from './limits.ts'
import { parse, principal } from './parse.ts'

/** Budget holds, limited with POST /events: a guarded call asks for one before each event. */
export const holdsRoutes =
  (holds: HoldService, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    const opts = { config: { rateLimit: limits.events } }

    app.post('/holds', opts, async (request) => {
      const body = parse(holdBody, request.body, 'invalid_body')
      const r = await holds.hold(principal(request).userId, body)
      const granted = r.refusal === null
      return {
        ok: true,
        allowed: granted,
        reason: r.refusal,
        hold_id: r.holdId,
        held_usd: granted ? nanoToUsd(r.worstCaseNano) : 0,
        worst_case_usd: nanoToUsd(r.worstCaseNano),
        remaining_usd: nanoToUsd(r.remainingNano),
        expires_at: isoOrNull(r.expiresAt),
        paused: r.paused,
        paused_reason: r.pausedReason,
      }
    })

    app.delete('/holds/:hold_id', opts, async (request) => {
      const { hold_id } = parse(holdParams, request.params, 'invalid_query')
      const released = await holds.release(principal(request).userId, hold_id)
      return { ok: true, hold_id, agent_id: released.agentId, released_usd: nanoToUsd(released.costNano) }
    })
  }
