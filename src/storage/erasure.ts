import { hash } from 'node:crypto'
import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { toChDateTime } from './clickhouse.ts'
import { clickhouseFailure } from './failures.ts'
import { insert, select } from './query.ts'

/**
 * Every table that holds rows of a user, and how a row names its user: the one list an
 * erasure (burnrate users erase) works through. test/erasure.tables.test.ts checks it
 * against the schema the migrations build: a table that is neither here nor in
 * NO_USER_DATA fails it, so a new table cannot be left out without a word.
 *
 * `user` is the SQL expression of a row's user id. Materialized views that write to a
 * table of their own (TO …) hold nothing: their target is listed. Those with an inner
 * table (hourly_dimensions, hourly_dimension_keys) are listed by their own name, which
 * ALTER … DELETE reaches through.
 */
export const USER_DATA: readonly UserTable[] = [
  { table: 'events', user: 'user_id' },
  { table: 'hourly_cost', user: 'user_id' },
  { table: 'hourly_dimensions', user: 'user_id' },
  { table: 'hourly_dimension_keys', user: 'user_id' },
  { table: 'runs', user: 'user_id' },
  { table: 'agent_configs', user: 'user_id' },
  { table: 'pause_transitions', user: 'user_id' },
  { table: 'budget_alerts', user: 'user_id' },
  { table: 'ignored_pauses', user: 'user_id' },
  { table: 'run_stops', user: 'user_id' },
  { table: 'api_keys', user: 'user_id' },
  // A refused journal row, kept as the JSON the journal had: every journal table's rows have user_id.
  { table: 'dead_letters', user: "JSONExtractString(row, 'user_id')" },
  // Last: the records the views write while the tables above change (a key's revocation) go with them.
  { table: 'audit_log', user: 'user_id' },
]

/** Tables that hold nothing of any user, each with why. */
export const NO_USER_DATA: Readonly<Record<string, string>> = {
  schema_migrations: 'the migrations applied',
  schema_settings: 'the settings of the schema applied at start-up (retention TTLs)',
  schema_lock: 'who holds the lock migrations are applied under (an instance, never a user)',
}

export interface UserTable {
  table: string
  user: string
}

/**
 * The subject an erasure is recorded under: SHA-256 of the user id, never the id itself,
 * so an operator can show that a given user was erased (hash the id, look the subject up)
 * while the record names nobody to whoever reads it without the id.
 */
export function erasureSubject(userId: string): string {
  return `sha256:${userHash(userId)}`
}

function userHash(userId: string): string {
  return hash('sha256', userId, 'hex')
}

/**
 * The rows of the user in each table, by table. Matched by the hash of the user id, as the
 * deletion matches them (see deleteUserRows): one expression, the same rows counted and deleted.
 */
export async function countUserRows(client: ClickHouseClient, userId: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {}
  for (const { table, user } of USER_DATA) {
    const [row] = await select(client, `SELECT count() AS n FROM ${table} WHERE ${matches(user)}`, { hash: userHash(userId) }, z.object({ n: z.coerce.number() }))
    counts[table] = row?.n ?? 0
  }
  return counts
}

/**
 * Deletes the user's rows from every table, each DELETE waited for (mutations_sync): the
 * parts that held them are rewritten without them, projections included. The statement
 * holds the hash of the id, never the id: ClickHouse keeps a mutation's text in the table's
 * directory (mutation_<n>.txt) long after it is done.
 */
export async function deleteUserRows(client: ClickHouseClient, userId: string): Promise<void> {
  for (const { table, user } of USER_DATA) {
    try {
      await client.command({
        query: `ALTER TABLE ${table} DELETE WHERE ${matches(user)}`,
        query_params: { hash: userHash(userId) },
        clickhouse_settings: { mutations_sync: '2' },
      })
    } catch (err) {
      throw clickhouseFailure(err, `delete from ${table}`)
    }
  }
}

function matches(user: string): string {
  return `lower(hex(SHA256(${user}))) = {hash:String}`
}

/**
 * The storage tables (MergeTree) behind USER_DATA: the tables, and the inner tables of views.
 * An inner table is named by an id ClickHouse keeps to itself (system.tables shows the view's
 * uuid as zero on chDB 26.7): every inner table of the database is taken, all of them views
 * of the events.
 */
async function storageTables(client: ClickHouseClient): Promise<string[]> {
  const rows = await select(
    client,
    `SELECT name FROM system.tables
     WHERE database = currentDatabase() AND engine LIKE '%MergeTree' AND (name IN {names:Array(String)} OR startsWith(name, '.inner'))`,
    { names: USER_DATA.map((t) => t.table) },
    z.object({ name: z.string() }),
  )
  return rows.map((r) => r.name)
}

/**
 * The parts a DELETE replaced stay on disk, inactive, until the table's cleanup removes them:
 * every 30–40 s by default, and up to every 300 s on a table that sat idle. sql/0025 has the
 * tables look each second; the inner tables of views cannot be named in a migration (their
 * names hold an id ClickHouse gave them), so they get the same settings here, at start-up.
 */
export async function shortenCleanup(client: ClickHouseClient): Promise<void> {
  for (const table of await storageTables(client)) {
    if (!table.startsWith('.inner')) continue
    await client.command({ query: `ALTER TABLE \`${table}\` MODIFY SETTING ${CLEANUP_SETTINGS}` })
  }
}

const CLEANUP_SETTINGS = 'cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1'

/**
 * Waits until the parts inactive now (those the DELETEs replaced among them) are gone from
 * disk: resolves with how many there were, throws once `timeoutMs` passed. A ClickHouse server
 * keeps them old_parts_lifetime (480 s by default) first; chDB does not keep them.
 */
export async function waitForReplacedParts(client: ClickHouseClient, timeoutMs: number): Promise<number> {
  const tables = await storageTables(client)
  const inactive = () =>
    select(
      client,
      `SELECT table, name FROM system.parts WHERE database = currentDatabase() AND NOT active AND table IN {tables:Array(String)}`,
      { tables },
      z.object({ table: z.string(), name: z.string() }),
    )
  const replaced = new Set((await inactive()).map((p) => `${p.table}/${p.name}`))
  const deadline = Date.now() + timeoutMs
  for (let left = replaced.size; left > 0; ) {
    if (Date.now() > deadline) throw new Error(`${left} replaced parts of the erased rows are still on disk after ${timeoutMs} ms (old_parts_lifetime of the tables?)`)
    await new Promise((r) => setTimeout(r, 200))
    left = (await inactive()).filter((p) => replaced.has(`${p.table}/${p.name}`)).length
  }
  return replaced.size
}

/** The agent ids the user's rows name (for the hot state's keys, which are named by agent). */
export async function userAgentIds(client: ClickHouseClient, userId: string): Promise<string[]> {
  const rows = await select(
    client,
    `SELECT DISTINCT agent_id FROM (
       SELECT agent_id FROM events WHERE user_id = {user:String}
       UNION ALL SELECT agent_id FROM agent_configs WHERE user_id = {user:String}
       UNION ALL SELECT agent_id FROM pause_transitions WHERE user_id = {user:String})`,
    { user: userId },
    z.object({ agent_id: z.string() }),
  )
  return rows.map((r) => r.agent_id)
}

/**
 * The one record an erasure leaves in the audit log: under the subject (erasureSubject), who
 * ran it, when, and how many of each kind it removed; nothing else of the user.
 */
export function recordErasure(client: ClickHouseClient, o: { userId: string; actor: string; at: number; removed: Record<string, number> }): Promise<void> {
  return insert(client, 'audit_log', [
    {
      user_id: erasureSubject(o.userId),
      at: toChDateTime(o.at),
      seq: o.at * 1000,
      agent_id: '',
      action: 'user_erased',
      reason: 'erasure',
      actor: o.actor,
      details: JSON.stringify({ removed: o.removed }),
    },
  ])
}
