import { randomUUID } from 'node:crypto'
import { request, type IncomingMessage } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MAX_EXPORT_DAYS } from '../src/schemas/export.ts'
import { eventually, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'
import { COLUMNS, csvRows, isoMicros, ndjsonRows, parquetRows, sameRows, seedEvents, storedRows, usdText } from './helpers/exports.ts'

/**
 * GET /export against the real engine: each format read back and compared, row by row, with
 * the events table; tenancy; the range and its bounds; bad parameters; the concurrency limit;
 * a client that goes away mid-export.
 */

let h: Harness
let base: string
beforeAll(async () => {
  h = await startHarness()
  base = await h.listen()
})
afterAll(async () => {
  await h?.close()
})

const HOUR_US = 3_600_000_000

/** GET /export (through inject: the whole body). */
async function exportOf(key: string, query: string) {
  await h.flush()
  return h.app.inject({ method: 'GET', url: `/export${query}`, headers: { 'x-api-key': key } })
}

/** The export's metric, by format and outcome. */
async function outcomes(format: string, outcome: string): Promise<number> {
  const metric = await h.services.metrics.exports.get()
  return metric.values.find((v) => v.labels.format === format && v.labels.outcome === outcome)?.value ?? 0
}

/** Export queries ClickHouse is running now. */
async function runningExportQueries(): Promise<number> {
  const rs = await h.services.clickhouse.query({
    query: "SELECT count() AS n FROM system.processes WHERE query LIKE '%AS cost_usd%' AND query_id != queryID()",
    format: 'JSONEachRow',
  })
  return Number((await rs.json<{ n: string }>())[0]!.n)
}

/** A real HTTP request whose response the test reads (or not) as it likes. */
function open(path: string, key: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, { headers: { 'x-api-key': key }, agent: false }, resolve)
    req.on('error', reject)
    req.end()
  })
}

async function readAll(res: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of res) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

describe('GET /export: what is exported', () => {
  const user = unique('exporter')
  let key: string
  const metadata = [
    { note: 'a, b and "c"\nand a second line', emoji: '€ 日本語 🚀', nested: { list: [1, 'x,y', null], quote: '\'"' } },
    { tab: 'a\tb', cr: 'line\r\nline', backslash: 'C:\\path\\to', empty: '' },
    {},
  ]
  beforeAll(async () => {
    key = await h.key(user)
    const other = await h.key(unique('other'))
    const run = randomUUID()
    const events = [
      { agent_id: 'researcher', event_type: 'agent_start', run_id: run },
      llmCall('researcher', { run_id: run, metadata: metadata[0] }),
      llmCall('researcher', { model: 'no-such-model-anywhere', metadata: metadata[1] }),
      {
        agent_id: 'writer, "quoted"',
        event_type: 'llm_call',
        model: 'claude-sonnet-4-5',
        provider: 'anthropic',
        service_tier: 'flex',
        usage: { input_tokens: 100, output_tokens: 50, cache_creation_input_tokens: 300, cache_read_input_tokens: 1000, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 } },
        metadata: metadata[2],
      },
      { agent_id: 'researcher', event_type: 'tool_call', tool_name: 'web.search', run_id: run },
      { agent_id: 'agent-ünïcødé', event_type: 'agent_end' },
    ]
    for (const e of events) expect((await h.post('/events', e, key)).statusCode).toBe(200)
    // Another user's events, at the same times: never in this user's export.
    for (const e of events) expect((await h.post('/events', e, other)).statusCode).toBe(200)
    await h.flush()
  })

  it('NDJSON: every stored event, every field, in order', async () => {
    const stored = await storedRows(h.services.clickhouse, user)
    expect(stored).toHaveLength(6)
    const res = await exportOf(key, '?format=ndjson')
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/x-ndjson')
    const rows = ndjsonRows(res.body)
    expect(rows).toEqual(stored)
    expect(rows.map((r) => Object.keys(r))).toEqual(rows.map(() => COLUMNS))
    // What the fields hold, beyond being the stored ones.
    expect(rows.map((r) => JSON.parse(r.metadata))).toEqual([{}, metadata[0], metadata[1], metadata[2], {}, {}])
    expect(rows[1]).toMatchObject({ cost_usd: '0.0075', cost_nano: 7_500_000, model: 'gpt-4o', quantities: { input_tokens: 1000, output_tokens: 500 }, price_fallback: false })
    expect(rows[2]).toMatchObject({ model: 'no-such-model-anywhere', price_fallback: true })
    expect(rows[3]).toMatchObject({ agent_id: 'writer, "quoted"', service_tier: 'flex', unpriced_quantities: ['service_tier'] })
    expect(Object.keys(rows[3]!.quantities).length).toBeGreaterThan(2)
    expect(rows[4]).toMatchObject({ event_type: 'tool_call', tool_name: 'web.search', run_id: rows[0]!.run_id, model: null })
    expect(rows[5]).toMatchObject({ agent_id: 'agent-ünïcødé', run_id: null, tool_name: null, service_tier: null })
    expect(rows.every((r) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/.test(r.timestamp))).toBe(true)
  })

  it('CSV (the default): a header row, then the same rows; commas, quotes, newlines and unicode survive', async () => {
    const stored = await storedRows(h.services.clickhouse, user)
    const res = await exportOf(key, '')
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8; header=present')
    const { header, rows } = csvRows(res.body)
    expect(header).toEqual(COLUMNS)
    expect(rows).toEqual(stored)
    expect(rows.map((r) => JSON.parse(r.metadata))).toEqual([{}, metadata[0], metadata[1], metadata[2], {}, {}])
  })

  it('Parquet: the same rows, typed, read back by ClickHouse and by Apache Arrow', async () => {
    const stored = await storedRows(h.services.clickhouse, user)
    const res = await exportOf(key, '?format=parquet')
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('application/vnd.apache.parquet')
    for (const arrow of [false, true]) {
      const { rows, types } = await parquetRows(h.services.clickhouse, res.rawPayload, { arrow })
      expect(rows).toEqual(stored)
      expect(Object.keys(types)).toEqual(COLUMNS)
      expect(types).toMatchObject({ timestamp: "DateTime64(6, 'UTC')", cost_usd: 'Decimal(18, 9)', cost_nano: 'Int64', price_fallback: 'Bool', model: 'Nullable(String)' })
      expect(types.quantities).toMatch(/^Map\(/)
      expect(types.unpriced_quantities).toMatch(/^Array\(/)
    }
  })

  it('names the range in an attachment, and stores nothing new', async () => {
    const res = await exportOf(key, '?from=2026-01-01&to=2026-02-01T12:30:00%2B01:00&format=ndjson')
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-disposition']).toBe('attachment; filename="burnrate-events-20260101T000000Z-20260201T113000Z.ndjson"')
    expect(res.headers['cache-control']).toBe('no-store')
    expect(res.body).toBe('')
  })

  it("another user's key never sees these events, whatever the range", async () => {
    const stranger = await h.key(unique('stranger'))
    const widest = `?from=${encodeURIComponent(isoMicros(Date.now() * 1000 - (MAX_EXPORT_DAYS - 1) * 24 * HOUR_US))}&to=${encodeURIComponent(isoMicros(Date.now() * 1000 + HOUR_US))}`
    for (const format of ['csv', 'ndjson', 'parquet']) {
      const res = await exportOf(stranger, `${widest}&format=${format}`)
      expect(res.statusCode).toBe(200)
      if (format === 'csv') expect(csvRows(res.body).rows).toEqual([])
      else if (format === 'ndjson') expect(res.body).toBe('')
      else expect((await parquetRows(h.services.clickhouse, res.rawPayload)).rows).toEqual([])
    }
    // A parameter naming a user is no parameter: the key's user is the only one.
    const named = await exportOf(stranger, `?user=${encodeURIComponent(user)}`)
    expect(named.statusCode).toBe(400)
    expect(named.json().errors).toEqual([{ field: 'user', message: 'is not a known field' }])
  })
})

describe('GET /export: the range', () => {
  it('is [from, to): an event at from is in, one at to is out; ties in time go by event id', async () => {
    const user = unique('ranged')
    const key = await h.key(user)
    const t0 = Date.UTC(2026, 5, 1) * 1000 + 123_456
    // Five events 1 µs apart, then ten at one instant (ordered by their UUIDs, not their text).
    await seedEvents(h.services.clickhouse, { user, n: 5, startUs: t0, stepUs: 1 })
    await seedEvents(h.services.clickhouse, { user, n: 10, startUs: t0 + 10, stepUs: 0 })
    const all = await storedRows(h.services.clickhouse, user)
    expect(all).toHaveLength(15)
    const res = await exportOf(key, `?format=ndjson&from=${isoMicros(t0 + 1)}&to=${isoMicros(t0 + 4)}`)
    expect(ndjsonRows(res.body).map((r) => r.timestamp)).toEqual([t0 + 1, t0 + 2, t0 + 3].map(isoMicros))
    const ties = ndjsonRows((await exportOf(key, `?format=ndjson&from=${isoMicros(t0 + 10)}&to=${isoMicros(t0 + 11)}`)).body)
    expect(ties).toEqual(all.slice(5))
    const byText = [...ties].sort((a, b) => (a.event_id < b.event_id ? -1 : 1))
    expect(ties.map((r) => r.event_id)).not.toEqual(byText.map((r) => r.event_id)) // the order is the stored UUIDs', which the text's is not here
  })

  it('defaults to the last 24 hours: to is now, from a day before it', async () => {
    const user = unique('recent')
    const key = await h.key(user)
    const now = Date.now() * 1000
    await seedEvents(h.services.clickhouse, { user, n: 1, startUs: now - 25 * HOUR_US, stepUs: 0 })
    await seedEvents(h.services.clickhouse, { user, n: 1, startUs: now - 23 * HOUR_US, stepUs: 0 })
    await seedEvents(h.services.clickhouse, { user, n: 1, startUs: now + HOUR_US, stepUs: 0 })
    const rows = ndjsonRows((await exportOf(key, '?format=ndjson')).body)
    expect(rows.map((r) => r.timestamp)).toEqual([isoMicros(now - 23 * HOUR_US)])
    // With only to, from is a day before it.
    const before = ndjsonRows((await exportOf(key, `?format=ndjson&to=${isoMicros(now - 24 * HOUR_US)}`)).body)
    expect(before.map((r) => r.timestamp)).toEqual([isoMicros(now - 25 * HOUR_US)])
  })

  it('refuses bad parameters with a 400 naming the parameter, and exports nothing', async () => {
    const key = await h.key(unique('careless'))
    const now = Date.now()
    const cases: Array<[string, string]> = [
      ['?from=yesterday', 'from'],
      ['?to=2026-13-01', 'to'],
      ['?from=2026-01-01T00:00:00', 'from'], // no zone: which instant?
      ['?format=xml', 'format'],
      ['?format=CSV', 'format'],
      ['?from=2026-02-01&to=2026-01-01', 'from'],
      ['?from=2026-01-01&to=2026-01-01', 'from'],
      [`?from=2025-01-01&to=${2025 + 1}-01-03`, 'from'], // 367 days
      [`?from=${new Date(now + 3_600_000).toISOString()}`, 'from'], // after now, the default to
      ['?limit=10', 'limit'],
      ['?from=1969-12-31', 'from'],
    ]
    const before = await outcomes('csv', 'failed')
    for (const [query, field] of cases) {
      const res = await exportOf(key, query)
      expect(res.statusCode, query).toBe(400)
      expect(res.headers['content-type'], query).toContain('application/problem+json')
      expect(res.headers['content-disposition'], query).toBeUndefined()
      expect(res.json(), query).toMatchObject({ code: 'invalid_query' })
      expect(res.json().errors.map((e: { field: string }) => e.field), query).toEqual([field])
    }
    // 366 days is allowed.
    expect((await exportOf(key, '?from=2025-01-01&to=2026-01-02')).statusCode).toBe(200)
    await eventually(() => (h.services.exports.running === 0 ? true : undefined))
    expect(await outcomes('csv', 'failed')).toBe(before)
  })

  it('needs a key, and counts against the reads', async () => {
    expect((await h.app.inject({ method: 'GET', url: '/export' })).statusCode).toBe(401)
    const key = await h.key(unique('counted'))
    const read = await h.app.inject({ method: 'GET', url: '/agents', headers: { 'x-api-key': key } })
    const exported = await exportOf(key, '')
    const after = await h.app.inject({ method: 'GET', url: '/agents', headers: { 'x-api-key': key } })
    const remaining = [read, exported, after].map((r) => Number(r.headers['x-ratelimit-remaining']))
    expect(remaining).toEqual([remaining[0], remaining[0]! - 1, remaining[0]! - 2])
  })

  it('is empty but whole when nothing is in the range: a CSV header, no NDJSON line, a Parquet file of no rows', async () => {
    const key = await h.key(unique('empty'))
    expect((await exportOf(key, '?format=csv')).body).toBe(`${COLUMNS.map((c) => `"${c}"`).join(',')}\n`)
    expect((await exportOf(key, '?format=ndjson')).body).toBe('')
    const parquet = await parquetRows(h.services.clickhouse, (await exportOf(key, '?format=parquet')).rawPayload)
    expect(parquet.rows).toEqual([])
    expect(Object.keys(parquet.types)).toEqual(COLUMNS)
  })
})

describe('GET /export: large exports', () => {
  const user = unique('large')
  let key: string
  // More rows than a block of a Parquet export (at most 65,536): files to join
  // (storage/stream.test.ts joins many more, of every size).
  const N = 70_000
  const start = Date.UTC(2026, 2, 1) * 1000
  const range = `from=${isoMicros(start)}&to=${isoMicros(start + N * 1000)}`
  beforeAll(async () => {
    key = await h.key(user)
    await seedEvents(h.services.clickhouse, { user, n: N, startUs: start, stepUs: 1000 })
  })

  it('come whole in every format, in many chunks joined as one file', { timeout: 120_000 }, async () => {
    const stored = await storedRows(h.services.clickhouse, user)
    expect(stored).toHaveLength(N)
    const csv = await readAll(await open(`/export?${range}&format=csv`, key))
    expect(sameRows(csvRows(csv.toString('utf8')).rows, stored)).toBeNull()
    const ndjson = await readAll(await open(`/export?${range}&format=ndjson`, key))
    expect(sameRows(ndjsonRows(ndjson.toString('utf8')), stored)).toBeNull()
    const parquet = await readAll(await open(`/export?${range}&format=parquet`, key))
    for (const arrow of [false, true]) expect(sameRows((await parquetRows(h.services.clickhouse, parquet, { arrow })).rows, stored)).toBeNull()
  })

  it('stop when their client goes away: the query is cancelled, the slot freed, the next export whole', async () => {
    const cancelled = await outcomes('ndjson', 'cancelled')
    const res = await open(`/export?${range}&format=ndjson`, key)
    try {
      expect(res.statusCode).toBe(200)
      // One chunk, then the client is gone, far from the end of the export.
      const first = await new Promise<Buffer>((resolve) => res.once('data', resolve))
      expect(first.length).toBeGreaterThan(0)
      expect(await runningExportQueries()).toBe(1)
    } finally {
      res.destroy()
    }
    await eventually(async () => ((await runningExportQueries()) === 0 && h.services.exports.running === 0 ? true : undefined), 10_000)
    expect(await outcomes('ndjson', 'cancelled')).toBe(cancelled + 1)
    expect((await h.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200)
    const again = await readAll(await open(`/export?${range}&format=ndjson`, key))
    expect(again.toString('utf8').split('\n')).toHaveLength(N + 1)
  })

  it('run at most two at once on an instance: a third is 503 export_busy with Retry-After', async () => {
    const busy = await outcomes('csv', 'busy')
    // Two exports whose clients read nothing: the bytes wait, the slots stay taken.
    const a = await open(`/export?${range}`, key)
    const b = await open(`/export?${range}`, key)
    try {
      expect([a.statusCode, b.statusCode]).toEqual([200, 200])
      const third = await exportOf(key, `?${range}`)
      expect(third.statusCode).toBe(503)
      expect(third.headers['retry-after']).toBe('5')
      expect(third.json()).toMatchObject({ code: 'export_busy' })
      expect(await outcomes('csv', 'busy')).toBe(busy + 1)
    } finally {
      a.destroy()
      b.destroy()
    }
    await eventually(() => (h.services.exports.running === 0 ? true : undefined), 10_000)
    expect((await exportOf(key, '')).statusCode).toBe(200)
  })

  it('hold up neither the shipping of new events nor reads while they run', async () => {
    const other = unique('meanwhile')
    const otherKey = await h.key(other)
    const res = await open(`/export?${range}&format=csv`, key)
    try {
      await new Promise((resolve) => res.once('data', resolve))
      res.pause()
      // The export is under way, its client reading nothing: events are taken, shipped and read.
      for (let i = 0; i < 20; i++) expect((await h.post('/events', llmCall('busy-agent', { metadata: { i } }), otherKey)).statusCode).toBe(200)
      await h.flush()
      const events = await h.app.inject({ method: 'GET', url: '/agents/events?limit=100', headers: { 'x-api-key': otherKey } })
      expect(events.json().events).toHaveLength(20)
      expect((await h.app.inject({ method: 'GET', url: '/agents/busy-agent', headers: { 'x-api-key': otherKey } })).statusCode).toBe(200)
      expect(await runningExportQueries()).toBe(1)
      // And the export, read on, is whole.
      res.resume()
      const rest = await readAll(res)
      expect(rest.length).toBeGreaterThan(0)
    } finally {
      res.destroy()
    }
    await eventually(() => (h.services.exports.running === 0 ? true : undefined))
  })
})

describe('cost_usd', () => {
  it('is exact: cost_nano with nine decimal places, whatever its size', async () => {
    const user = unique('costly')
    const key = await h.key(user)
    const costs = [0n, 1n, 7_500_000n, 123_456_789_012n, 999_999_999n, 1_000_000_000n, 9_007_199_254_740_993n]
    const t = Date.UTC(2026, 3, 1) * 1000
    for (const [i, cost] of costs.entries()) {
      await h.services.clickhouse.command({
        query: `INSERT INTO events (user_id, agent_id, timestamp, event_id, event_type, model, metadata, cost_nano, price_fallback)
                VALUES ({user:String}, 'a', fromUnixTimestamp64Micro({t:Int64}), generateUUIDv4(), 'llm_call', 'gpt-4o', '', {cost:Int64}, false)`,
        query_params: { user, t: t + i, cost },
        clickhouse_settings: { insert_deduplication_token: randomUUID() },
      })
    }
    const range = `from=${isoMicros(t)}&to=${isoMicros(t + costs.length)}`
    const ndjson = ndjsonRows((await exportOf(key, `?${range}&format=ndjson`)).body)
    expect(ndjson.map((r) => r.cost_usd)).toEqual(costs.map(usdText))
    expect(ndjson.map((r) => r.cost_usd)).toEqual(['0', '0.000000001', '0.0075', '123.456789012', '0.999999999', '1', '9007199.254740993'])
    expect(csvRows((await exportOf(key, `?${range}`)).body).rows.map((r) => r.cost_usd)).toEqual(costs.map(usdText))
    const parquet = await parquetRows(h.services.clickhouse, (await exportOf(key, `?${range}&format=parquet`)).rawPayload)
    expect(parquet.rows.map((r) => r.cost_usd)).toEqual(costs.map(usdText))
  })
})

describe('GET /export while parts lack the projection', () => {
  it('reads the table instead, and misses nothing', async () => {
    const user = unique('old-parts')
    const key = await h.key(user)
    // A month of its own, whose part then loses its projection, as parts written before sql/0011 had none.
    const t = Date.UTC(2025, 5, 10) * 1000
    await seedEvents(h.services.clickhouse, { user, n: 1000, startUs: t, stepUs: 1_000_000 })
    const settings = { mutations_sync: '2' } as const
    await h.services.clickhouse.command({ query: "ALTER TABLE events CLEAR PROJECTION user_recent IN PARTITION '202506'", clickhouse_settings: settings })
    try {
      const stored = await storedRows(h.services.clickhouse, user)
      expect(stored).toHaveLength(1000)
      const rows = ndjsonRows((await exportOf(key, `?format=ndjson&from=${isoMicros(t)}&to=${isoMicros(t + 1000 * 1_000_000)}`)).body)
      expect(sameRows(rows, stored)).toBeNull()
    } finally {
      await h.services.clickhouse.command({ query: "ALTER TABLE events MATERIALIZE PROJECTION user_recent IN PARTITION '202506'", clickhouse_settings: settings })
    }
  })
})
