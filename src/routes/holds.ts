import type { FastifyPluginAsync } from 'fastify'
import { isoOrNull } from '../clock.ts'
import { Problem } from '../errors.ts'
import type { HoldService } from '../holds/service.ts'
import { nanoToUsd } from '../money.ts'
import { holdBody, holdParams } from '../schemas/hold.ts'
import { rateHeaders, type RouteLimits } from './limits.ts'
import { parse, principal } from './parse.ts'

/** Budget holds, counted in the API key's budget of events: a guarded call asks for one before each event. */
export const holdsRoutes =
  (holds: HoldService, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    app.post('/holds', async (request, reply) => {
      const body = parse(holdBody, request.body, 'invalid_body')
      const r = await holds.hold(principal(request).userId, body, limits.eventsCharge(request))
      rateHeaders(reply, r.rate)
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
        paused_period: r.pausedPeriod,
      }
    })

    app.delete('/holds/:hold_id', async (request, reply) => {
      const { hold_id } = parse(holdParams, request.params, 'invalid_query')
      const { released, rate } = await holds.release(principal(request).userId, hold_id, limits.eventsCharge(request))
      rateHeaders(reply, rate)
      if (!released) throw new Problem('hold_not_found', `no open hold ${hold_id} for this API key's user: settled, released, expired or never granted`)
      return { ok: true, hold_id, agent_id: released.agentId, released_usd: nanoToUsd(released.costNano) }
    })
  }
