import { setTimeout as sleep } from 'node:timers/promises'
import { isUtf8 } from 'node:buffer'
import type { IncomingHttpHeaders } from 'node:http'
import type { ClickHouseClient } from '@clickhouse/client'
import rateLimit from '@fastify/rate-limit'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import type { AgentService } from './agents/service.ts'
import type { RunService } from './runs/service.ts'
import type { ApiKeys } from './auth/api-keys.ts'
import { AuthFailures } from './auth/failures.ts'
import { systemClock, type Clock } from './clock.ts'
import type { Config } from './config.ts'
import { Problem, StoreUnavailableError, type ProblemCode } from './errors.ts'
import { RateLimitedError, type HotState } from './hot-state/types.ts'
import type { RedisClient } from './storage/redis.ts'
import { DiskFullError, JournalFullError, type JournalStatus } from './journal/types.ts'
import type { IngestService } from './ingest/service.ts'
import type { HoldService } from './holds/service.ts'
import { agentsRoutes } from './routes/agents.ts'
import { runsRoutes } from './routes/runs.ts'
import { GroupedLocalStore, ROUTE_LIMITS_PREFIX } from './routes/limits.ts'
import { configRoutes } from './routes/config.ts'
import { costsRoutes } from './routes/costs.ts'
import { DASHBOARD_ROUTES, dashboardRoutes } from './routes/dashboard.ts'
import { eventsRoutes } from './routes/events.ts'
import { otlpRoutes, type OtlpOutcome } from './routes/otlp.ts'
import { agentAttributes } from './otlp/spans.ts'
import { exportRoutes } from './routes/exports.ts'
import type { ExportService } from './exports/service.ts'
import { healthRoutes } from './routes/health.ts'
import { holdsRoutes } from './routes/holds.ts'
import { REFERENCE_PREFIX, openapiRoutes } from './routes/openapi.ts'
import { rateHeaders, rateLimitedProblem, routeLimits } from './routes/limits.ts'
import { MAX_BODY_BYTES } from './schemas/event.ts'
import { assertWellFormed } from './schemas/well-formed.ts'

/**
 * Fastify's access log, one level down: two info lines per request cost a sixth of the
 * main thread under load (bench/). Errors keep their level; LOG_LEVEL=debug shows requests.
 */
class DebugAccessLog extends LogController {
  override incomingRequest(request: FastifyRequest): void {
    request.log.debug({ req: request }, 'incoming request')
  }
  override requestCompleted(_err: unknown, request: FastifyRequest, reply: FastifyReply): void {
    request.log.debug({ res: reply, responseTime: reply.elapsedTime }, 'request completed')
  }
}

export interface AppDeps {
  config: Config
  clickhouse: ClickHouseClient
  hotState: HotState
  ingest: IngestService
  holds: HoldService
  agents: AgentService
  runs: RunService
  exports: ExportService
  keys: ApiKeys
  /** The time failed authentications are counted by (tests step it). */
  clock?: Clock
  redis?: RedisClient | null
  /** This instance's journal, for /readyz. */
  journal: JournalStatus
  /** Rows moved to dead_letters since start, for /readyz. */
  deadLetters?: () => number
  /** pino-compatible; none (silent) when omitted. */
  log?: FastifyBaseLogger
  /** Told what each OTLP export came to (the metrics). */
  onOtlpExport?: (o: OtlpOutcome) => void
  /** Told every route as it is added (test/openapi.test.ts takes the inventory the document must cover). */
  onRoute?: (route: { method: string | string[]; url: string }) => void
}

const PUBLIC_ROUTES = new Set<string>(['/healthz', '/readyz', '/openapi.json', ...DASHBOARD_ROUTES])

/** Routes answered without an API key: the health checks, the dashboard's files, the API's description. */
/**
 * A request's API key: its x-api-key header, or an Authorization: Bearer one (what the
 * OpenTelemetry exporters send with OTEL_EXPORTER_OTLP_HEADERS).
 */
function apiKeyOf(headers: IncomingHttpHeaders): string | undefined {
  const header = headers['x-api-key']
  const key = Array.isArray(header) ? header[0] : header
  if (key) return key
  const bearer = /^Bearer[ \t]+(\S+)\s*$/i.exec(headers.authorization ?? '')
  return bearer?.[1]
}

function isPublic(route: string): boolean {
  return PUBLIC_ROUTES.has(route) || route === REFERENCE_PREFIX || route.startsWith(`${REFERENCE_PREFIX}/`)
}
/** How long a request from an address refused for failed authentications waits for its 429. */
const FAILED_AUTH_HOLD_MS = 1000

// Fastify's own errors, by code, to the catalogue (fastify lib/errors.js).
const FASTIFY_CODES: Record<string, ProblemCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'invalid_body',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalid_json',
}

/** The HTTP service: a Fastify instance with every route, not listening (tests inject or listen(0)). */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    ...(deps.log ? { loggerInstance: deps.log } : { logger: false }),
    bodyLimit: MAX_BODY_BYTES,
    trustProxy: deps.config.trustProxy,
    // A body with __proto__ or constructor.prototype is refused, not silently stripped.
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    return503OnClosing: true,
    logController: new DebugAccessLog(),
    // agent_id is up to 128 characters, up to ~1.5 KB percent-encoded: let zod judge it.
    routerOptions: { maxParamLength: 2048 },
    // Router errors (a malformed percent-escape) answer problem+json like every other error.
    frameworkErrors: (err, _request, reply) => sendProblem(reply, new Problem('invalid_query', err.message)),
  })
  const { onRoute } = deps
  if (onRoute) app.addHook('onRoute', (route) => onRoute(route))
  // Only JSON bodies; Fastify would otherwise parse text/plain as a string.
  app.removeContentTypeParser('text/plain')
  // JSON as Fastify parses it (secure-json-parse, poisoning refused), from bytes that must be
  // UTF-8: decoding them as a string would turn invalid bytes into U+FFFD, and what is stored
  // must be what was sent. Then the edge check of every string and of the depth.
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const bytes = body as Buffer
    if (!isUtf8(bytes)) return done(new Problem('invalid_json', 'the body is not valid UTF-8'), undefined)
    parseJson(request, bytes.toString('utf8'), (err, parsed) => {
      if (err) return done(err, undefined)
      try {
        assertWellFormed(parsed, 'invalid_body')
      } catch (problem) {
        return done(problem as Problem, undefined)
      }
      done(null, parsed)
    })
  })
  app.addHook('preValidation', async (request) => {
    if (request.method === 'POST' && request.routeOptions.url !== undefined && !request.headers['content-type']) {
      throw new Problem('unsupported_media_type', 'send the body as application/json (Content-Type header missing)')
    }
    assertWellFormed(request.params, 'invalid_query')
    assertWellFormed(request.query, 'invalid_query')
  })

  // While closing, answers in flight end their connection: a keep-alive client would
  // otherwise hold the drain open until its idle timeout.
  let closing = false
  app.addHook('preClose', async () => {
    closing = true
  })
  app.addHook('onSend', async (_request, reply) => {
    if (closing) reply.header('connection', 'close')
  })

  // An address that keeps presenting keys that fail is answered 429, each answer held a
  // moment. A valid key is never refused because of its address (one address may be a whole
  // office behind a NAT, or every client behind a proxy): every key is verified first, and
  // verifying a made-up key costs no read of its own (ApiKeys.verify).
  const failures = new AuthFailures(deps.config.authFailuresPerMinute, deps.clock ?? systemClock)
  app.addHook('onRequest', async (request) => {
    const route = request.routeOptions.url
    if (route === undefined || isPublic(route)) return
    const key = apiKeyOf(request.headers)
    const principal = key ? await deps.keys.verify(key) : null
    if (principal) {
      request.principal = principal
      return
    }
    const wait = failures.retryAfterSeconds(request.ip)
    if (wait !== null) {
      // Held a moment before the answer: a flooding client's connections then send a request
      // a second each instead of as fast as 429s come back, and the fleet keeps the CPU.
      await sleep(Math.min(wait * 1000, FAILED_AUTH_HOLD_MS))
      throw new Problem('rate_limited', `too many requests with a missing, unknown or revoked API key from this address; retry after ${wait} s`, {
        retryAfter: wait,
      })
    }
    failures.record(request.ip)
    throw new Problem('unauthorized', key ? 'unknown or revoked API key' : 'missing x-api-key header (or Authorization: Bearer)')
  })

  // With Redis, the limit holds across instances (120 in all, not 120 each); the plugin's
  // Redis store keys by our key generator, which already names the route group. While
  // Redis is away the limit is skipped: the hot state answers 503 for writes anyway.
  await app.register(
    rateLimit,
    deps.redis ? { global: false, redis: deps.redis, nameSpace: ROUTE_LIMITS_PREFIX, skipOnError: true } : { global: false, store: GroupedLocalStore },
  )

  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (err instanceof RateLimitedError) {
      // Spent in the hot state's step: the headers the plugin sends with its own 429s.
      rateHeaders(reply, err.rate)
      return sendProblem(reply, rateLimitedProblem(err.rate.max, err.rate.ttlMs))
    }
    const problem = toProblem(err, request)
    if (problem.status >= 500) request.log.error({ err }, problem.message)
    return sendProblem(reply, problem)
  })

  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, new Problem('not_found', `no route ${request.method} ${request.url.split('?')[0]}`)),
  )

  const limits = routeLimits(deps.config)
  await app.register(healthRoutes(deps.clickhouse, deps.hotState, deps.journal, deps.deadLetters ?? (() => 0), deps.config.retention))
  await app.register(eventsRoutes(deps.ingest, limits))
  await app.register(otlpRoutes(deps.ingest, limits, { agentAttributes: agentAttributes(deps.config.otlp.agentAttribute), onExport: deps.onOtlpExport }))
  await app.register(holdsRoutes(deps.holds, limits))
  await app.register(configRoutes(deps.agents, limits))
  await app.register(agentsRoutes(deps.agents, limits))
  await app.register(costsRoutes(deps.clickhouse, deps.clock ?? systemClock, limits))
  await app.register(runsRoutes(deps.runs, limits))
  await app.register(exportRoutes(deps.exports, deps.clock ?? systemClock, limits, deps.config.exports.stallTimeoutMs))
  await app.register(dashboardRoutes())
  await app.register(openapiRoutes())
  return app
}

function sendProblem(reply: FastifyReply, problem: Problem): FastifyReply {
  if (problem.retryAfter !== undefined) reply.header('retry-after', String(problem.retryAfter))
  return reply.status(problem.status).type('application/problem+json').send(problem.toBody())
}

function toProblem(err: FastifyError, request: FastifyRequest): Problem {
  if (err instanceof Problem) return err
  if (err instanceof DiskFullError) {
    return new Problem('disk_full', `${err.message}: events are refused until space is freed there (nothing acknowledged is lost); retry with the same event_id`, { retryAfter: 5, cause: err })
  }
  if (err instanceof JournalFullError) {
    return new Problem('journal_full', `${err.message}; ClickHouse is behind, retry with the same event_id`, { retryAfter: 5, cause: err })
  }
  if (err instanceof StoreUnavailableError) {
    const retry = request.method === 'POST' && request.routeOptions.url === '/events' ? 'retry with the same event_id' : 'retry'
    return new Problem('store_unavailable', `${err.store} is unavailable; ${retry}`, { retryAfter: 1, cause: err })
  }
  const code = err.code ? FASTIFY_CODES[err.code] : undefined
  if (code) return new Problem(code, err.message)
  // JSON.parse and secure-json-parse (prototype poisoning) errors carry statusCode 400.
  if (err.statusCode === 400) return new Problem('invalid_json', err.message)
  if (err.statusCode === 405) return new Problem('method_not_allowed', err.message)
  return new Problem('internal', 'internal server error', { cause: err })
}
