import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { gunzipSync } from 'node:zlib'
import { isUtf8 } from 'node:buffer'
import protobuf from 'protobufjs'
import { Problem } from '../errors.ts'

/**
 * OTLP over HTTP (https://opentelemetry.io/docs/specs/otlp/#otlphttp): request bodies in
 * binary protobuf (`application/x-protobuf`, the exporters' default `http/protobuf`) or in
 * OTLP/JSON (`application/json`), either one gzipped or not, and the answers in the request's
 * own encoding. Messages are the OpenTelemetry project's own definitions (proto/, loaded by
 * protobufjs); a decoded request is turned into the OTLP/JSON shape (lowerCamelCase keys,
 * 64-bit integers as decimal text, trace and span ids as hex), so both encodings are read
 * by one reader of plain objects (otlp/records.ts).
 */

const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url))

const root = new protobuf.Root()
root.resolvePath = (_origin, target) => join(PROTO_DIR, target)
root.loadSync(['opentelemetry/proto/collector/trace/v1/trace_service.proto', 'opentelemetry/proto/collector/logs/v1/logs_service.proto'], { keepCase: false })

// google.rpc.Status, the body of an OTLP error answer (its `details` are left out: none is sent).
const status = new protobuf.Type('Status').add(new protobuf.Field('code', 1, 'int32')).add(new protobuf.Field('message', 2, 'string'))
new protobuf.Root().define('google.rpc').add(status)

/** What a route decodes and answers: its request and response messages, and the name of its records in partial_success. */
export interface OtlpSignal {
  request: protobuf.Type
  response: protobuf.Type
  /** `rejectedSpans` or `rejectedLogRecords`. */
  rejected: string
}

export const TRACES: OtlpSignal = {
  request: root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest'),
  response: root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse'),
  rejected: 'rejectedSpans',
}

export const LOGS: OtlpSignal = {
  request: root.lookupType('opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest'),
  response: root.lookupType('opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse'),
  rejected: 'rejectedLogRecords',
}

export type OtlpEncoding = 'protobuf' | 'json'

export const OTLP_MEDIA_TYPES: Record<OtlpEncoding, string> = { protobuf: 'application/x-protobuf', json: 'application/json' }

/** The encoding a Content-Type names (parameters aside), or null for another. */
export function encodingOf(contentType: string | undefined): OtlpEncoding | null {
  const type = contentType?.split(';')[0]!.trim().toLowerCase()
  return type === OTLP_MEDIA_TYPES.protobuf ? 'protobuf' : type === OTLP_MEDIA_TYPES.json ? 'json' : null
}

/** A request's body inflated at most to this: a small gzip body cannot become gigabytes. */
export const MAX_INFLATED_BYTES = 16 * 1024 * 1024

/** The ids that are bytes in protobuf and hex text in OTLP/JSON. */
const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId'])

/**
 * A request body as a plain object in the OTLP/JSON shape; a Problem (400) when it is not
 * one: not gzip as it says, not protobuf or JSON of the message, or larger inflated than
 * MAX_INFLATED_BYTES.
 */
export function decodeRequest(signal: OtlpSignal, body: Buffer, encoding: OtlpEncoding, contentEncoding: string | undefined): unknown {
  let bytes = body
  const coding = contentEncoding?.trim().toLowerCase()
  if (coding === 'gzip') {
    try {
      bytes = gunzipSync(body, { maxOutputLength: MAX_INFLATED_BYTES })
    } catch (err) {
      throw new Problem('invalid_body', `the body is not gzip as Content-Encoding says, or inflates past ${MAX_INFLATED_BYTES} bytes: ${(err as Error).message}`)
    }
  } else if (coding !== undefined && coding !== '' && coding !== 'identity') {
    throw new Problem('unsupported_media_type', `Content-Encoding ${coding} is not taken: send gzip or none`)
  }
  if (encoding === 'json') {
    // As POST /events takes JSON: bytes that are UTF-8, or a 400 (never U+FFFD in their place).
    if (!isUtf8(bytes)) throw new Problem('invalid_json', 'the body is not valid UTF-8')
    try {
      return JSON.parse(bytes.toString('utf8')) as unknown
    } catch (err) {
      throw new Problem('invalid_json', `the body is not JSON: ${(err as Error).message}`)
    }
  }
  try {
    const message = signal.request.decode(bytes)
    return hexIds(signal.request.toObject(message, { longs: String, bytes: String, enums: Number, arrays: true }) as Record<string, unknown>)
  } catch (err) {
    throw new Problem('invalid_body', `the body is not an OTLP ${signal.request.name} in protobuf: ${(err as Error).message}`)
  }
}

/**
 * The trace and span ids of a decoded export, base64 (protobufjs's bytes as text) to hex, as
 * OTLP/JSON has them: in place, on the spans and log records only (a copy of the whole tree
 * was a fifth of the route's own time).
 */
function hexIds(message: Record<string, unknown>): Record<string, unknown> {
  const records = (resources: unknown, scopes: string, items: string) => {
    for (const r of (resources as Array<Record<string, unknown>> | undefined) ?? []) {
      for (const s of (r[scopes] as Array<Record<string, unknown>> | undefined) ?? []) {
        for (const item of (s[items] as Array<Record<string, unknown>> | undefined) ?? []) {
          for (const k of ID_FIELDS) if (typeof item[k] === 'string') item[k] = Buffer.from(item[k], 'base64').toString('hex')
        }
      }
    }
  }
  records(message.resourceSpans, 'scopeSpans', 'spans')
  records(message.resourceLogs, 'scopeLogs', 'logRecords')
  return message
}

/** An OTLP answer: `rejected` records and why (none: full success), in the request's encoding. */
export function encodeResponse(signal: OtlpSignal, encoding: OtlpEncoding, rejected: number, errorMessage: string): Buffer | object {
  const whole = rejected === 0 && errorMessage === ''
  // OTLP/JSON writes a 64-bit count as decimal text.
  if (encoding === 'json') return whole ? {} : { partialSuccess: { [signal.rejected]: String(rejected), errorMessage } }
  return Buffer.from(signal.response.encode(signal.response.fromObject(whole ? {} : { partialSuccess: { [signal.rejected]: rejected, errorMessage } })).finish())
}

/** An OTLP error answer's body (google.rpc.Status), in the request's encoding; `code`: a gRPC code (3: INVALID_ARGUMENT). */
export function encodeStatus(encoding: OtlpEncoding, code: number, message: string): Buffer | object {
  if (encoding === 'json') return { code, message }
  return Buffer.from(status.encode(status.fromObject({ code, message })).finish())
}
