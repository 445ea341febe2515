import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startClickHouseServer } from './helpers/clickhouse-server.ts'
import { csvRows, ndjsonRows, parquetRows, storedRows } from './helpers/exports.ts'
import { eventually, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * GET /export with CLICKHOUSE_URL: the server's answer passed on as it comes, the same rows
 * as embedded; and a ClickHouse that does not answer is a 503 before any byte, its slot freed.
 */

let h: Harness
let clickhouse: Awaited<ReturnType<typeof startClickHouseServer>>
beforeAll(async () => {
  clickhouse = await startClickHouseServer()
  h = await startHarness({ env: { CLICKHOUSE_URL: clickhouse.url } })
}, 60_000)
afterAll(async () => {
  await h?.close()
  await clickhouse?.stop()
})

describe('GET /export on a ClickHouse server', () => {
  it('answers every format with the stored rows', async () => {
    const user = unique('served')
    const key = await h.key(user)
    for (let i = 0; i < 5; i++) expect((await h.post('/events', llmCall(`agent-${i % 2}`, { metadata: { i, text: 'a, "b"\nc' } }), key)).statusCode).toBe(200)
    await h.flush()
    const stored = await storedRows(h.services.clickhouse, user)
    expect(stored).toHaveLength(5)
    const get = (format: string) => h.app.inject({ method: 'GET', url: `/export?format=${format}`, headers: { 'x-api-key': key } })
    expect(csvRows((await get('csv')).body).rows).toEqual(stored)
    expect(ndjsonRows((await get('ndjson')).body)).toEqual(stored)
    expect((await parquetRows(h.services.clickhouse, (await get('parquet')).rawPayload)).rows).toEqual(stored)
  })

  it('is a 503 store_unavailable when ClickHouse does not answer, and holds no slot', async () => {
    const key = await h.key(unique('stranded'))
    await clickhouse.stop()
    const res = await h.app.inject({ method: 'GET', url: '/export', headers: { 'x-api-key': key } })
    expect(res.statusCode).toBe(503)
    expect(res.headers['retry-after']).toBe('1')
    expect(res.json()).toMatchObject({ code: 'store_unavailable' })
    await eventually(() => (h.services.exports.running === 0 ? true : undefined))
  })
})
