import { createHash } from 'node:crypto'
import { z } from 'zod'
import { Problem } from '../errors.ts'
import { AttributeError, Attributes, attributeList, attributes, genAiTokens, MODEL_OPERATIONS, uuidOf, type AttributeValue, type SpanOutcome } from './spans.ts'

/**
 * The log records of an OTLP logs export (OTLP/JSON shape, otlp/protocol.ts) that describe a
 * model call, as POST /events bodies: Claude Code's `api_request` events (its token counts;
 * its own `cost_usd` kept in metadata, for comparison), and GenAI events that carry a model
 * and usage as spans do. Everything else is ignored. A record's event id is derived from the
 * record itself (its times, ids, name, body and attributes, with its resource's), the same
 * whenever an exporter sends it again.
 */

const logsExport = z.looseObject({
  resourceLogs: z
    .array(
      z.looseObject({
        resource: z.looseObject({ attributes: attributeList }).nullish(),
        scopeLogs: z.array(z.looseObject({ logRecords: z.array(z.unknown()).nullish() })).nullish(),
      }),
    )
    .nullish(),
})

const logRecord = z.looseObject({
  timeUnixNano: z.union([z.string(), z.number()]).optional(),
  observedTimeUnixNano: z.union([z.string(), z.number()]).optional(),
  eventName: z.string().optional(),
  body: z.unknown().optional(),
  attributes: attributeList,
  traceId: z.string().optional(),
  spanId: z.string().optional(),
})

/** Claude Code's event of one API request (the record's event name, or its body). */
const CLAUDE_CODE_REQUEST = new Set(['api_request', 'claude_code.api_request'])

/** Each log record of an export with its resource's attributes; a Problem (400) when the export is not one. */
export function logRecordsOf(body: unknown): Array<{ record: unknown; resource: Map<string, AttributeValue>; resourceList: unknown }> {
  const parsed = logsExport.safeParse(body)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!
    throw new Problem('invalid_body', `not an OTLP logs export: ${issue.path.join('.') || '(body)'} ${issue.message}`)
  }
  const out: Array<{ record: unknown; resource: Map<string, AttributeValue>; resourceList: unknown }> = []
  for (const rl of parsed.data.resourceLogs ?? []) {
    const resource = attributes(rl.resource?.attributes)
    for (const sl of rl.scopeLogs ?? []) for (const record of sl.logRecords ?? []) out.push({ record, resource, resourceList: rl.resource?.attributes ?? [] })
  }
  return out
}

/** The events one log record describes; `agentNames` as for spans (otlp/spans.ts agentAttributes). */
export function eventsOfLogRecord(raw: unknown, resource: Map<string, AttributeValue>, resourceList: unknown, agentNames: readonly string[]): SpanOutcome {
  const parsed = logRecord.safeParse(raw)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!
    return { refused: `a log record's ${issue.path.join('.') || 'body'} ${issue.message}` }
  }
  const r = parsed.data
  const a = new Attributes(attributes(r.attributes), resource)
  const body = r.body !== null && typeof r.body === 'object' && 'stringValue' in r.body ? String((r.body as { stringValue: unknown }).stringValue) : undefined
  try {
    const name = r.eventName || a.text('event.name') || body
    if (name !== undefined && !name.isWellFormed()) return { refused: 'a log record whose event name is not well-formed Unicode' }
    const claudeCode = name !== undefined && CLAUDE_CODE_REQUEST.has(name)
    const operation = a.text('gen_ai.operation.name')
    const model = claudeCode ? a.text('model') : a.text('gen_ai.response.model', 'gen_ai.request.model')
    if (!claudeCode && !(operation !== undefined && MODEL_OPERATIONS.has(operation) && model !== undefined)) return { ignored: true }
    const agentId = a.text(...agentNames)
    if (agentId === undefined) return { refused: `a log record names no agent (${agentNames.join(', ')})` }
    if (model === undefined) return { refused: `a model call's log record without its model` }
    let tokens: { input_tokens: number; output_tokens: number; cache_read_tokens?: number; cache_write_tokens?: number }
    let runId: string | undefined
    const metadata: Record<string, string | number> = {}
    if (claudeCode) {
      // Anthropic's counts: input_tokens leaves out the cached ones, which burnrate counts as
      // parts of the input.
      const uncached = a.count(['input_tokens'], { digits: true }) ?? 0
      const cacheRead = a.count(['cache_read_tokens'], { digits: true }) ?? 0
      const cacheWrite = a.count(['cache_creation_tokens'], { digits: true }) ?? 0
      tokens = { input_tokens: uncached + cacheRead + cacheWrite, output_tokens: a.count(['output_tokens'], { digits: true }) ?? 0, cache_read_tokens: cacheRead, cache_write_tokens: cacheWrite }
      runId = a.text('session.id')
      const reported = a.number('cost_usd')
      if (reported !== undefined) metadata['claude_code.cost_usd'] = reported
    } else {
      tokens = genAiTokens(a)
      runId = r.traceId && /^[0-9a-fA-F]{32}$/.test(r.traceId) && !/^0+$/.test(r.traceId) ? r.traceId.toLowerCase() : undefined
    }
    const service = a.text('service.name')
    if (service !== undefined) metadata['service.name'] = service
    if (name !== undefined) metadata['otel.event_name'] = name
    return {
      events: [
        {
          agent_id: agentId,
          event_type: 'llm_call',
          event_id: uuidOf(createHash('sha256').update(JSON.stringify(['otlp-log', r.timeUnixNano ?? '', r.observedTimeUnixNano ?? '', r.traceId ?? '', r.spanId ?? '', name ?? '', r.body ?? null, r.attributes ?? [], resourceList])).digest()),
          model,
          ...tokens,
          ...(runId === undefined ? {} : { run_id: runId }),
          metadata,
        },
      ],
    }
  } catch (err) {
    if (err instanceof AttributeError) return { refused: `a log record: ${err.message}` }
    throw err
  }
}
