import { createHash } from 'node:crypto'
import { z } from 'zod'
import { Problem } from '../errors.ts'

/**
 * The spans of an OTLP trace export (in the OTLP/JSON shape, otlp/protocol.ts) that describe
 * something burnrate meters, as POST /events bodies: a model call (GenAI semantic
 * conventions, the latest names and the older ones current instrumentations still emit) an
 * `llm_call`, a tool execution a `tool_call`, an agent invocation its run's `agent_start` and
 * `agent_end`. Every other span is ignored. Each event's id is derived from its span's trace
 * and span ids, so an export sent again counts nothing twice; a span's run is its trace.
 */

/** An attribute's value as JavaScript has it: OTLP's AnyValue, unwrapped. */
export type AttributeValue = string | number | boolean | null | AttributeValue[] | { [key: string]: AttributeValue }

/** A record's or a resource's attributes, each value read by valueOf(). */
export const attributeList = z.array(z.object({ key: z.string(), value: z.unknown().optional() })).optional()

/** What a whole export must be; each span is judged on its own (a bad one is refused alone). */
const traceExport = z.looseObject({
  resourceSpans: z
    .array(
      z.looseObject({
        resource: z.looseObject({ attributes: attributeList }).nullish(),
        scopeSpans: z.array(z.looseObject({ spans: z.array(z.unknown()).nullish() })).nullish(),
      }),
    )
    .nullish(),
})

const hex = (length: number) => z.string().regex(new RegExp(`^[0-9a-fA-F]{${length}}$`), `must be ${length} hex digits`)
const span = z.looseObject({
  traceId: hex(32),
  spanId: hex(16),
  name: z.string().optional(),
  attributes: attributeList,
})

/** A record's attribute whose value has the wrong type: the record is refused, never the export. */
export class AttributeError extends Error {}

/** OTLP's AnyValue ({stringValue} and the rest) as a plain value; 64-bit integers come as text. */
function valueOf(v: unknown): AttributeValue {
  if (v === null || typeof v !== 'object') return null
  const any = v as Record<string, unknown>
  if ('stringValue' in any) return String(any.stringValue)
  if ('boolValue' in any) return Boolean(any.boolValue)
  if ('intValue' in any) return Number(any.intValue)
  if ('doubleValue' in any) return Number(any.doubleValue)
  if ('arrayValue' in any) return ((any.arrayValue as { values?: unknown[] } | null)?.values ?? []).map(valueOf)
  if ('kvlistValue' in any) return Object.fromEntries(((any.kvlistValue as { values?: unknown[] } | null)?.values ?? []).map((kv) => [(kv as { key: string }).key, valueOf((kv as { value?: unknown }).value)]))
  if ('bytesValue' in any) return String(any.bytesValue)
  return null
}

export function attributes(list: z.output<typeof attributeList>): Map<string, AttributeValue> {
  return new Map((list ?? []).map((kv) => [kv.key, valueOf(kv.value)]))
}

/** Reads attributes by name, the record's (a span's, a log record's) first and then its resource's. */
export class Attributes {
  readonly #span: Map<string, AttributeValue>
  readonly #resource: Map<string, AttributeValue>

  constructor(span: Map<string, AttributeValue>, resource: Map<string, AttributeValue>) {
    this.#span = span
    this.#resource = resource
  }

  /**
   * The first of `names` that is set, as a non-empty string (a number is taken as its text).
   * Every string of an event comes through here, so here it meets POST /events's edge check
   * (schemas/well-formed.ts): well-formed Unicode, which OTLP/JSON's \u escapes need not be.
   */
  text(...names: string[]): string | undefined {
    for (const name of names) {
      const v = this.#span.get(name) ?? this.#resource.get(name)
      if (v === undefined || v === null) continue
      if (typeof v === 'string' && !v.isWellFormed()) throw new AttributeError(`${name} must be well-formed Unicode (it holds a lone UTF-16 surrogate)`)
      if (typeof v === 'string' && v !== '') return v
      if (typeof v === 'number') return String(v)
      if (typeof v !== 'string') throw new AttributeError(`${name} must be a string`)
    }
    return undefined
  }

  /**
   * The first of `names` that is set on the record, as a token count: a whole number from 0
   * (`digits`: also as decimal text, as some emitters send counts).
   */
  count(names: readonly string[], o: { digits?: boolean } = {}): number | undefined {
    for (const name of names) {
      const raw = this.#span.get(name)
      if (raw === undefined || raw === null) continue
      const v = o.digits && typeof raw === 'string' && /^\d{1,15}$/.test(raw) ? Number(raw) : raw
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new AttributeError(`${name} must be a whole number of tokens, not ${JSON.stringify(raw)}`)
      return v
    }
    return undefined
  }

  /** The first of `names` that is set on the record, as a number (decimal text taken too), else undefined. */
  number(...names: string[]): number | undefined {
    for (const name of names) {
      const v = this.#span.get(name)
      if (typeof v === 'number') return v
      if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v)
    }
    return undefined
  }
}

/** What a span becomes: POST /events bodies, nothing (ignored), or a refusal and why. */
export type SpanOutcome = { events: Array<Record<string, unknown>> } | { ignored: true } | { refused: string }

/** The GenAI operations that are model calls (gen_ai.operation.name). */
export const MODEL_OPERATIONS: ReadonlySet<string> = new Set(['chat', 'text_completion', 'generate_content', 'embeddings'])

/** A GenAI record's token counts (`gen_ai.usage.*`, the current names then the older ones) as POST /events's token fields. */
export function genAiTokens(a: Attributes): { input_tokens: number; output_tokens: number; cache_read_tokens?: number; cache_write_tokens?: number } {
  const cacheRead = a.count(['gen_ai.usage.cache_read.input_tokens'])
  const cacheWrite = a.count(['gen_ai.usage.cache_creation.input_tokens'])
  return {
    input_tokens: a.count(['gen_ai.usage.input_tokens', 'gen_ai.usage.prompt_tokens']) ?? 0,
    output_tokens: a.count(['gen_ai.usage.output_tokens', 'gen_ai.usage.completion_tokens']) ?? 0,
    ...(cacheRead === undefined ? {} : { cache_read_tokens: cacheRead }),
    ...(cacheWrite === undefined ? {} : { cache_write_tokens: cacheWrite }),
  }
}

/** How a span names its agent, in order (the first set wins); `configured`: OTLP_AGENT_ATTRIBUTE. */
export function agentAttributes(configured: string): string[] {
  return [configured, 'gen_ai.agent.id', 'gen_ai.agent.name', 'service.name']
}

/**
 * The events one span describes. `agentNames`: the attributes that name its agent, in
 * order, looked up on the span and then on its resource (agentAttributes()).
 */
export function eventsOfSpan(raw: unknown, resource: Map<string, AttributeValue>, agentNames: readonly string[]): SpanOutcome {
  const parsed = span.safeParse(raw)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!
    return { refused: `a span's ${issue.path.join('.') || 'body'} ${issue.message}` }
  }
  const s = parsed.data
  const a = new Attributes(attributes(s.attributes), resource)
  try {
    const operation = a.text('gen_ai.operation.name')
    const model = a.text('gen_ai.response.model', 'gen_ai.request.model')
    const input = a.count(['gen_ai.usage.input_tokens', 'gen_ai.usage.prompt_tokens'])
    const output = a.count(['gen_ai.usage.output_tokens', 'gen_ai.usage.completion_tokens'])
    const isModelCall = operation !== undefined ? MODEL_OPERATIONS.has(operation) : model !== undefined && (input !== undefined || output !== undefined)
    const isTool = operation === 'execute_tool'
    const isAgent = operation === 'invoke_agent'
    if (!isModelCall && !isTool && !isAgent) return { ignored: true }
    const agentId = a.text(...agentNames)
    if (agentId === undefined) return { refused: `span ${s.spanId} names no agent (${agentNames.join(', ')})` }
    const traceId = s.traceId.toLowerCase()
    const spanId = s.spanId.toLowerCase()
    const provider = a.text('gen_ai.provider.name', 'gen_ai.system')
    const service = a.text('service.name')
    const base = {
      agent_id: agentId,
      run_id: traceId,
      metadata: {
        ...(operation === undefined ? {} : { 'gen_ai.operation.name': operation }),
        ...(provider === undefined ? {} : { 'gen_ai.provider.name': provider }),
        ...(service === undefined ? {} : { 'service.name': service }),
        'otel.trace_id': traceId,
        'otel.span_id': spanId,
      },
    }
    if (isModelCall) {
      if (model === undefined) return { refused: `span ${spanId} is a model call without gen_ai.request.model or gen_ai.response.model` }
      return { events: [{ ...base, event_type: 'llm_call', event_id: eventIdOf(traceId, spanId, 'llm_call'), model, ...genAiTokens(a) }] }
    }
    if (isTool) {
      const toolName = a.text('gen_ai.tool.name') ?? (s.name?.isWellFormed() ? s.name : undefined) ?? 'tool'
      return { events: [{ ...base, event_type: 'tool_call', event_id: eventIdOf(traceId, spanId, 'tool_call'), tool_name: toolName }] }
    }
    return {
      events: [
        { ...base, event_type: 'agent_start', event_id: eventIdOf(traceId, spanId, 'agent_start') },
        { ...base, event_type: 'agent_end', event_id: eventIdOf(traceId, spanId, 'agent_end') },
      ],
    }
  } catch (err) {
    if (err instanceof AttributeError) return { refused: `span ${s.spanId}: ${err.message}` }
    throw err
  }
}

/**
 * The event id of what a span describes (`kind`): a UUID (version 8, RFC 9562's for ids made
 * by their own rule) from a SHA-256 of the trace id, the span id and the kind, the same
 * whenever the span is sent again.
 */
export function eventIdOf(traceId: string, spanId: string, kind: string): string {
  return uuidOf(createHash('sha256').update(`otlp\0${traceId}\0${spanId}\0${kind}`).digest())
}

/** A version 8 UUID of the first 16 bytes of a digest. */
export function uuidOf(digest: Buffer): string {
  const b = Buffer.from(digest.subarray(0, 16))
  b[6] = (b[6]! & 0x0f) | 0x80
  b[8] = (b[8]! & 0x3f) | 0x80
  const h = b.toString('hex')
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}

/** Each span of an export with its resource's attributes; a Problem (400) when the export is not one. */
export function spansOf(body: unknown): Array<{ span: unknown; resource: Map<string, AttributeValue> }> {
  const parsed = traceExport.safeParse(body)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!
    throw new Problem('invalid_body', `not an OTLP trace export: ${issue.path.join('.') || '(body)'} ${issue.message}`)
  }
  const out: Array<{ span: unknown; resource: Map<string, AttributeValue> }> = []
  for (const rs of parsed.data.resourceSpans ?? []) {
    const resource = attributes(rs.resource?.attributes)
    for (const ss of rs.scopeSpans ?? []) for (const sp of ss.spans ?? []) out.push({ span: sp, resource })
  }
  return out
}
