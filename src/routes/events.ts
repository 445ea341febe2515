import type { FastifyPluginAsync, FastifyReply } from 'fastify'
import { isoOrNull } from '../clock.ts'
import { Problem } from '../errors.ts'
import { RateLimitedError, type RateState } from '../hot-state/types.ts'
import type { IngestReply, IngestService } from '../ingest/service.ts'
import { nanoToUsd } from '../money.ts'
import { formatPeriods } from '../agents/service.ts'
import { MAX_BATCH_BYTES, MAX_BODY_BYTES, batchBody, eventBody, type EventBody } from '../schemas/event.ts'
import { parse, principal } from './parse.ts'
import { rateHeaders, rateLimitedProblem, type RouteLimits } from './limits.ts'

export const eventsRoutes =
  (ingest: IngestService, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    app.post('/events', async (request, response) => {
      const event = parse(eventBody, request.body, 'invalid_body')
      const reply = await ingest.ingest(principal(request).userId, event, limits.eventsCharge(request))
      rateHeaders(response, reply.rate)
      return eventAnswer(reply)
    })

    /**
     * Up to 1,000 events in one request, each answered in its place: as POST /events answers
     * it, or with its own problem (a 400 naming the event's index and field, a 413 for an
     * event larger than POST /events takes, a 429 past the key's budget, a 404 for another
     * agent's hold), while the others are stored. Each valid
     * event counts one against the key's budget of events, in order. A store that cannot
     * take them (Redis away, the journal full) fails the whole request, as POST /events
     * does: its retry stores nothing twice (event ids).
     */
    app.post('/events/batch', { bodyLimit: MAX_BATCH_BYTES }, async (request, response) => {
      const { events } = parse(batchBody, request.body, 'invalid_body')
      const userId = principal(request).userId
      const charge = limits.eventsCharge(request)
      // Each event is checked on its own; the valid ones are handed over together, in order,
      // so that the hot state can take them in one step (the Redis one's group commit).
      const outcomes = await Promise.allSettled(
        events.map((raw, index) => {
          const event = parseAt(raw, index)
          return event instanceof Problem ? Promise.reject(event) : ingest.ingest(userId, event, charge)
        }),
      )
      let rate: RateState | null = null
      let limited = false
      const results = outcomes.map((o, index) => {
        if (o.status === 'fulfilled') {
          rate = o.value.rate ?? rate
          return eventAnswer(o.value)
        }
        const err: unknown = o.reason
        if (err instanceof RateLimitedError) {
          rate = err.rate
          limited = true
          return { ok: false as const, index, ...rateLimitedProblem(err.rate.max, err.rate.ttlMs).toBody() }
        }
        if (err instanceof Problem && err.status < 500) return { ok: false as const, index, ...err.toBody() }
        throw err
      })
      sendRate(response, rate, limited)
      return { ok: true, results }
    })
  }

/** The answer to one event, as POST /events gives it. */
function eventAnswer(reply: IngestReply) {
  return {
    ok: true as const,
    event_id: reply.eventId,
    cost_usd: nanoToUsd(reply.costNano),
    paused: reply.paused,
    paused_reason: reply.pausedReason,
    paused_period: reply.pausedPeriod,
    total_cost_24h: nanoToUsd(reply.totalNano),
    remaining_usd: nanoToUsd(reply.thresholdNano - reply.totalNano),
    projected_exhaustion_at: isoOrNull(reply.exhaustionAt),
    periods: formatPeriods(reply.periods),
    alerts: reply.alerts,
    fleet_alerts: reply.fleetAlerts,
    ...(reply.duplicate ? { duplicate: true } : {}),
  }
}

/**
 * An event of a batch checked as POST /events checks one, its problem naming its index: its
 * body limit too (an event larger than POST /events takes is 413 in its place).
 */
function parseAt(raw: unknown, index: number): EventBody | Problem {
  const bytes = Buffer.byteLength(JSON.stringify(raw) ?? '')
  if (bytes > MAX_BODY_BYTES) return new Problem('payload_too_large', `event ${index} is ${bytes} bytes as JSON; an event may be at most ${MAX_BODY_BYTES}`)
  try {
    return parse(eventBody, raw, 'invalid_body')
  } catch (err) {
    if (!(err instanceof Problem)) throw err
    const errors = (err.errors ?? []).map((e) => ({ field: e.field === '(body)' ? `events.${index}` : `events.${index}.${e.field}`, message: e.message }))
    return new Problem('invalid_body', `event ${index}: ${err.message}`, { errors })
  }
}

/** The key's budget after the batch; with an event refused for it, when to try again. */
function sendRate(response: FastifyReply, rate: RateState | null, limited: boolean): void {
  if (!rate) return
  rateHeaders(response, rate)
  if (limited) response.header('retry-after', Math.ceil(rate.ttlMs / 1000))
}
