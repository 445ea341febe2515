import { readFileSync } from 'node:fs'
import { z } from 'zod'
import { PROBLEMS, type ProblemCode } from './errors.ts'
import { configBody, fleetConfigBody, fleetPauseBody, pauseBody } from './schemas/config.ts'
import { batchBodyDoc, eventBody } from './schemas/event.ts'
import { holdBody, holdParams } from './schemas/hold.ts'
import { costDimensionsParams, costsParams } from './schemas/costs.ts'
import { agentParams, agentQuery, agentsQuery, auditQuery, eventsQuery, hourlyQuery } from './schemas/query.ts'
import { runParams, runsQuery } from './schemas/runs.ts'
import { exportQuery } from './schemas/export.ts'
import { OTLP_MEDIA_TYPES } from './otlp/protocol.ts'
import {
  agentReply,
  agentsReply,
  auditReply,
  batchReply,
  costDimensionsReply,
  costsReply,
  eventReply,
  eventsReply,
  fleetPauseReply,
  fleetReply,
  holdReply,
  hourlyReply,
  okReply,
  pauseReply,
  problemReply,
  readyReply,
  releaseReply,
  runReply,
  runsReply,
} from './schemas/responses.ts'

/**
 * The OpenAPI 3.1 document of the API, built from the zod schemas the routes
 * validate requests with (src/schemas/*) and the ones their answers are checked against in
 * test/openapi.test.ts (schemas/responses.ts): one source of truth, converted by zod's own
 * toJSONSchema. test/openapi.test.ts also checks that every route Fastify serves is here.
 */

type Method = 'get' | 'post' | 'delete'

export interface RouteDoc {
  method: Method
  /** As OpenAPI writes it: /agents/{agent_id}. */
  path: string
  summary: string
  tag: 'ingest' | 'holds' | 'config' | 'read' | 'health'
  /** false: no x-api-key (health). */
  auth: boolean
  /** A JSON body's schema, or `files`: the media types of a body in another format. */
  body?: z.ZodType | { files: readonly string[] }
  query?: z.ZodObject
  params?: z.ZodObject
  /** The JSON answer's schema, or `files`: the media types of a file answer. */
  reply: z.ZodType | { files: readonly string[] }
  /** What the route itself may answer besides what every authenticated route may (COMMON). */
  errors: readonly ProblemCode[]
}

/** What any authenticated route may answer. */
const COMMON: readonly ProblemCode[] = ['unauthorized', 'rate_limited', 'internal', 'store_unavailable']
/** What any route with a JSON body may answer. */
const BODY: readonly ProblemCode[] = ['invalid_body', 'invalid_json', 'payload_too_large', 'unsupported_media_type']
/** What a route that takes events may answer when the journal refuses them: its bound, or a full disk (embedded). */
const JOURNAL: readonly ProblemCode[] = ['journal_full', 'disk_full']

/** What the OTLP routes take and answer: an export in either of its encodings (otlp/protocol.ts). */
const OTLP_FILES = { files: Object.values(OTLP_MEDIA_TYPES) }

export const ROUTES: readonly RouteDoc[] = [
  { method: 'get', path: '/healthz', summary: 'The process answers', tag: 'health', auth: false, reply: okReply, errors: [] },
  {
    method: 'get',
    path: '/readyz',
    summary: 'It can take events: the hot state answers and the journal has room (503 with the same body, ok false, when the journal is full)',
    tag: 'health',
    auth: false,
    reply: readyReply,
    errors: ['store_unavailable'],
  },
  {
    method: 'post',
    path: '/events',
    summary: 'Report one event: priced, counted against the budgets, answered with whether the agent must stop',
    tag: 'ingest',
    auth: true,
    body: eventBody,
    reply: eventReply,
    errors: [...BODY, 'hold_not_found', ...JOURNAL],
  },
  {
    method: 'post',
    path: '/events/batch',
    summary:
      'Report up to 1,000 events (a body of at most 4 MiB): each answered in its place as POST /events answers it, or with its own problem while the others are stored; each valid event counts one against the key\'s budget of events',
    tag: 'ingest',
    auth: true,
    body: batchBodyDoc,
    reply: batchReply,
    errors: [...BODY, ...JOURNAL],
  },
  {
    method: 'post',
    path: '/v1/traces',
    summary:
      'OTLP/HTTP traces (ExportTraceServiceRequest, protobuf or OTLP/JSON, gzip or not), as the OpenTelemetry exporters send them: GenAI model calls become llm_calls, tool executions tool_calls, agent invocations a run; other spans are ignored. Answered with ExportTraceServiceResponse (partial_success counts refused spans), or a 400 with a google.rpc.Status, in the request\'s encoding. The API key as x-api-key or Authorization: Bearer',
    tag: 'ingest',
    auth: true,
    body: OTLP_FILES,
    reply: OTLP_FILES,
    errors: ['payload_too_large', 'unsupported_media_type', ...JOURNAL],
  },
  {
    method: 'post',
    path: '/v1/logs',
    summary:
      'OTLP/HTTP logs (ExportLogsServiceRequest, protobuf or OTLP/JSON, gzip or not): Claude Code\'s api_request events and GenAI model-call events become llm_calls; other records are ignored. Answered as POST /v1/traces answers (partial_success counts refused log records)',
    tag: 'ingest',
    auth: true,
    body: OTLP_FILES,
    reply: OTLP_FILES,
    errors: ['payload_too_large', 'unsupported_media_type', ...JOURNAL],
  },
  {
    method: 'post',
    path: '/holds',
    summary: "Hold a coming call's worst case against the agent's and its fleet's budget",
    tag: 'holds',
    auth: true,
    body: holdBody,
    reply: holdReply,
    errors: [...BODY, 'hold_not_found'],
  },
  {
    method: 'delete',
    path: '/holds/{hold_id}',
    summary: 'Release an open hold early',
    tag: 'holds',
    auth: true,
    params: holdParams,
    reply: releaseReply,
    errors: ['invalid_query', 'hold_not_found'],
  },
  { method: 'post', path: '/config', summary: "Set an agent's budget (an upsert: omitted fields keep their value)", tag: 'config', auth: true, body: configBody, reply: okReply, errors: BODY },
  { method: 'post', path: '/config/pause', summary: 'Pause or resume an agent by hand', tag: 'config', auth: true, body: pauseBody, reply: pauseReply, errors: BODY },
  { method: 'post', path: '/config/fleet', summary: "Set the user's fleet budget, over all of their agents", tag: 'config', auth: true, body: fleetConfigBody, reply: okReply, errors: BODY },
  { method: 'post', path: '/config/fleet/pause', summary: 'Pause or resume every agent of the user by hand', tag: 'config', auth: true, body: fleetPauseBody, reply: fleetPauseReply, errors: BODY },
  {
    method: 'get',
    path: '/agents',
    summary: 'The agents with events in the last 24 h, highest cost first; filtered, sorted and in pages when asked',
    tag: 'read',
    auth: true,
    query: agentsQuery,
    reply: agentsReply,
    errors: ['invalid_query'],
  },
  { method: 'get', path: '/agents/events', summary: "The user's newest events", tag: 'read', auth: true, query: eventsQuery, reply: eventsReply, errors: ['invalid_query'] },
  {
    method: 'get',
    path: '/agents/{agent_id}',
    summary: "An agent's totals, pause state, config, cost by model and newest events (paged)",
    tag: 'read',
    auth: true,
    params: agentParams,
    query: agentQuery,
    reply: agentReply,
    errors: ['invalid_query', 'agent_not_found'],
  },
  {
    method: 'get',
    path: '/agents/{agent_id}/hourly',
    summary: "An agent's cost per UTC hour, oldest first",
    tag: 'read',
    auth: true,
    params: agentParams,
    query: hourlyQuery,
    reply: hourlyReply,
    errors: ['invalid_query', 'agent_not_found'],
  },
  {
    method: 'get',
    path: '/agents/{agent_id}/runs',
    summary: "An agent's runs, newest start first (paged): times, status, cost, calls and models of each",
    tag: 'read',
    auth: true,
    params: agentParams,
    query: runsQuery,
    reply: runsReply,
    errors: ['invalid_query', 'agent_not_found'],
  },
  {
    method: 'get',
    path: '/runs/{run_id}',
    summary: 'One run over every agent that sent events with its id: its figures, each agent\'s part, cost by model and its events (paged)',
    tag: 'read',
    auth: true,
    params: runParams,
    query: agentQuery,
    reply: runReply,
    errors: ['invalid_query', 'run_not_found'],
  },
  { method: 'get', path: '/fleet', summary: "The fleet's 24 h total over all of the user's agents, against its budget", tag: 'read', auth: true, query: eventsQuery.pick({}), reply: fleetReply, errors: ['invalid_query'] },
  {
    method: 'get',
    path: '/costs',
    summary:
      'Cost, llm_calls and tokens grouped by one or two of agent, model, day, hour, run and metadata.<key> (group_by, repeated), over whole UTC hours (from, to; the last 24 by default), filtered by agent_id, model and metadata.<key>=<value> (each repeatable: any of the values), highest cost first, paged; format=csv for a report',
    tag: 'read',
    auth: true,
    query: costsParams,
    reply: costsReply,
    errors: ['invalid_query'],
  },
  {
    method: 'get',
    path: '/costs/dimensions',
    summary: "The metadata keys of the user's events over whole UTC hours (from, to; the last 24 by default), the most used first, up to limit: the metadata.<key> dimensions GET /costs can group and filter by",
    tag: 'read',
    auth: true,
    query: costDimensionsParams,
    reply: costDimensionsReply,
    errors: ['invalid_query'],
  },
  { method: 'get', path: '/audit', summary: "The user's audit log, newest first (paged)", tag: 'read', auth: true, query: auditQuery, reply: auditReply, errors: ['invalid_query'] },
  {
    method: 'get',
    path: '/export',
    summary: "The user's events of a time range as a file (CSV, NDJSON or Parquet), oldest first, every stored field, streamed",
    tag: 'read',
    auth: true,
    query: exportQuery,
    reply: { files: ['text/csv', 'application/x-ndjson', 'application/vnd.apache.parquet'] },
    errors: ['invalid_query', 'export_busy'],
  },
]

/** The problem codes a route may answer, by HTTP status. */
export function errorsOf(route: RouteDoc): Map<number, ProblemCode[]> {
  const codes = new Set<ProblemCode>([...(route.auth ? COMMON : []), ...route.errors])
  const byStatus = new Map<number, ProblemCode[]>()
  for (const code of codes) {
    const { status } = PROBLEMS[code]
    byStatus.set(status, [...(byStatus.get(status) ?? []), code])
  }
  return byStatus
}

/** zod's JSON Schema (2020-12, which OpenAPI 3.1 uses) of a request (`input`) or an answer (`output`). */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>
  return rest
}

function parameters(schema: z.ZodObject | undefined, where: 'query' | 'path') {
  if (!schema) return []
  const json = jsonSchema(schema, 'input') as { properties?: Record<string, Record<string, unknown>>; required?: string[] }
  return Object.entries(json.properties ?? {}).map(([name, s]) => ({
    name,
    in: where,
    required: where === 'path' || (json.required ?? []).includes(name),
    ...(typeof s.description === 'string' ? { description: s.description } : {}),
    schema: s,
  }))
}

function bodyContent(body: NonNullable<RouteDoc['body']>) {
  if ('files' in body) return Object.fromEntries(body.files.map((type) => [type, { schema: { type: 'string', contentMediaType: type } }]))
  return { 'application/json': { schema: jsonSchema(body, 'input') } }
}

function operation(route: RouteDoc) {
  const content =
    'files' in route.reply
      ? Object.fromEntries(route.reply.files.map((type) => [type, { schema: { type: 'string', contentMediaType: type } }]))
      : { 'application/json': { schema: jsonSchema(route.reply, 'output') } }
  const responses: Record<string, unknown> = { 200: { description: 'OK', content } }
  for (const [status, codes] of [...errorsOf(route)].sort(([a], [b]) => a - b)) {
    const problem = jsonSchema(problemReply, 'output') as { properties: Record<string, unknown> }
    responses[status] = {
      description: codes.map((c) => `${c}: ${PROBLEMS[c].title}`).join('; '),
      content: { 'application/problem+json': { schema: { ...problem, properties: { ...problem.properties, code: { type: 'string', enum: codes } } } } },
    }
  }
  return {
    summary: route.summary,
    tags: [route.tag],
    operationId: `${route.method}${route.path.replace(/\{(\w+)\}/g, 'By_$1').replace(/[^a-zA-Z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? '').toUpperCase())}`,
    ...(route.auth ? {} : { security: [] }),
    parameters: [...parameters(route.params, 'path'), ...parameters(route.query, 'query')],
    ...(route.body ? { requestBody: { required: true, content: bodyContent(route.body) } } : {}),
    responses,
  }
}

const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version

/** The document, built once. */
export const OPENAPI_DOCUMENT = (() => {
  const paths: Record<string, Record<string, unknown>> = {}
  for (const route of ROUTES) (paths[route.path] ??= {})[route.method] = operation(route)
  return {
    openapi: '3.1.0',
    info: {
      title: 'burnrate',
      version: VERSION,
      description: 'Cost metering and budget enforcement for AI agent fleets. Every request but the health checks carries an API key (`burnrate keys create`) as x-api-key; errors are RFC 9457 problem details with a stable code.',
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    components: { securitySchemes: { apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key' }, bearer: { type: 'http', scheme: 'bearer' } } },
    security: [{ apiKey: [] }, { bearer: [] }],
    paths,
  }
})()
