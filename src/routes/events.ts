import type { FastifyPluginAsync } from 'fastify'
import type { IngestService } from '../ingest/service.ts'
import { isoOrNull } from '../clock.ts'
import { nanoToUsd } from '../money.ts'
import { eventBody } from '../schemas/event.ts'
import { parse, principal } from './parse.ts'
import { rateHeaders, type RouteLimits } from './limits.ts'

export const eventsRoutes =
  (ingest: IngestService, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    app.post('/events', async (request, response) => {
      const event = parse(eventBody, request.body, 'invalid_body')
      const reply = await ingest.ingest(principal(request).userId, event, limits.eventsCharge(request))
      rateHeaders(response, reply.rate)
      return {
        ok: true,
        event_id: reply.eventId,
        cost_usd: nanoToUsd(reply.costNano),
        paused: reply.paused,
        paused_reason: reply.pausedReason,
        total_cost_24h: nanoToUsd(reply.totalNano),
        remaining_usd: nanoToUsd(reply.thresholdNano - reply.totalNano),
        projected_exhaustion_at: isoOrNull(reply.exhaustionAt),
        alerts: reply.alerts,
        fleet_alerts: reply.fleetAlerts,
        ...(reply.duplicate ? { duplicate: true } : {}),
      }
    })
  }
