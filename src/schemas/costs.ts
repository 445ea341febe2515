import { z } from 'zod'
import { agentId } from './event.ts'
import { encodeCursor, intParam, opaqueCursor } from './query.ts'

/**
 * GET /costs: cost grouped by one or two dimensions (an agent, a model, a UTC day or hour, a
 * run, or a top-level scalar of the events' metadata), over a time range, filtered, highest
 * cost first. Parameters may repeat: `group_by` once per dimension, a filter once per value it
 * accepts (any of them matches). A metadata filter is a parameter of its own:
 * `metadata.<key>=<value>`.
 */

export const FIXED_DIMENSIONS = ['agent', 'model', 'day', 'hour', 'run'] as const
export type FixedDimension = (typeof FIXED_DIMENSIONS)[number]

/** A dimension: one of the fixed ones, or a key of the events' metadata. */
export type Dimension = { kind: FixedDimension } | { kind: 'metadata'; key: string }

export const METADATA_PREFIX = 'metadata.'
export const MAX_METADATA_KEY = 256
const MAX_FILTER_VALUE = 4096
const MAX_FILTER_VALUES = 100
/** The longest range a query may cover. */
export const MAX_RANGE_DAYS = 366
const HOUR_MS = 3_600_000
const DAY_MS = 24 * HOUR_MS
const floorHour = (ms: number) => Math.floor(ms / HOUR_MS) * HOUR_MS
const ceilHour = (ms: number) => Math.ceil(ms / HOUR_MS) * HOUR_MS
const MAX_ROWS = { json: 1000, csv: 100_000 } as const

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

/** A metadata key as a parameter names it: any text but control characters, 1 to 256 characters. */
const metadataKey = z
  .string()
  .min(1, `must name a metadata key after "${METADATA_PREFIX}"`)
  .max(MAX_METADATA_KEY, `a metadata key must be at most ${MAX_METADATA_KEY} characters`)
  .refine((k) => !CONTROL.test(k), 'a metadata key must not contain control characters')

/** The name a dimension has in the API (group_by, the answer's `group`, CSV headers). */
export function dimensionName(d: Dimension): string {
  return d.kind === 'metadata' ? `${METADATA_PREFIX}${d.key}` : d.kind
}

const dimension = z.string().transform((s, ctx): Dimension => {
  if ((FIXED_DIMENSIONS as readonly string[]).includes(s)) return { kind: s as FixedDimension }
  if (s.startsWith(METADATA_PREFIX)) {
    const key = metadataKey.safeParse(s.slice(METADATA_PREFIX.length))
    if (key.success) return { kind: 'metadata', key: key.data }
    ctx.addIssue({ code: 'custom', message: key.error.issues[0]!.message })
    return z.NEVER
  }
  ctx.addIssue({ code: 'custom', message: `must be one of ${FIXED_DIMENSIONS.join(', ')} or ${METADATA_PREFIX}<key>` })
  return z.NEVER
})

/** A parameter given once or repeated, as a list. */
function repeated<T extends z.ZodType<unknown, string>>(item: T, max: number) {
  return z
    .union([z.string(), z.array(z.string())], { error: 'must be text' })
    .transform((v) => (Array.isArray(v) ? v : [v]))
    .pipe(z.array(item).max(max, `may be given at most ${max} times`))
}

const filterValue = z.string().max(MAX_FILTER_VALUE, `must be at most ${MAX_FILTER_VALUE} characters`)
const instant = z.iso.datetime({ offset: true, error: 'must be an ISO 8601 time' }).transform((s) => Date.parse(s))

/** A page's position: the last row's cost and group, and the range and grouping it belongs to. */
export interface CostCursor {
  fromMs: number
  toMs: number
  groupBy: string[]
  costNano: string
  /** Each group value of the last row (null: the events without it). */
  values: Array<string | null>
}

export function encodeCostCursor(c: CostCursor): string {
  return encodeCursor([c.fromMs, c.toMs, c.groupBy, c.costNano, c.values])
}

const cursorJson = z.tuple([z.number().int(), z.number().int(), z.array(z.string()), z.string().regex(/^-?\d{1,19}$/), z.array(z.string().nullable())])

const costCursor = opaqueCursor(
  cursorJson.refine(([, , groupBy, , values]) => groupBy.length === values.length),
  'must be a next_cursor of GET /costs',
  16_384,
).transform(([fromMs, toMs, groupBy, costNano, values]): CostCursor => ({ fromMs, toMs, groupBy, costNano, values }))

const KNOWN = ['group_by', 'from', 'to', 'agent_id', 'model', 'limit', 'cursor', 'format'] as const

/** GET /costs's query string as given (and as OpenAPI documents it). */
export const costsParams = z
  .object({
    group_by: repeated(dimension, 2).default([{ kind: 'agent' }]),
    from: instant.optional(),
    to: instant.optional(),
    agent_id: repeated(agentId, MAX_FILTER_VALUES).optional(),
    model: repeated(filterValue, MAX_FILTER_VALUES).optional(),
    limit: z
      .string()
      .regex(/^\d{1,9}$/, 'must be an integer')
      .transform(Number)
      .optional(),
    cursor: costCursor.optional(),
    format: z.enum(['json', 'csv'], { error: 'must be json or csv' }).default('json'),
  })
  .catchall(z.unknown())

/** A metadata filter: events whose metadata holds `key` with one of `values`. */
export interface MetadataFilter {
  key: string
  values: string[]
}

/** GET /costs's query, checked and completed: the range fixed, the filters gathered. */
export interface CostsQuery {
  groupBy: Dimension[]
  fromMs: number
  toMs: number
  agentIds: string[]
  models: string[]
  metadata: MetadataFilter[]
  limit: number
  cursor: CostCursor | undefined
  format: 'json' | 'csv'
}

/**
 * A query's range in whole UTC hours (the hourly tables answer it): from the hour `from` falls
 * in to the end of the hour `to` falls in (an instant on the hour ends there). As given, else
 * the cursor's (a page goes on over its first page's range), else the 24 hours that end with
 * the current one. At most MAX_RANGE_DAYS; `from` before `to`.
 */
function hourRange(q: { from?: number; to?: number }, now: number, cursor: { fromMs: number; toMs: number } | undefined, ctx: z.RefinementCtx): { fromMs: number; toMs: number } {
  const toMs = q.to !== undefined ? ceilHour(q.to) : (cursor?.toMs ?? ceilHour(now + 1))
  const fromMs = q.from !== undefined ? floorHour(q.from) : (cursor?.fromMs ?? toMs - DAY_MS)
  if (fromMs >= toMs) ctx.addIssue({ code: 'custom', path: [q.from === undefined ? 'to' : 'from'], message: 'must be before to' })
  else if (toMs - fromMs > MAX_RANGE_DAYS * DAY_MS) ctx.addIssue({ code: 'custom', path: ['from'], message: `the range may span at most ${MAX_RANGE_DAYS} days` })
  return { fromMs, toMs }
}

const MAX_METADATA_FILTERS = 10

/** GET /costs's query at `now`: the range defaults to the 24 h before it. */
export function costsQuery(now: number) {
  return costsParams.transform((q, ctx): CostsQuery => {
    const metadata: MetadataFilter[] = []
    for (const [name, raw] of Object.entries(q)) {
      if ((KNOWN as readonly string[]).includes(name)) continue
      if (!name.startsWith(METADATA_PREFIX)) {
        ctx.addIssue({ code: 'custom', path: [name], message: `is not a known parameter (a metadata filter is ${METADATA_PREFIX}<key>=<value>)` })
        continue
      }
      const key = metadataKey.safeParse(name.slice(METADATA_PREFIX.length))
      const values = repeated(filterValue, MAX_FILTER_VALUES).safeParse(raw)
      if (!key.success) ctx.addIssue({ code: 'custom', path: [name], message: key.error.issues[0]!.message })
      else if (!values.success) ctx.addIssue({ code: 'custom', path: [name], message: values.error.issues[0]!.message })
      else metadata.push({ key: key.data, values: values.data })
    }
    if (metadata.length > MAX_METADATA_FILTERS) ctx.addIssue({ code: 'custom', path: [METADATA_PREFIX], message: `at most ${MAX_METADATA_FILTERS} metadata filters` })

    const { fromMs, toMs } = hourRange(q, now, q.cursor, ctx)

    const groupBy = q.group_by
    const names = groupBy.map(dimensionName)
    if (new Set(names).size < names.length) ctx.addIssue({ code: 'custom', path: ['group_by'], message: 'must not name a dimension twice' })

    const max = MAX_ROWS[q.format]
    const limit = q.limit ?? (q.format === 'csv' ? max : 100)
    if (limit < 1 || limit > max) ctx.addIssue({ code: 'custom', path: ['limit'], message: `must be between 1 and ${max}` })

    const c = q.cursor
    if (c && (c.fromMs !== fromMs || c.toMs !== toMs || c.groupBy.join('\u0000') !== names.join('\u0000'))) {
      ctx.addIssue({ code: 'custom', path: ['cursor'], message: 'belongs to another range or grouping' })
    }
    return { groupBy, fromMs, toMs, agentIds: q.agent_id ?? [], models: q.model ?? [], metadata, limit, cursor: c, format: q.format }
  })
}

/** The most keys GET /costs/dimensions answers, and how many by default. */
export const MAX_DIMENSION_KEYS = 1000
const DEFAULT_DIMENSION_KEYS = 100

/** GET /costs/dimensions's query string: a range as GET /costs takes it, and how many keys. */
export const costDimensionsParams = z.strictObject({
  from: instant.optional(),
  to: instant.optional(),
  limit: intParam(1, MAX_DIMENSION_KEYS, DEFAULT_DIMENSION_KEYS),
})

export interface CostDimensionsQuery {
  fromMs: number
  toMs: number
  limit: number
}

/** GET /costs/dimensions's query at `now`: the range in whole UTC hours, the 24 before `now` by default. */
export function costDimensionsQuery(now: number) {
  return costDimensionsParams.transform((q, ctx): CostDimensionsQuery => ({ ...hourRange(q, now, undefined, ctx), limit: q.limit }))
}
