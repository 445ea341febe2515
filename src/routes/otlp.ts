import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { Problem } from '../errors.ts'
import { RateLimitedError, type RateCharge, type RateState } from '../hot-state/types.ts'
import type { IngestReply, IngestService } from '../ingest/service.ts'
import { eventsOfLogRecord, logRecordsOf } from '../otlp/logs.ts'
import { decodeRequest, encodeResponse, encodeStatus, encodingOf, LOGS, OTLP_MEDIA_TYPES, TRACES, type OtlpEncoding, type OtlpSignal } from '../otlp/protocol.ts'
import { eventsOfSpan, spansOf, type SpanOutcome } from '../otlp/spans.ts'
import { eventBody } from '../schemas/event.ts'
import { principal } from './parse.ts'
import { rateHeaders, type RouteLimits } from './limits.ts'

/** An OTLP export's body at most, as sent (gzip inflates it to MAX_INFLATED_BYTES at most). */
export const MAX_OTLP_BYTES = 4 * 1024 * 1024

/** gRPC's codes for a Status: a malformed export, and one past the key's budget. */
const INVALID_ARGUMENT = 3
const RESOURCE_EXHAUSTED = 8

/** What an export's records came to, for its answer and the metrics. */
export interface OtlpOutcome {
  stored: number
  ignored: number
  rejected: number
}

export interface OtlpOptions {
  /** The attributes that name a span's agent, in order (otlp/spans.ts agentAttributes). */
  agentAttributes: readonly string[]
  /** Told what each export came to (the metrics). */
  onExport?: (o: OtlpOutcome) => void
}

/**
 * POST /v1/traces and POST /v1/logs: OTLP/HTTP, as the OpenTelemetry exporters send it
 * (otlp/protocol.ts), with burnrate's API keys (x-api-key, or Authorization: Bearer). The
 * spans and log records that describe a model call, a tool call or an agent's run become
 * events (otlp/spans.ts, otlp/logs.ts) and go through the same
 * atomic step as POST /events, each counting one against the key's budget of events; the
 * others are ignored, counted, not stored. A span that cannot be used is refused alone and
 * counted in partial_success with the first reason; a body that is not an export is a 400
 * with a google.rpc.Status, in the request's encoding.
 */
export const otlpRoutes =
  (ingest: IngestService, limits: RouteLimits, o: OtlpOptions): FastifyPluginAsync =>
  async (app) => {
    // This context's own parsers: the body's bytes as sent (gzip and protobuf are not JSON).
    app.removeAllContentTypeParsers()
    app.addContentTypeParser([OTLP_MEDIA_TYPES.protobuf, OTLP_MEDIA_TYPES.json], { parseAs: 'buffer', bodyLimit: MAX_OTLP_BYTES }, (_request, body, done) => done(null, body))

    /** One signal's route: its records (spans, log records) read from the decoded export as events. */
    const exportRoute = (path: string, signal: OtlpSignal, outcomesOf: (body: unknown) => SpanOutcome[]) =>
      app.post(path, { bodyLimit: MAX_OTLP_BYTES }, async (request, response) => {
        const encoding = encodingOf(request.headers['content-type'])
        if (encoding === null) throw new Problem('unsupported_media_type', `send the export as ${OTLP_MEDIA_TYPES.protobuf} or ${OTLP_MEDIA_TYPES.json}`)
        let outcomes: SpanOutcome[]
        try {
          outcomes = outcomesOf(decodeRequest(signal, request.body as Buffer, encoding, header(request, 'content-encoding')))
        } catch (err) {
          if (!(err instanceof Problem) || err.status !== 400) throw err
          return send(response.code(400), encoding, encodeStatus(encoding, INVALID_ARGUMENT, err.message))
        }
        const outcome = await ingestAll(ingest, principal(request).userId, limits.eventsCharge(request), outcomes)
        o.onExport?.(outcome)
        if (outcome.rate) rateHeaders(response, outcome.rate)
        if (outcome.limited && outcome.stored === 0 && outcome.rejected === outcome.limited) {
          // Nothing stored, only for the key's budget: the exporter sends the export again
          // after Retry-After (its ids make that safe), rather than dropping it.
          response.header('retry-after', Math.ceil(outcome.rate!.ttlMs / 1000))
          return send(response.code(429), encoding, encodeStatus(encoding, RESOURCE_EXHAUSTED, outcome.reason))
        }
        return send(response, encoding, encodeResponse(signal, encoding, outcome.rejected, outcome.reason))
      })

    exportRoute('/v1/traces', TRACES, (body) => spansOf(body).map(({ span, resource }) => eventsOfSpan(span, resource, o.agentAttributes)))
    exportRoute('/v1/logs', LOGS, (body) => logRecordsOf(body).map(({ record, resource, resourceList }) => eventsOfLogRecord(record, resource, resourceList, o.agentAttributes)))
  }

/** Every record's events through POST /events's step; refusals counted with their first reason, and the key's budget after them. */
async function ingestAll(ingest: IngestService, userId: string, charge: RateCharge, outcomes: readonly SpanOutcome[]): Promise<OtlpOutcome & { reason: string; rate: RateState | null; limited: number }> {
  let limited = 0
  let ignored = 0
  let rejected = 0
  let reason = ''
  const refuse = (why: string) => {
    rejected++
    reason ||= why
  }
  const work: Array<Promise<IngestReply[]>> = []
  for (const outcome of outcomes) {
    if ('ignored' in outcome) ignored++
    else if ('refused' in outcome) refuse(outcome.refused)
    else {
      // The events of one record stand or fall together: one refused refuses the record. They
      // are held to what POST /events holds an event to (their strings were checked as they
      // were read: otlp/spans.ts Attributes).
      const bodies = outcome.events.map((e) => eventBody.safeParse(e))
      const bad = bodies.find((b) => !b.success)
      if (bad && !bad.success) refuse(`an event of a record: ${bad.error.issues[0]!.path.join('.')} ${bad.error.issues[0]!.message}`)
      else work.push(Promise.all(bodies.map((b) => ingest.ingest(userId, b.data!, charge))))
    }
  }
  let rate: RateState | null = null
  let stored = 0
  for (const result of await Promise.allSettled(work)) {
    if (result.status === 'fulfilled') {
      stored++
      rate = result.value.at(-1)?.rate ?? rate
      continue
    }
    const err: unknown = result.reason
    if (err instanceof RateLimitedError) {
      rate = err.rate
      limited++
      refuse(`past this API key's ${err.rate.max} events a minute`)
    } else if (err instanceof Problem && err.status < 500) refuse(err.message)
    else throw err
  }
  return { stored, ignored, rejected, reason, rate, limited }
}

function header(request: FastifyRequest, name: string): string | undefined {
  const v = request.headers[name]
  return Array.isArray(v) ? v[0] : v
}

function send(response: FastifyReply, encoding: OtlpEncoding, body: Buffer | object) {
  return response.type(OTLP_MEDIA_TYPES[encoding]).send(body)
}
