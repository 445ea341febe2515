import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { MAX_METADATA_KEY, type CostCursor, type CostDimensionsQuery, type CostsQuery, type Dimension } from '../schemas/costs.ts'
import { select } from './query.ts'

/** One group of GET /costs: its value of each dimension (null: the events without it) and what its events add up to. */
export interface CostGroup {
  values: Array<string | null>
  costNano: string
  llmCalls: number
  inputTokens: number
  outputTokens: number
  events: number
}

const int = z.coerce.number().int()
const row = z.object({
  g0: z.string().nullable(),
  g1: z.string().nullable().optional(),
  cost: z.string().regex(/^-?\d+$/),
  t_llm_calls: int,
  t_input_tokens: int,
  t_output_tokens: int,
  t_events: int,
})

/*
 * Where a query is answered from, the cheapest table that has what it groups and filters by:
 *
 * - hourly_cost (sql/0002): by agent, model, UTC hour and day;
 * - hourly_dimensions (sql/0019): the same for one metadata key's values, and the group of
 *   the events without the key as hourly_cost's total less the keyed rows;
 * - events: anything else (a run, two metadata keys), read whole over the range.
 *
 * Each is a subquery of the same columns (agent_id, model, hour, run_id, value: the metadata
 * value of the one key, or NULL; the sums), so the grouping, the order and the page are
 * written once. Ranges are whole UTC hours (schemas/costs.ts), so the three agree exactly.
 */

const SUMS = `cost_nano, toInt64(llm_calls) AS llm_calls, toInt64(input_tokens) AS input_tokens, toInt64(output_tokens) AS output_tokens, toInt64(events) AS events`
const NEGATED = `-cost_nano, -toInt64(llm_calls), -toInt64(input_tokens), -toInt64(output_tokens), -toInt64(events)`
const RANGE = 'hour >= toDateTime({from:Int64}) AND hour < toDateTime({to:Int64})'

/** The metadata keys a query names, each once: in its groups, then in its filters. */
function metadataKeys(q: CostsQuery): string[] {
  const keys = [...q.groupBy.flatMap((d) => (d.kind === 'metadata' ? [d.key] : [])), ...q.metadata.map((f) => f.key)]
  return [...new Set(keys)]
}

/** A dimension's value as SQL over a source's columns, as Nullable(String). */
function valueOf(d: Dimension, raw: boolean, key: (k: string) => string): string {
  switch (d.kind) {
    case 'agent':
      return 'agent_id'
    case 'model':
      return "nullIf(model, '')"
    case 'day':
      return 'toString(toDate(hour))'
    case 'hour':
      return "formatDateTime(hour, '%Y-%m-%dT%H:00:00Z')"
    case 'run':
      return "nullIf(run_id, '')"
    case 'metadata':
      return raw ? `if(mapContains(dims, ${key(d.key)}), dims[${key(d.key)}], NULL)` : 'value'
  }
}

/**
 * The user's cost grouped as the query asks, highest cost first (a tie by the groups'
 * values, the missing one first, then by bytes), one page: `limit` groups after the
 * cursor's, and whether more follow. Every value of the query is a parameter (a metadata
 * key is any text); the SQL text is made of this function's own pieces only.
 */
export async function costsByDimension(client: ClickHouseClient, userId: string, q: CostsQuery): Promise<{ groups: CostGroup[]; more: boolean }> {
  const params: Record<string, unknown> = { user: userId, from: q.fromMs / 1000, to: q.toMs / 1000, limit: q.limit + 1 }
  const keyParams = new Map<string, string>()
  const key = (k: string) => {
    let name = keyParams.get(k)
    if (!name) {
      name = `k${keyParams.size}`
      keyParams.set(k, name)
      params[name] = k
    }
    return `{${name}:String}`
  }

  // Filters every source has.
  const common = ['user_id = {user:String}']
  if (q.agentIds.length > 0) {
    common.push('agent_id IN {agents:Array(String)}')
    params.agents = q.agentIds
  }
  if (q.models.length > 0) {
    common.push('model IN {models:Array(String)}')
    params.models = q.models
  }
  const values = (i: number, f: { values: string[] }) => {
    params[`v${i}`] = f.values
    return `{v${i}:Array(String)}`
  }

  const keys = metadataKeys(q)
  const raw = keys.length > 1 || q.groupBy.some((d) => d.kind === 'run')
  let source: string
  if (raw) {
    const where = [...common, 'timestamp >= fromUnixTimestamp64Milli({fromMs:Int64})', 'timestamp < fromUnixTimestamp64Milli({toMs:Int64})']
    params.fromMs = q.fromMs
    params.toMs = q.toMs
    q.metadata.forEach((f, i) => where.push(`mapContains(dims, ${key(f.key)}) AND dims[${key(f.key)}] IN ${values(i, f)}`))
    source = `SELECT agent_id, model, toStartOfHour(timestamp) AS hour, run_id, dims, cost_nano, toInt64(event_type = 'llm_call') AS llm_calls,
                     toInt64(input_tokens) AS input_tokens, toInt64(output_tokens) AS output_tokens, toInt64(1) AS events
              FROM events WHERE ${where.join(' AND ')}`
  } else if (keys.length === 1) {
    const k = key(keys[0]!)
    const filter = q.metadata[0]
    const keyed = [...common, RANGE, `key = ${k}`, ...(filter ? [`value IN ${values(0, filter)}`] : [])].join(' AND ')
    source = `SELECT agent_id, model, hour, '' AS run_id, toNullable(value) AS value, ${SUMS} FROM hourly_dimensions WHERE ${keyed}`
    // Grouped by the key and not filtered by it: the events without it, as one group.
    if (!filter) {
      source += `
        UNION ALL SELECT agent_id, model, hour, '', NULL, ${SUMS} FROM hourly_cost WHERE ${[...common, RANGE].join(' AND ')}
        UNION ALL SELECT agent_id, model, hour, '', NULL, ${NEGATED} FROM hourly_dimensions WHERE ${keyed}`
    }
  } else {
    source = `SELECT agent_id, model, hour, '' AS run_id, NULL AS value, ${SUMS} FROM hourly_cost WHERE ${[...common, RANGE].join(' AND ')}`
  }

  const aliases = q.groupBy.map((_, i) => `g${i}`)
  const groups = q.groupBy.map((d, i) => `${valueOf(d, raw, key)} AS g${i}`)
  const order = aliases.map((a) => `isNotNull(${a}), ifNull(${a}, '')`).join(', ')
  const rows = await select(
    client,
    `SELECT ${groups.join(', ')}, sum(cost_nano) AS cost, sum(llm_calls) AS t_llm_calls, sum(input_tokens) AS t_input_tokens,
            sum(output_tokens) AS t_output_tokens, sum(events) AS t_events
     FROM (${source})
     GROUP BY ${aliases.join(', ')}
     HAVING t_events != 0 ${q.cursor ? `AND (${after(q.cursor, order, params)})` : ''}
     ORDER BY cost DESC, ${order}
     LIMIT {limit:UInt32}`,
    params,
    row,
  )
  return {
    groups: rows.slice(0, q.limit).map((r) => ({
      values: q.groupBy.length === 1 ? [r.g0] : [r.g0, r.g1 ?? null],
      costNano: r.cost,
      llmCalls: r.t_llm_calls,
      inputTokens: r.t_input_tokens,
      outputTokens: r.t_output_tokens,
      events: r.t_events,
    })),
    more: rows.length > q.limit,
  }
}

/** The groups after the cursor's in the answer's order: a lower cost, or the same cost and later values. */
function after(c: CostCursor, order: string, params: Record<string, unknown>): string {
  params.c_cost = c.costNano
  const last = c.values.flatMap((v, i) => {
    params[`c${i}n`] = v === null ? 0 : 1
    params[`c${i}v`] = v ?? ''
    return [`{c${i}n:UInt8}`, `{c${i}v:String}`]
  })
  return `cost < {c_cost:Int64} OR (cost = {c_cost:Int64} AND (${order}) > (${last.join(', ')}))`
}

/** A metadata key of the user's events in a range, and how many of them carry it. */
export interface DimensionKey {
  key: string
  events: number
}

const keyRow = z.object({ key: z.string(), events: int })

/**
 * The metadata keys of the user's events in the range, the most used first (a tie by key),
 * from hourly_dimension_keys (sql/0022): a row per key and hour, whatever the key's values.
 * Only the keys GET /costs can group by (schemas/costs.ts: 1 to 256 characters, no control
 * characters): a key offered is one that can be asked for.
 */
export async function dimensionKeys(client: ClickHouseClient, userId: string, q: CostDimensionsQuery): Promise<DimensionKey[]> {
  return select(
    client,
    `SELECT key, sum(events) AS events
     FROM hourly_dimension_keys
     WHERE user_id = {user:String} AND ${RANGE}
       AND key != '' AND NOT match(key, {control:String})
       AND lengthUTF8(key) <= {maxKey:UInt32}
     GROUP BY key
     ORDER BY events DESC, key
     LIMIT {limit:UInt32}`,
    // C0, DEL and C1 as the schema's CONTROL; lengths in characters (code points), as zod counts them.
    { user: userId, from: q.fromMs / 1000, to: q.toMs / 1000, limit: q.limit, maxKey: MAX_METADATA_KEY, control: '[\\x{00}-\\x{1f}\\x{7f}-\\x{9f}]' },
    keyRow,
  )
}
