import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import type { AgentRef } from '../hot-state/agent-ref.ts'
import type { EventSink } from '../hot-state/types.ts'
import { fromChDateTime } from './clickhouse.ts'
import { fingerprintOf } from '../hot-state/dedup.ts'
import { clickhouseFailure } from './failures.ts'
import { select } from './query.ts'

const int = z.coerce.number().int()

/** A row of the events table as ClickHouse returns it (JSON: UUIDs and times as text). */
const eventRow = z.object({
  user_id: z.string(),
  agent_id: z.string(),
  timestamp: z.string(),
  event_id: z.string(),
  event_type: z.enum(['llm_call', 'tool_call', 'agent_start', 'agent_end']),
  model: z.string(),
  input_tokens: int,
  output_tokens: int,
  cache_read_tokens: int,
  cache_write_tokens: int,
  quantities: z.record(z.string(), int).default({}),
  unpriced_quantities: z.array(z.string()).default([]),
  service_tier: z.string().default(''),
  tool_name: z.string().nullable(),
  run_id: z.string().default(''),
  metadata: z.string(),
  cost_nano: int,
  price_fallback: z.coerce.boolean(),
})

/** The event as the read API shows it. */
const storedEvent = eventRow.transform((r) => ({
  event_id: r.event_id,
  agent_id: r.agent_id,
  event_type: r.event_type,
  model: r.model === '' ? null : r.model,
  input_tokens: r.input_tokens,
  output_tokens: r.output_tokens,
  cache_read_tokens: r.cache_read_tokens,
  cache_write_tokens: r.cache_write_tokens,
  quantities: r.quantities,
  unpriced_quantities: r.unpriced_quantities,
  service_tier: r.service_tier === '' ? null : r.service_tier,
  tool_name: r.tool_name,
  run_id: r.run_id === '' ? null : r.run_id,
  metadata: r.metadata === '' ? {} : (JSON.parse(r.metadata) as Record<string, unknown>),
  cost_nano: r.cost_nano,
  price_fallback: r.price_fallback,
  timestamp: fromChDateTime(r.timestamp),
}))

export type StoredEvent = z.output<typeof storedEvent>

const EVENT_COLUMNS = `user_id, agent_id, timestamp, event_id, event_type, model, input_tokens, output_tokens,
  cache_read_tokens, cache_write_tokens, quantities, unpriced_quantities, service_tier, tool_name, run_id, metadata, cost_nano, price_fallback`

/** The user's most recent events across all agents, newest first. */
export function recentEvents(client: ClickHouseClient, userId: string, limit: number, sinceMs = 0): Promise<StoredEvent[]> {
  return select(
    client,
    `SELECT ${EVENT_COLUMNS} FROM events
     WHERE user_id = {user:String} AND timestamp >= fromUnixTimestamp64Milli({since:Int64})
     ORDER BY timestamp DESC, event_id DESC LIMIT {limit:UInt32}`,
    { user: userId, limit, since: sinceMs },
    storedEvent,
  )
}

/** One agent's events since `sinceMs` and before the `before` timestamp (a page cursor), newest first. */
export function agentEvents(
  client: ClickHouseClient,
  q: { userId: string; agentId: string; sinceMs: number; before: string | undefined; limit: number },
): Promise<StoredEvent[]> {
  return select(
    client,
    `SELECT ${EVENT_COLUMNS} FROM events
     WHERE user_id = {user:String} AND agent_id = {agent:String}
       AND timestamp >= fromUnixTimestamp64Milli({since:Int64})
       ${q.before === undefined ? '' : "AND timestamp < parseDateTime64BestEffort({before:String}, 6, 'UTC')"}
     ORDER BY timestamp DESC, event_id DESC LIMIT {limit:UInt32}`,
    { user: q.userId, agent: q.agentId, since: q.sinceMs, before: q.before, limit: q.limit },
    storedEvent,
  )
}

/**
 * One run's events, newest first, before the `before` timestamp (a page cursor): of the
 * agents that sent its events and within its first and last event's times, which the
 * table's primary key (user_id, agent_id, timestamp, …) narrows to, so only the run's span
 * of those agents is read, never the user's history.
 */
export function runEvents(
  client: ClickHouseClient,
  q: { userId: string; runId: string; agentIds: readonly string[]; fromUs: number; untilUs: number; before: string | undefined; limit: number },
): Promise<StoredEvent[]> {
  return select(
    client,
    `SELECT ${EVENT_COLUMNS} FROM events
     WHERE user_id = {user:String} AND agent_id IN {agents:Array(String)}
       AND timestamp >= fromUnixTimestamp64Micro({from:Int64}) AND timestamp <= fromUnixTimestamp64Micro({until:Int64})
       ${q.before === undefined ? '' : "AND timestamp < parseDateTime64BestEffort({before:String}, 6, 'UTC')"}
       AND run_id = {run:String}
     ORDER BY timestamp DESC, event_id DESC LIMIT {limit:UInt32}`,
    { user: q.userId, agents: [...q.agentIds], from: q.fromUs, until: q.untilUs, before: q.before, run: q.runId, limit: q.limit },
    storedEvent,
  )
}

const agentTotalRow = z.object({ agent_id: z.string(), cost_nano: int, llm_calls: int })
export type AgentTotal = z.output<typeof agentTotalRow>

/** Agents of the user with events since `sinceMs`, with their totals. */
export function agentTotals(client: ClickHouseClient, userId: string, sinceMs: number, agentId?: string): Promise<AgentTotal[]> {
  return select(
    client,
    `SELECT agent_id, sum(cost_nano) AS cost_nano, countIf(event_type = 'llm_call') AS llm_calls
     FROM events
     WHERE user_id = {user:String} AND timestamp >= fromUnixTimestamp64Milli({since:Int64})
       ${agentId === undefined ? '' : 'AND agent_id = {agent:String}'}
     GROUP BY agent_id`,
    { user: userId, since: sinceMs, agent: agentId },
    agentTotalRow,
  )
}

const modelCostRow = z.object({ model: z.string(), cost_nano: int, llm_calls: int, input_tokens: int, output_tokens: int })
export type ModelCost = z.output<typeof modelCostRow>

/** One agent's llm_call cost by model since `sinceMs`, most expensive first. */
export function costByModel(client: ClickHouseClient, userId: string, agentId: string, sinceMs: number): Promise<ModelCost[]> {
  return select(
    client,
    `SELECT model, sum(cost_nano) AS cost_nano, count() AS llm_calls,
            sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens
     FROM events
     WHERE user_id = {user:String} AND agent_id = {agent:String} AND event_type = 'llm_call'
       AND timestamp >= fromUnixTimestamp64Milli({since:Int64})
     GROUP BY model ORDER BY cost_nano DESC, model`,
    { user: userId, agent: agentId, since: sinceMs },
    modelCostRow,
  )
}

export async function agentHasEvents(client: ClickHouseClient, userId: string, agentId: string): Promise<boolean> {
  const rows = await select(
    client,
    'SELECT 1 AS found FROM events WHERE user_id = {user:String} AND agent_id = {agent:String} LIMIT 1',
    { user: userId, agent: agentId },
    z.object({ found: int }),
  )
  return rows.length > 0
}

const hourRow = z.object({ hour_ms: int, cost_nano: int, llm_calls: int, input_tokens: int, output_tokens: int })
export type HourRow = z.output<typeof hourRow>

/** Hourly sums from the materialized view (sql/0002), for UTC hours since `sinceMs`. */
export function hourlyCost(client: ClickHouseClient, userId: string, agentId: string, sinceMs: number): Promise<HourRow[]> {
  return select(
    client,
    `SELECT toUnixTimestamp(hour) * 1000 AS hour_ms, sum(cost_nano) AS cost_nano, sum(llm_calls) AS llm_calls,
            sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens
     FROM hourly_cost
     WHERE user_id = {user:String} AND agent_id = {agent:String}
       AND hour >= toDateTime(intDiv({since:Int64}, 1000), 'UTC')
     GROUP BY hour_ms ORDER BY hour_ms`,
    { user: userId, agent: agentId, since: sinceMs },
    hourRow,
  )
}

const minuteRow = z.object({ user_id: z.string(), agent_id: z.string(), minute: int, cost_nano: int, llm_calls: int })
export type MinuteRow = z.output<typeof minuteRow>

/**
 * Per-minute totals of a batch of agents since `sinceMs`, for loading them into the hot state.
 * An event_id stored twice for an agent (a retry whose first insert failed ambiguously)
 * counts once, as the hot state's dedup does.
 */
export function windowMinutes(client: ClickHouseClient, sinceMs: number, refs: readonly AgentRef[], excluded: readonly string[] = []): Promise<MinuteRow[]> {
  return minuteSums(client, sinceMs, `${agentsFilter(refs)} ${excludedFilter(excluded)}`, { ...agentsParams(refs), ...excludedParams(excluded) }, true)
}

/**
 * The same for the fleets of a batch of users (types.ts FLEET): the sums of all their
 * agents' minutes, as rows of the agent ''. (`excluded`: event ids left out.)
 */
export function fleetMinutes(client: ClickHouseClient, sinceMs: number, userIds: readonly string[], excluded: readonly string[] = []): Promise<MinuteRow[]> {
  return minuteSums(client, sinceMs, `AND user_id IN {users:Array(String)} ${excludedFilter(excluded)}`, { users: [...userIds], ...excludedParams(excluded) }, false)
}

/** Leaves out events by id: those the caller counts from the journal (ingest/rebuild.ts loadAgents). */
function excludedFilter(excluded: readonly string[]): string {
  return excluded.length > 0 ? 'AND event_id NOT IN {excluded:Array(UUID)}' : ''
}

function excludedParams(excluded: readonly string[]): { excluded?: string[] } {
  return excluded.length > 0 ? { excluded: [...excluded] } : {}
}

function minuteSums(client: ClickHouseClient, sinceMs: number, filter: string, params: object, perAgent: boolean): Promise<MinuteRow[]> {
  return bucketSums(client, { sinceMs, untilMs: null, minutes: 1, filter, params, perAgent }, minuteRow)
}

const quarterRow = z.object({ user_id: z.string(), agent_id: z.string(), minute: int, cost_nano: int }).transform(({ minute, ...r }) => ({ ...r, quarter: minute / 15 }))
export type QuarterRow = z.output<typeof quarterRow>

/**
 * What a batch of agents (`refs`), or the fleets of a batch of users (`fleets`: rows of the
 * agent ''), spent per quarter of an hour (floor(minute / 15)) in [fromMs, untilMs), each
 * event once: the history their period budgets start from (hot-state/period-tallies.ts).
 */
export function spendByQuarter(client: ClickHouseClient, fromMs: number, untilMs: number, of: { refs: readonly AgentRef[] } | { fleets: readonly string[] }): Promise<QuarterRow[]> {
  const where = 'refs' in of ? { filter: agentsFilter(of.refs), params: agentsParams(of.refs), perAgent: true } : { filter: 'AND user_id IN {users:Array(String)}', params: { users: [...of.fleets] }, perAgent: false }
  return bucketSums(client, { sinceMs: fromMs, untilMs, minutes: 15, ...where }, quarterRow)
}

/** Spend per bucket of `minutes` (its first minute), per agent or per user, each event once (its first cost and minute). */
function bucketSums<S extends z.ZodType>(
  client: ClickHouseClient,
  o: { sinceMs: number; untilMs: number | null; minutes: number; filter: string; params: object; perAgent: boolean },
  row: S,
): Promise<Array<z.output<S>>> {
  const bucket = o.minutes === 1 ? 'first_minute' : `intDiv(first_minute, ${o.minutes}) * ${o.minutes}`
  return select(
    client,
    `SELECT user_id, ${o.perAgent ? 'agent_id' : "'' AS agent_id"}, ${bucket} AS minute, sum(cost) AS cost_nano, countIf(llm) AS llm_calls
     FROM (
       SELECT user_id, agent_id, min(intDiv(toUnixTimestamp64Milli(timestamp), 60000)) AS first_minute,
              argMin(cost_nano, timestamp) AS cost, argMin(event_type = 'llm_call', timestamp) AS llm
       FROM events WHERE timestamp >= fromUnixTimestamp64Milli({since:Int64}) ${o.untilMs === null ? '' : 'AND timestamp < fromUnixTimestamp64Milli({until:Int64})'} ${o.filter}
       GROUP BY user_id, agent_id, event_id
     )
     GROUP BY user_id, ${o.perAgent ? 'agent_id, ' : ''}minute ORDER BY minute`,
    { since: o.sinceMs, ...(o.untilMs === null ? {} : { until: o.untilMs }), ...o.params },
    row,
  )
}

const seenRow = z.object({ user_id: z.string(), agent_id: z.string(), event_id: z.string(), cost_nano: int, minute: int })
export type SeenRow = z.output<typeof seenRow>

/** Event ids accepted since `sinceMs` of a batch of agents, for loading them into the hot state. */
export function seenEvents(client: ClickHouseClient, sinceMs: number, refs: readonly AgentRef[]): Promise<SeenRow[]> {
  return select(
    client,
    `SELECT user_id, agent_id, toString(event_id) AS event_id, argMin(cost_nano, timestamp) AS cost_nano,
            min(intDiv(toUnixTimestamp64Milli(timestamp), 60000)) AS minute
     FROM events WHERE timestamp >= fromUnixTimestamp64Milli({since:Int64}) ${agentsFilter(refs)}
     GROUP BY user_id, agent_id, event_id`,
    { since: sinceMs, ...agentsParams(refs) },
    seenRow,
  )
}

/**
 * Rows per read of a whole-window scan. A read's result is held whole (chDB materialises
 * it), and the engine keeps the memory its larger reads used: with 10 M events, reads of
 * 500,000 rows peaked at 1.52 GB RSS, 200,000 at 1.36 GB, 100,000 at 1.25 GB, all ready in
 * 18-24 s (bench/history.ts).
 */
const SCAN_ROWS = 100_000

/** One read of a scan: consecutive agents of one user, or a time slice of one agent (microseconds, from inclusive, until exclusive). */
interface ScanBatch {
  userId: string
  from: string
  to: string
  slice?: { fromUs: number | null; untilUs: number | null }
}

/**
 * Every event since `sinceMs`, agent by agent (all of an agent's events in one run, oldest
 * first): `onAgent` is called once per agent and returns where its events go. For rebuilding
 * the in-process hot state without holding the window in memory: ClickHouse computes each
 * event id's fingerprint, and the rows come as RowBinary in reads of about SCAN_ROWS rows,
 * whole agents each, in the table's own order (no sort). Ten million events as JSON objects
 * took the process past its heap. An agent with more events than a read is read
 * in time slices of about that many (at its timestamps' quantiles), its run going on from
 * one read to the next: one agent of 10 M events was one 450 MB read.
 */
export async function scanWindow(
  client: ClickHouseClient,
  sinceMs: number,
  onAgent: (ref: AgentRef) => EventSink,
  scanRows = SCAN_ROWS,
): Promise<{ events: number; reads: number }> {
  const agents = await select(
    client,
    `SELECT user_id, agent_id, count() AS events FROM events
     WHERE timestamp >= fromUnixTimestamp64Milli({since:Int64})
     GROUP BY user_id, agent_id ORDER BY user_id, agent_id`,
    { since: sinceMs },
    z.object({ user_id: z.string(), agent_id: z.string(), events: int }),
  )
  // Consecutive agents of one user, up to scanRows events; an agent with more, in slices.
  const batches: ScanBatch[] = []
  for (let i = 0; i < agents.length; ) {
    const first = agents[i]!
    if (first.events > scanRows) {
      batches.push(...(await timeSlices(client, sinceMs, first.user_id, first.agent_id, Math.ceil(first.events / scanRows))))
      i++
      continue
    }
    let j = i
    let rows = 0
    while (j < agents.length && agents[j]!.user_id === first.user_id && agents[j]!.events <= scanRows && (j === i || rows + agents[j]!.events <= scanRows)) rows += agents[j++]!.events
    batches.push({ userId: first.user_id, from: first.agent_id, to: agents[j - 1]!.agent_id })
    i = j
  }
  // Each read is in flight while the one before it is decoded: the engine works off the main thread.
  let events = 0
  const run: Run = { userId: '', agentId: '', sink: null }
  let next = batches.length > 0 ? scanRead(client, sinceMs, batches[0]!) : null
  for (let b = 0; b < batches.length; b++) {
    const body = await next!
    next = b + 1 < batches.length ? scanRead(client, sinceMs, batches[b + 1]!) : null
    events += decodeRuns(body, batches[b]!.userId, onAgent, run)
  }
  return { events, reads: batches.length }
}

/** `slices` reads of one agent's window, split at its timestamps' quantiles (approximate: about equal reads). */
async function timeSlices(client: ClickHouseClient, sinceMs: number, userId: string, agentId: string, slices: number): Promise<ScanBatch[]> {
  const levels = Array.from({ length: slices - 1 }, (_, k) => (k + 1) / slices)
  const [row] = await select(
    client,
    `SELECT arraySort(arrayDistinct(arrayMap(x -> toInt64(x), quantiles(${levels.join(', ')})(toUnixTimestamp64Micro(timestamp))))) AS cuts
     FROM events
     WHERE user_id = {user:String} AND agent_id = {agent:String} AND timestamp >= fromUnixTimestamp64Milli({since:Int64})`,
    { user: userId, agent: agentId, since: sinceMs },
    z.object({ cuts: z.array(z.coerce.number()) }),
  )
  const cuts = row?.cuts ?? []
  return [null, ...cuts].map((fromUs, k) => ({ userId, from: agentId, to: agentId, slice: { fromUs, untilUs: cuts[k] ?? null } }))
}

async function scanRead(client: ClickHouseClient, sinceMs: number, batch: ScanBatch): Promise<Buffer> {
  const slice = batch.slice
  const inSlice =
    (slice?.fromUs != null ? ' AND timestamp >= fromUnixTimestamp64Micro({slice_from:Int64})' : '') +
    (slice?.untilUs != null ? ' AND timestamp < fromUnixTimestamp64Micro({slice_until:Int64})' : '')
  try {
    const { stream } = await client.exec({
      query: `SELECT agent_id,
                     CAST(substring(SHA256(concat(user_id, '\\0', agent_id, '\\0', toString(event_id))), 1, 16) AS FixedString(16)),
                     cost_nano, toUInt32(intDiv(toUnixTimestamp64Milli(timestamp), 60000)), toUInt8(event_type = 'llm_call')
              FROM events
              WHERE user_id = {user:String} AND agent_id >= {from:String} AND agent_id <= {to:String}
                AND timestamp >= fromUnixTimestamp64Milli({since:Int64})${inSlice}
              ORDER BY agent_id, timestamp
              FORMAT RowBinary`,
      query_params: { user: batch.userId, from: batch.from, to: batch.to, since: sinceMs, slice_from: slice?.fromUs, slice_until: slice?.untilUs },
    })
    const chunks: Buffer[] = []
    for await (const chunk of stream) chunks.push(chunk as Buffer)
    return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)
  } catch (err) {
    throw clickhouseFailure(err, 'query')
  }
}

/** The agent whose events the last read ended with: a slice of the same agent goes on with its sink. */
interface Run {
  userId: string
  agentId: string
  sink: EventSink | null
}

/** Reads RowBinary rows (agent_id String, fingerprint FixedString(16), cost Int64, minute UInt32, llm UInt8). */
function decodeRuns(body: Buffer, userId: string, onAgent: (ref: AgentRef) => EventSink, run: Run): number {
  let at = 0
  let rows = 0
  let agentStart = 0
  let agentLength = -1
  let sink = run.sink
  while (at < body.length) {
    // agent_id: a LEB128 length, then its bytes; a new agent when they differ from the last row's.
    let len = 0
    for (let shift = 0; ; shift += 7) {
      const b = body[at++]!
      len |= (b & 0x7f) << shift
      if (b < 0x80) break
    }
    if (len !== agentLength || !sameBytes(body, agentStart, at, len)) {
      const agentId = body.toString('utf8', at, at + len)
      if (run.sink === null || run.userId !== userId || run.agentId !== agentId) {
        run.userId = userId
        run.agentId = agentId
        run.sink = onAgent({ userId, agentId })
      }
      sink = run.sink
      agentStart = at
      agentLength = len
    }
    at += len
    const fp = fingerprintOf(body, at)
    // cost_nano: an Int64 that a cost never takes past 2^53.
    const costNano = body.readUInt32LE(at + 16) + body.readInt32LE(at + 20) * 2 ** 32
    const minute = body.readUInt32LE(at + 24)
    const llm = body[at + 28]!
    at += 29
    sink!(fp, costNano, minute, llm)
    rows++
  }
  return rows
}

/** Whether body[a, a + len) and body[b, b + len) hold the same bytes (short ids: a loop beats a native call). */
function sameBytes(body: Buffer, a: number, b: number, len: number): boolean {
  for (let k = 0; k < len; k++) if (body[a + k] !== body[b + k]) return false
  return true
}

/**
 * Narrows a rebuild query to a batch of agents (on-demand loads), or leaves it whole. By
 * users and by agents, which the primary key prunes on; a row of another pair (a user of
 * the batch with an agent id of another user's) may come back, and the caller keeps only
 * the pairs it asked for.
 */
export function agentsFilter(refs: readonly AgentRef[] | undefined): string {
  return refs ? 'AND user_id IN {users:Array(String)} AND agent_id IN {agents:Array(String)}' : ''
}

export function agentsParams(refs: readonly AgentRef[] | undefined): { users?: string[]; agents?: string[] } {
  return refs ? { users: [...new Set(refs.map((r) => r.userId))], agents: [...new Set(refs.map((r) => r.agentId))] } : {}
}
