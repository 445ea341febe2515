import type { ClickHouseClient } from '@clickhouse/client'
import type { z } from 'zod'
import { StoreUnavailableError } from '../errors.ts'

/**
 * Runs one parameterised SELECT ({name:Type} placeholders, values bound by ClickHouse,
 * never concatenated) and checks every row against a schema at the boundary.
 */
export async function select<S extends z.ZodType>(
  client: ClickHouseClient,
  query: string,
  query_params: Record<string, unknown>,
  row: S,
): Promise<z.output<S>[]> {
  let rows: unknown[]
  try {
    const rs = await client.query({ query, query_params, format: 'JSONEachRow' })
    rows = await rs.json()
  } catch (err) {
    throw new StoreUnavailableError('ClickHouse query failed', { cause: err })
  }
  return rows.map((r) => row.parse(r))
}

export async function insert(client: ClickHouseClient, table: string, values: readonly object[]): Promise<void> {
  if (values.length === 0) return
  try {
    await client.insert({ table, values: values as object[], format: 'JSONEachRow' })
  } catch (err) {
    throw new StoreUnavailableError(`ClickHouse insert into ${table} failed`, { cause: err })
  }
}
