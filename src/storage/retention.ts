import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { select } from './query.ts'

/**
 * How long ClickHouse keeps each kind of data, in days; null keeps it forever. Each becomes a
 * TTL of the tables that hold that kind, applied at start-up when it changed: rows past it are
 * removed by ClickHouse's merges (the ALTER rewrites the TTL of the parts stored before it in
 * the background, so old rows go without waiting for a merge).
 */
export interface Retention {
  /** The events and what is read per event: the runs (EVENTS_RETENTION_DAYS). */
  readonly eventsDays: number | null
  /** The hourly cost tables GET /costs, the charts and Grafana read (HOURLY_RETENTION_DAYS). */
  readonly hourlyDays: number | null
  /** The audit log (AUDIT_RETENTION_DAYS). */
  readonly auditDays: number | null
}

export const KEEP_EVERYTHING: Retention = { eventsDays: null, hourlyDays: null, auditDays: null }

/**
 * The shortest event retention the service works with: a start rebuilds period budgets from
 * the events since the earliest period's start, and the longest period is a calendar month (31
 * days) in a time zone up to 14 hours ahead of UTC, or a rolling window of 31 days.
 */
export const MIN_EVENTS_RETENTION_DAYS = 32

/** Why a retention is refused, by setting, each reason naming what needs the data; [] when it is fine. */
export function retentionProblems(r: Retention): Array<{ setting: string; reason: string }> {
  const problems: Array<{ setting: string; reason: string }> = []
  if (r.eventsDays !== null && r.eventsDays < MIN_EVENTS_RETENTION_DAYS) {
    problems.push({
      setting: 'EVENTS_RETENTION_DAYS',
      reason: `must be at least ${MIN_EVENTS_RETENTION_DAYS}: period budgets (a calendar month in any time zone, or a rolling window of up to 31 days) are rebuilt from the events when the service starts`,
    })
  }
  if (r.hourlyDays !== null && (r.eventsDays === null || r.hourlyDays < r.eventsDays)) {
    problems.push({
      setting: 'HOURLY_RETENTION_DAYS',
      reason: `must be at least EVENTS_RETENTION_DAYS (${r.eventsDays ?? 'unset: events kept forever'}): GET /costs, the charts and Grafana read the hourly tables, and would miss spend whose events are still kept`,
    })
  }
  return problems
}

/** One setting: the tables it sets the TTL of, each by the expression of its row's time. */
interface Target {
  setting: string
  days: (r: Retention) => number | null
  tables: ReadonlyArray<{ table: string; time: string }>
}

const TARGETS: readonly Target[] = [
  {
    setting: 'retention.events',
    days: (r) => r.eventsDays,
    tables: [
      { table: 'events', time: 'toDateTime(timestamp)' },
      { table: 'runs', time: 'toDateTime(last_at)' },
    ],
  },
  {
    setting: 'retention.hourly',
    days: (r) => r.hourlyDays,
    tables: [
      { table: 'hourly_cost', time: 'hour' },
      // Materialized views with their own engine: the TTL is their inner table's.
      { table: 'hourly_dimensions', time: 'hour' },
      { table: 'hourly_dimension_keys', time: 'hour' },
    ],
  },
  { setting: 'retention.audit', days: (r) => r.auditDays, tables: [{ table: 'audit_log', time: 'toDateTime(at)' }] },
]

/** The settings whose value differs from the one schema_settings records (none recorded before the first start: ''). */
async function changedTargets(client: ClickHouseClient, retention: Retention): Promise<Array<{ target: Target; days: number | null }>> {
  const [exists] = await select(client, 'EXISTS TABLE schema_settings', {}, z.object({ result: z.coerce.number() }))
  const recorded = new Map(
    exists?.result === 1
      ? (await select(client, 'SELECT name, argMax(value, applied_at) AS value FROM schema_settings GROUP BY name', {}, z.object({ name: z.string(), value: z.string() }))).map((r) => [r.name, r.value])
      : [],
  )
  return TARGETS.map((target) => ({ target, days: target.days(retention) })).filter(({ target, days }) => (recorded.get(target.setting) ?? '') !== (days === null ? '' : String(days)))
}

const described = ({ target, days }: { target: Target; days: number | null }) => `${target.setting}: ${days === null ? 'keep everything' : `${days} days`}`

/** What applyRetention would change, as "retention.events: 90 days" lines, changing nothing. */
export async function retentionChanges(client: ClickHouseClient, retention: Retention): Promise<string[]> {
  return (await changedTargets(client, retention)).map(described)
}

/**
 * Sets the TTLs whose setting differs from the one schema_settings records, and records it.
 * Idempotent: two instances starting together may both alter a table to the same TTL.
 * Returns what it changed, as retentionChanges() describes it.
 */
export async function applyRetention(client: ClickHouseClient, retention: Retention): Promise<string[]> {
  const changes = await changedTargets(client, retention)
  for (const { target, days } of changes) {
    for (const { table, time } of target.tables) {
      const name = await storageTable(client, table)
      const ttl = days === null ? 'REMOVE TTL' : `MODIFY TTL ${time} + toIntervalDay(${days})`
      await client.command({ query: `ALTER TABLE ${name} ${ttl}` })
    }
    await client.insert({ table: 'schema_settings', values: [{ name: target.setting, value: days === null ? '' : String(days) }], format: 'JSONEachRow' })
  }
  return changes.map(described)
}

/**
 * The table that stores a view's rows (its inner table), or the table itself, quoted. The
 * inner table is the one of the same data path: chDB's database shows no table's UUID (the
 * inner table's name is `.inner_id.` and the view's UUID on a server).
 */
async function storageTable(client: ClickHouseClient, table: string): Promise<string> {
  const tables = await select(
    client,
    `SELECT name, engine, toString(uuid) AS uuid, data_paths FROM system.tables
     WHERE database = currentDatabase() AND has(
       (SELECT groupArray(arrayJoin(data_paths)) FROM system.tables WHERE database = currentDatabase() AND name = {table:String}), data_paths[1])
       OR name = {table:String}`,
    { table },
    z.object({ name: z.string(), engine: z.string(), uuid: z.string() }),
  )
  const view = tables.find((t) => t.name === table)
  if (view?.engine !== 'MaterializedView') return `\`${table}\``
  const inner = tables.find((t) => t.engine !== 'MaterializedView')
  return `\`${inner?.name ?? `.inner_id.${view.uuid}`}\``
}

/** The time of the oldest event ClickHouse keeps (epoch ms), or null when it keeps none. */
export async function oldestEventMs(client: ClickHouseClient): Promise<number | null> {
  const [row] = await select(
    client,
    'SELECT count() AS n, toUnixTimestamp64Milli(min(timestamp)) AS ms FROM events',
    {},
    z.object({ n: z.coerce.number(), ms: z.coerce.number() }),
  )
  return row && row.n > 0 ? row.ms : null
}

/**
 * The oldest event's time for /readyz and the metrics, read again at most every `maxAgeMs`
 * (the read takes the events' timestamp column), never waited on for longer than `waitMs`:
 * an answer while ClickHouse is slow or down is the last one read (null before the first).
 */
export function oldestEventReader(client: ClickHouseClient, o: { maxAgeMs?: number; waitMs?: number } = {}): () => Promise<number | null> {
  const maxAgeMs = o.maxAgeMs ?? 60_000
  const waitMs = o.waitMs ?? 1000
  let last: number | null = null
  let reading: { at: number; done: Promise<void> } | null = null
  return async () => {
    if (reading === null || Date.now() - reading.at >= maxAgeMs) {
      reading = { at: Date.now(), done: oldestEventMs(client).then((ms) => void (last = ms), () => undefined) }
    }
    let timer: NodeJS.Timeout | undefined
    await Promise.race([reading.done, new Promise((r) => (timer = setTimeout(r, waitMs)))])
    clearTimeout(timer)
    return last
  }
}
