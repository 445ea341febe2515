import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { select } from './query.ts'

/**
 * ClickHouse's own BACKUP and RESTORE of the database, to and from a directory (the File
 * engine; the embedded engine allows it anywhere, storage/clickhouse.ts), and what a backup
 * records of the database beside it.
 */

/** A path as a ClickHouse string literal: BACKUP … TO File(…) takes no bound parameter. */
function literal(text: string): string {
  return `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`
}

/** Copies every table of the client's database (parts, metadata, views) into `dir`, which must not exist yet. */
export async function backupDatabase(client: ClickHouseClient, database: string, dir: string): Promise<void> {
  await client.command({ query: `BACKUP DATABASE ${identifier(database)} TO File(${literal(dir)})` })
}

/** Creates the tables of the backup's database `from` in `into` (which has none of them), with their rows. */
export async function restoreDatabase(client: ClickHouseClient, from: string, into: string, dir: string): Promise<void> {
  const as = from === into ? '' : ` AS ${identifier(into)}`
  await client.command({ query: `RESTORE DATABASE ${identifier(from)}${as} FROM File(${literal(dir)})` })
}

/** The database the client's queries run in. */
export async function currentDatabase(client: ClickHouseClient): Promise<string> {
  const [row] = await select(client, 'SELECT currentDatabase() AS name', {}, z.object({ name: z.string() }))
  return row!.name
}

function identifier(name: string): string {
  return `\`${name.replace(/\\/g, '\\\\').replace(/`/g, '\\`')}\``
}

/** The last migration applied (schema_migrations), 0 on a database without one. */
export async function schemaVersion(client: ClickHouseClient): Promise<number> {
  const exists = await select(client, 'SELECT count() AS n FROM system.tables WHERE database = currentDatabase() AND name = {name:String}', { name: 'schema_migrations' }, z.object({ n: z.coerce.number() }))
  if (exists[0]!.n === 0) return 0
  const [row] = await select(client, 'SELECT max(version) AS version FROM schema_migrations', {}, z.object({ version: z.coerce.number() }))
  return row?.version ?? 0
}

/**
 * Those of `tables` whose rows only inserts change (engine MergeTree): a background merge of a
 * Replacing or Summing table changes its rows at any time, a restored one's too.
 */
export async function plainTables(client: ClickHouseClient, tables: readonly string[]): Promise<string[]> {
  const rows = await select(
    client,
    "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'MergeTree' AND has({tables:Array(String)}, name) ORDER BY name",
    { tables },
    z.object({ name: z.string() }),
  )
  return rows.map((r) => r.name)
}

/**
 * Rows of each of `tables` as their active parts hold them (system.parts), 0 for a table
 * without parts: what a backup of the parts copies, rows a lightweight DELETE masked included.
 */
export async function partRows(client: ClickHouseClient, tables: readonly string[]): Promise<Record<string, number>> {
  const rows = await select(
    client,
    'SELECT table, sum(rows) AS n FROM system.parts WHERE database = currentDatabase() AND active AND has({tables:Array(String)}, table) GROUP BY table',
    { tables },
    z.object({ table: z.string(), n: z.coerce.number() }),
  )
  const found = new Map(rows.map((r) => [r.table, r.n]))
  return Object.fromEntries(tables.map((t) => [t, found.get(t) ?? 0]))
}
