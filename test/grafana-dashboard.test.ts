// The provisioned Grafana dashboard (deploy/grafana/). No Grafana runs here, so each
// query of the dashboard is taken from its JSON, expanded as Grafana and the ClickHouse data
// source would expand it (test/helpers/grafana-macros.ts), and run on the real engine over
// events seeded through the service.
import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { ALL, interpolate, type GrafanaRequest, type TemplateVariable } from './helpers/grafana-macros.ts'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

const DEPLOY = new URL('../deploy/grafana/', import.meta.url)
const read = (path: string) => readFileSync(new URL(path, DEPLOY), 'utf8')

interface Target {
  refId: string
  datasource: { type: string; uid: string }
  editorType: string
  format: number
  queryType: string
  pluginVersion: string
  rawSql: string
}
interface Panel {
  id: number
  type: string
  title: string
  description: string
  datasource: { type: string; uid: string }
  targets: Target[]
}
interface Variable {
  type: string
  name: string
  datasource?: { type: string; uid: string }
  query: string | { rawSql: string }
  multi?: boolean
  includeAll?: boolean
  refresh?: number
  current: { value: string | string[] }
}
interface Dashboard {
  uid: string
  title: string
  schemaVersion: number
  time: { from: string; to: string }
  refresh: string
  panels: Panel[]
  templating: { list: Variable[] }
}

const dashboard = JSON.parse(read('dashboards/burnrate.json')) as Dashboard
const DS = { type: 'grafana-clickhouse-datasource', uid: 'burnrate-clickhouse' }

function panel(title: RegExp): Panel {
  const found = dashboard.panels.filter((p) => title.test(p.title))
  expect(found, `one panel titled ${title}`).toHaveLength(1)
  return found[0]!
}
const sqlOf = (title: RegExp) => panel(title).targets[0]!.rawSql
function variable(name: string): Variable {
  const v = dashboard.templating.list.find((x) => x.name === name)
  if (!v) throw new Error(`no variable ${name}`)
  return v
}
const variableSql = (name: string) => {
  const q = variable(name).query
  return typeof q === 'string' ? q : q.rawSql
}

// ---- the seeded fleet -----------------------------------------------------------------------

const MIN = 60_000
const HOUR = 60 * MIN
const at = (hh: number, mm: number) => Date.UTC(2026, 10, 20, hh, mm, 0)
const clock = new ManualClock(at(10, 0))

// A quote in the user id: the dashboard's quoting must carry it (the CLI allows it).
const alice = unique("alice's")
const bob = unique('bob')
const UNPRICED = 'burnrate-test-unpriced-model'
const OHARA = "o'hara\\"
const ODD_KEY = "it's \\' a, (key) --"

// Nano-USD of the seeded calls, by hand: gpt-4o is 2.5 / 10 USD per 1M input / output tokens,
// gpt-4o-mini 0.15 / 0.6, and a model missing from the price table is priced as gpt-4o (the
// fallback default model).
const GPT4O_1000_500 = 1000 * 2500 + 500 * 10_000 // 7,500,000
const GPT4O_1000_5000 = 1000 * 2500 + 5000 * 10_000 // 52,500,000
const MINI_1000_500 = 1000 * 150 + 500 * 600 // 450,000
const GPT4O_1000_50000 = 1000 * 2500 + 50_000 * 10_000 // 502,500,000

let h: Harness

async function send(key: string, hh: number, mm: number, body: Record<string, unknown>, nano?: number) {
  clock.set(at(hh, mm))
  const res = await h.post('/events', body, key)
  expect(res.statusCode, res.body).toBe(200)
  if (nano !== undefined) expect(res.json().cost_usd).toBe(nano / 1e9)
  return res.json() as { paused: boolean }
}

async function configure(key: string, path: string, body: Record<string, unknown>, hh: number, mm: number) {
  clock.set(at(hh, mm))
  const res = await h.post(path, body, key)
  expect(res.statusCode, res.body).toBe(200)
}

// Rows written straight into ClickHouse, only to give the engine something to skip: other
// users' events in the very hours the panels show, alice's own older history across a hundred
// agents earlier in the month, and some from September (another partition). All are priced
// by the fallback, so a panel that read them would show it.
const FILLER = { others: 300_000, history: 200_000, september: 20_000 }
// Alice's history: one event every 7.776 s from November 1, 00:00 UTC, 0.001 USD each.
const HISTORY = { start: Date.UTC(2026, 10, 1), stepUs: 7_776_000, nano: 1_000_000 }
/** The cost of alice's history events in [fromMs, toMs]. */
function historyNano(fromMs: number, toMs: number): number {
  const first = Math.max(0, Math.ceil(((fromMs - HISTORY.start) * 1000) / HISTORY.stepUs))
  const last = Math.min(FILLER.history - 1, Math.floor(((toMs - HISTORY.start) * 1000) / HISTORY.stepUs))
  return Math.max(0, last - first + 1) * HISTORY.nano
}
async function seed() {
  const aliceKey = await h.key(alice)
  const bobKey = await h.key(bob)

  await configure(aliceKey, '/config', { agent_id: 'a1', cost_threshold_usd: 1, period_budgets: [{ period: 'month', limit_usd: 2 }] }, 10, 5)
  await configure(aliceKey, '/config', { agent_id: 'a3', cost_threshold_usd: 0.01 }, 10, 5)
  // Month budgets: a1's raised (its newest row counts), a3's in New York from the 20th (the
  // per-agent panel counts the UTC month all the same), a2's a rolling window only.
  await configure(aliceKey, '/config', { agent_id: 'a1', period_budgets: [{ period: 'month', limit_usd: 3 }, { window_days: 7, limit_usd: 5 }] }, 10, 6)
  await configure(aliceKey, '/config', { agent_id: 'a3', period_budgets: [{ period: 'month', limit_usd: 1, time_zone: 'America/New_York', month_starts_on: 20 }] }, 10, 6)
  await configure(aliceKey, '/config', { agent_id: 'a2', period_budgets: [{ window_days: 30, limit_usd: 1 }] }, 10, 6)
  // The fleet's month begins at 00:00 in Kolkata on the 10th: 18:30 UTC on the 9th.
  await configure(aliceKey, '/config/fleet', { cost_threshold_usd: 1000, period_budgets: [{ period: 'month', limit_usd: 400, time_zone: 'Asia/Kolkata', month_starts_on: 10 }] }, 10, 6)
  // Metadata for the "Cost by" panel: customers (one of them a quote and a backslash), a
  // number, and a key that is all the characters a SQL literal fears.
  await send(aliceKey, 10, 10, llmCall('a1', { metadata: { customer: 'acme', tier: 1 } }), GPT4O_1000_500)
  await send(aliceKey, 10, 10, llmCall('a1', { metadata: { customer: 'acme', tier: 1 } }), GPT4O_1000_500)
  await send(bobKey, 10, 15, llmCall('a1', { output_tokens: 50_000, metadata: { customer: 'acme' } }), GPT4O_1000_50000)
  await send(bobKey, 10, 15, llmCall('b1', { model: UNPRICED }), GPT4O_1000_500)
  await send(aliceKey, 10, 20, llmCall('a2', { model: 'gpt-4o-mini', metadata: { customer: OHARA, [ODD_KEY]: 'x' } }), MINI_1000_500)
  await send(aliceKey, 10, 30, llmCall('a3', { model: UNPRICED, metadata: { customer: 'acme' } }), GPT4O_1000_500)
  await send(aliceKey, 11, 5, llmCall('a1', { output_tokens: 5000, metadata: { customer: 'globex', feature: 'chat' } }), GPT4O_1000_5000)
  // a1 paused by hand and resumed: its newest transition says running.
  await configure(aliceKey, '/config/pause', { agent_id: 'a1', is_paused: true }, 11, 6)
  await configure(aliceKey, '/config/pause', { agent_id: 'a1', is_paused: false }, 11, 7)
  await send(aliceKey, 11, 10, { agent_id: 'a2', event_type: 'tool_call', tool_name: 'search', metadata: { customer: 'acme' } }, 0)
  await send(aliceKey, 11, 10, { agent_id: 'a2', event_type: 'agent_start' }, 0)
  // a3 goes over its 0.01 USD budget (0.015): paused by the budget at 11:15.
  expect((await send(aliceKey, 11, 15, llmCall('a3'), GPT4O_1000_500)).paused).toBe(true)
  await configure(aliceKey, '/config/pause', { agent_id: 'a2', is_paused: true }, 11, 20)
  await configure(bobKey, '/config/fleet/pause', { is_paused: true }, 11, 25)
  await configure(bobKey, '/config/pause', { agent_id: 'b1', is_paused: true }, 11, 25)
  await h.flush()

  const filler = (rows: number, userSql: string, agents: string, agentCount: number, start: string, stepUs: number) =>
    h.services.clickhouse.command({
      query: `INSERT INTO events (user_id, agent_id, timestamp, event_id, event_type, model, metadata, cost_nano, price_fallback)
              SELECT ${userSql}, concat('${agents}', toString(number % ${agentCount})),
                     toDateTime64('${start}', 6, 'UTC') + toIntervalMicrosecond(number * ${stepUs}),
                     generateUUIDv4(), 'llm_call', 'filler-model', '', 1000000, true
              FROM numbers(${rows})`,
      query_params: { alice },
    })
  await filler(FILLER.others, "concat('filler-', toString(number % 4))", 'f', 50, '2026-11-20 09:00:00', 36_000)
  await filler(FILLER.history, '{alice:String}', 'h', 100, '2026-11-01 00:00:00', HISTORY.stepUs)
  await filler(FILLER.september, '{alice:String}', 's', 3, '2026-09-10 00:00:00', 10_000_000)
  // The metadata views get rows to skip of their own, written to them directly (the events
  // above carry no metadata, so the events table's layout is the other panels' alone): other
  // users' customers in the very hours the panels show, alice's customers of earlier days, and
  // alice's request ids in the hour before the range, a key after "customer" in the views' order.
  const dimensions = (rows: number, userSql: string, key: string, hourSql: string) =>
    h.services.clickhouse.command({
      query: `INSERT INTO hourly_dimensions (user_id, key, hour, value, agent_id, model, cost_nano, events, llm_calls, input_tokens, output_tokens)
              SELECT ${userSql}, '${key}', ${hourSql}, concat('v', toString(number)), concat('f', toString(number % 50)), 'filler-model', 1000000, 1, 1, 0, 0
              FROM numbers(${rows})`,
      query_params: { alice },
    })
  await dimensions(FILLER.others, "concat('filler-', toString(number % 4))", 'customer', "toDateTime('2026-11-20 09:00:00', 'UTC') + toIntervalHour(number % 3)")
  await dimensions(FILLER.history, '{alice:String}', 'customer', "toDateTime('2026-11-01 00:00:00', 'UTC') + toIntervalHour(intDiv(number, 500))")
  await dimensions(FILLER.september, '{alice:String}', 'request_id', "toDateTime('2026-11-20 09:00:00', 'UTC')")
  await h.services.clickhouse.command({
    query: `INSERT INTO hourly_dimension_keys (user_id, hour, key, events)
            SELECT concat('filler-', toString(number % 4)), toDateTime('2026-11-20 09:00:00', 'UTC') + toIntervalHour(number % 3), concat('k', toString(number)), 1
            FROM numbers(${FILLER.others})`,
  })
  // One part per month, as merges leave a table that has run a while: a part's own time
  // span no longer keeps a query out of it, only the table's keys can.
  await h.services.clickhouse.command({ query: 'OPTIMIZE TABLE events FINAL' })
  await h.services.clickhouse.command({ query: 'OPTIMIZE TABLE hourly_cost FINAL' })
  await h.services.clickhouse.command({ query: 'OPTIMIZE TABLE hourly_dimensions FINAL' })
  await h.services.clickhouse.command({ query: 'OPTIMIZE TABLE hourly_dimension_keys FINAL' })
}

beforeAll(async () => {
  h = await startHarness({ clock })
  await seed()
})
afterAll(() => h?.close())

// ---- running a query as Grafana would --------------------------------------------------------

/** Alice's view of 10:00-11:30 with every agent, top 10, one-minute interval. */
function request(o: { user?: string; agent?: string[]; top?: string; key?: string; from?: number; to?: number; intervalMs?: number } = {}): GrafanaRequest {
  const agents: TemplateVariable = { current: o.agent ?? [ALL], options: ['a1', 'a2', 'a3'] }
  return {
    from: o.from ?? at(10, 0),
    to: o.to ?? at(11, 30),
    intervalMs: o.intervalMs ?? MIN,
    variables: { user: { current: o.user ?? alice }, agent: agents, top: { current: o.top ?? '10' }, metadata_key: { current: o.key ?? 'customer' } },
  }
}

interface Result {
  meta: { name: string; type: string }[]
  data: Record<string, unknown>[]
  statistics: { rows_read: number }
}

async function run(rawSql: string, req: GrafanaRequest): Promise<Result> {
  const sql = interpolate(rawSql, req)
  expect(sql, 'every variable and macro expanded').not.toMatch(/\$|\[\[/)
  const rs = await h.services.clickhouse.query({ query: sql, format: 'JSON' })
  const { meta, data, statistics } = await rs.json<Record<string, unknown>>()
  if (!meta || !statistics) throw new Error('ClickHouse answered without meta or statistics')
  return { meta, data, statistics }
}

const columns = (r: Result) => r.meta.map((m) => `${m.name} ${m.type}`)
const usd = (nano: number) => nano / 1e9

// ---- the files ------------------------------------------------------------------------------

describe('provisioning (deploy/grafana/)', () => {
  it('provisions the official ClickHouse data source, read-only user, password from the environment', () => {
    const yml = read('provisioning/datasources/burnrate.yml')
    expect(yml).toMatch(/^apiVersion: 1$/m)
    expect(yml).toMatch(/^\s+type: grafana-clickhouse-datasource$/m)
    expect(yml).toMatch(/^\s+uid: burnrate-clickhouse$/m)
    expect(yml).toMatch(/^\s+isDefault: true$/m)
    expect(yml).toMatch(/^\s+host: clickhouse$/m)
    expect(yml).toMatch(/^\s+port: 9000$/m)
    expect(yml).toMatch(/^\s+protocol: native$/m)
    expect(yml).toMatch(/^\s+defaultDatabase: burnrate$/m)
    expect(yml).toMatch(/^\s+username: grafana$/m)
    expect(yml).toMatch(/^\s+password: \$GRAFANA_CLICKHOUSE_PASSWORD$/m)
  })

  it('loads the dashboards folder into the burnrate folder', () => {
    const yml = read('provisioning/dashboards/burnrate.yml')
    expect(yml).toMatch(/^\s+type: file$/m)
    expect(yml).toMatch(/^\s+folder: burnrate$/m)
    expect(yml).toMatch(/^\s+path: \/var\/lib\/grafana\/dashboards$/m)
  })

  it('has the dashboard: uid, title, Grafana 12 schema, last 24 h, refreshed every minute', () => {
    expect(dashboard).toMatchObject({
      uid: 'burnrate-fleet',
      title: 'burnrate — fleet spend',
      schemaVersion: 41,
      time: { from: 'now-24h', to: 'now' },
      refresh: '1m',
    })
  })

  it('has the variables user, agent (multi, All, following $user) and top (10 by default)', () => {
    expect(variable('user')).toMatchObject({ type: 'query', datasource: DS, multi: false, includeAll: false })
    expect(variable('agent')).toMatchObject({ type: 'query', datasource: DS, multi: true, includeAll: true, current: { value: [ALL] } })
    expect(variableSql('agent')).toContain('user_id = ${user:singlequote}')
    // refreshed with the time range, as it lists the agents active in it
    expect(variable('agent').refresh).toBe(2)
    expect(variable('top')).toMatchObject({ type: 'custom', current: { value: '10' } })
  })

  it('has the variable metadata_key: one key, following $user and the time range, in the order of its query', () => {
    expect(variable('metadata_key')).toMatchObject({ type: 'query', datasource: DS, multi: false, includeAll: false, refresh: 2, sort: 0 })
    expect(variableSql('metadata_key')).toContain('user_id = ${user:singlequote}')
    // The key reaches the SQL percent-encoded, decoded by ClickHouse: a quote or a backslash in it ends no literal.
    expect(panel(/^Cost by \$\{metadata_key\}/).targets[0]!.rawSql).not.toMatch(/\$\{?metadata_key(?!:percentencode\})/)
  })

  it('gives every panel and query the provisioned data source, a SQL query in the format its panel needs, scoped to $user', () => {
    expect(dashboard.panels).toHaveLength(9)
    for (const p of dashboard.panels) {
      expect(p.datasource, p.title).toEqual(DS)
      expect(p.description, p.title).not.toBe('')
      expect(p.targets, p.title).toHaveLength(1)
      const t = p.targets[0]!
      expect(t.datasource, p.title).toEqual(DS)
      expect(t.editorType, p.title).toBe('sql')
      // The plugin's pairs (src/data/utils.ts mapQueryTypeToGrafanaFormat): time series 0, table 1.
      expect([t.queryType, t.format], p.title).toEqual(p.type === 'timeseries' ? ['timeseries', 0] : ['table', 1])
      expect(t.pluginVersion, p.title).toMatch(/^4\./)
      expect(t.rawSql, p.title).toContain('user_id = ${user:singlequote}')
      // Comments would be stripped by the plugin's macro engine: keep the SQL free of them.
      expect(t.rawSql, p.title).not.toMatch(/--|\/\*/)
    }
  })
})

// ---- the panels over the seeded fleet ---------------------------------------------------------

describe('panels (alice, 10:00-11:30 UTC, every agent)', () => {
  it('fleet cost per hour: USD per UTC hour and agent, the top N by name and the rest as (other)', async () => {
    const sql = sqlOf(/^Fleet cost per hour/)
    const all = await run(sql, request())
    expect(columns(all)).toEqual(["time DateTime('UTC')", 'agent String', 'cost_usd Float64'])
    expect(all.data).toEqual([
      { time: '2026-11-20 10:00:00', agent: 'a1', cost_usd: usd(2 * GPT4O_1000_500) },
      { time: '2026-11-20 10:00:00', agent: 'a2', cost_usd: usd(MINI_1000_500) },
      { time: '2026-11-20 10:00:00', agent: 'a3', cost_usd: usd(GPT4O_1000_500) },
      { time: '2026-11-20 11:00:00', agent: 'a1', cost_usd: usd(GPT4O_1000_5000) },
      { time: '2026-11-20 11:00:00', agent: 'a2', cost_usd: 0 },
      { time: '2026-11-20 11:00:00', agent: 'a3', cost_usd: usd(GPT4O_1000_500) },
    ])
    // Top 2 over the range: a1 (0.0675) and a3 (0.015); a2 (0.00045) becomes (other).
    const top2 = await run(sql, request({ top: '2' }))
    expect(top2.data.map((r) => [r.time, r.agent, r.cost_usd])).toEqual([
      ['2026-11-20 10:00:00', '(other)', usd(MINI_1000_500)],
      ['2026-11-20 10:00:00', 'a1', usd(2 * GPT4O_1000_500)],
      ['2026-11-20 10:00:00', 'a3', usd(GPT4O_1000_500)],
      ['2026-11-20 11:00:00', '(other)', 0],
      ['2026-11-20 11:00:00', 'a1', usd(GPT4O_1000_5000)],
      ['2026-11-20 11:00:00', 'a3', usd(GPT4O_1000_500)],
    ])
    // The hour that holds the range's start counts whole (its bucket starts before 10:45).
    const late = await run(sql, request({ from: at(10, 45) }))
    expect(late.data.filter((r) => r.agent === 'a1').map((r) => r.time)).toEqual(['2026-11-20 10:00:00', '2026-11-20 11:00:00'])
    // Bob's view: his a1, never alice's agents of the same name or the others.
    const bobs = await run(sql, request({ user: bob }))
    expect(bobs.data).toEqual([
      { time: '2026-11-20 10:00:00', agent: 'a1', cost_usd: usd(GPT4O_1000_50000) },
      { time: '2026-11-20 10:00:00', agent: 'b1', cost_usd: usd(GPT4O_1000_500) },
    ])
  })

  it('fleet cost per hour: only the selected agents', async () => {
    const some = await run(sqlOf(/^Fleet cost per hour/), request({ agent: ['a2', 'a3'] }))
    expect(some.data.map((r) => r.agent)).toEqual(['a2', 'a3', 'a2', 'a3'])
  })

  it('cost by model: USD per model, most expensive first, no rows for events without a model', async () => {
    const r = await run(sqlOf(/^Cost by model/), request())
    expect(columns(r)).toEqual(['model String', 'cost_usd Float64'])
    expect(r.data).toEqual([
      { model: 'gpt-4o', cost_usd: usd(2 * GPT4O_1000_500 + GPT4O_1000_5000 + GPT4O_1000_500) },
      { model: UNPRICED, cost_usd: usd(GPT4O_1000_500) },
      { model: 'gpt-4o-mini', cost_usd: usd(MINI_1000_500) },
    ])
  })

  it('cost by a metadata key: USD per value of the chosen key, most expensive first, the top N by name and the rest as (other)', async () => {
    const p = panel(/^Cost by \$\{metadata_key\}/)
    expect(p.title).toBe('Cost by ${metadata_key} (top $top)')
    const sql = p.targets[0]!.rawSql
    const r = await run(sql, request())
    expect(columns(r)).toEqual(['value String', 'cost_usd Float64'])
    // acme: a1's two calls, a3's, and a2's tool call (0); bob's acme is bob's; a3's last call has no customer.
    expect(r.data).toEqual([
      { value: 'globex', cost_usd: usd(GPT4O_1000_5000) },
      { value: 'acme', cost_usd: usd(3 * GPT4O_1000_500) },
      { value: OHARA, cost_usd: usd(MINI_1000_500) },
    ])
    expect((await run(sql, request({ top: '1' }))).data).toEqual([
      { value: 'globex', cost_usd: usd(GPT4O_1000_5000) },
      { value: '(other)', cost_usd: usd(3 * GPT4O_1000_500 + MINI_1000_500) },
    ])
    expect((await run(sql, request({ agent: ['a2', 'a3'] }))).data).toEqual([
      { value: 'acme', cost_usd: usd(GPT4O_1000_500) },
      { value: OHARA, cost_usd: usd(MINI_1000_500) },
    ])
    expect((await run(sql, request({ user: bob }))).data).toEqual([{ value: 'acme', cost_usd: usd(GPT4O_1000_50000) }])
    // A number is a value as its JSON text; a key a SQL literal fears is still that key.
    expect((await run(sql, request({ key: 'tier' }))).data).toEqual([{ value: '1', cost_usd: usd(2 * GPT4O_1000_500) }])
    expect((await run(sql, request({ key: ODD_KEY }))).data).toEqual([{ value: 'x', cost_usd: usd(MINI_1000_500) }])
    // 11:00-11:30: the hour in progress, globex and the tool call.
    expect((await run(sql, request({ from: at(11, 0) }))).data).toEqual([
      { value: 'globex', cost_usd: usd(GPT4O_1000_5000) },
      { value: 'acme', cost_usd: 0 },
    ])
    // No key in the range (the variable is empty): no rows, not the rows of an empty key.
    expect((await run(sql, request({ key: '' }))).data).toEqual([])
  })

  it('agents paused now: the newest transition per agent, with its reason and since when', async () => {
    const sql = sqlOf(/^Agents paused now/)
    expect(panel(/^Agents paused now/).description).toMatch(/hot state is authoritative/)
    const r = await run(sql, request())
    expect(columns(r)).toEqual(['agent String', 'reason String', "since DateTime64(3, 'UTC')"])
    // a1 was paused and resumed: not listed. Bob's fleet pause is not alice's.
    expect(r.data).toEqual([
      { agent: 'a2', reason: 'manual', since: '2026-11-20 11:20:00.000' },
      { agent: 'a3', reason: 'budget', since: '2026-11-20 11:15:00.000' },
    ])
    const bobs = await run(sql, request({ user: bob }))
    expect(bobs.data).toEqual([
      { agent: '(fleet: every agent)', reason: 'fleet_manual', since: '2026-11-20 11:25:00.000' },
      { agent: 'b1', reason: 'manual', since: '2026-11-20 11:25:00.000' },
    ])
    // A selection of agents keeps the fleet's pause, which holds them too.
    const picked = await run(sql, request({ user: bob, agent: ['b1'] }))
    expect(picked.data.map((x) => x.agent)).toEqual(['(fleet: every agent)', 'b1'])
    const none = await run(sql, request({ agent: ['a1'] }))
    expect(none.data).toEqual([])
  })

  it('events per minute by type: per interval bucket, as a rate per minute', async () => {
    const sql = sqlOf(/^Events per minute/)
    const r = await run(sql, request())
    expect(columns(r)).toEqual(["time DateTime('UTC')", 'event_type LowCardinality(String)', 'events_per_minute Float64'])
    expect(r.data).toEqual([
      { time: '2026-11-20 10:10:00', event_type: 'llm_call', events_per_minute: 2 },
      { time: '2026-11-20 10:20:00', event_type: 'llm_call', events_per_minute: 1 },
      { time: '2026-11-20 10:30:00', event_type: 'llm_call', events_per_minute: 1 },
      { time: '2026-11-20 11:05:00', event_type: 'llm_call', events_per_minute: 1 },
      { time: '2026-11-20 11:10:00', event_type: 'agent_start', events_per_minute: 1 },
      { time: '2026-11-20 11:10:00', event_type: 'tool_call', events_per_minute: 1 },
      { time: '2026-11-20 11:15:00', event_type: 'llm_call', events_per_minute: 1 },
    ])
    // A 5-minute interval: 10:10-10:15 holds two calls, 0.4 a minute.
    const wide = await run(sql, request({ intervalMs: 5 * MIN }))
    expect(wide.data[0]).toEqual({ time: '2026-11-20 10:10:00', event_type: 'llm_call', events_per_minute: 0.4 })
  })

  it('fallback share: the share of LLM cost priced by the fallback model', async () => {
    const sql = sqlOf(/fallback model/)
    const total = 2 * GPT4O_1000_500 + MINI_1000_500 + GPT4O_1000_500 + GPT4O_1000_5000 + GPT4O_1000_500
    const r = await run(sql, request())
    expect(columns(r)).toEqual(['fallback_usd Float64', 'total_usd Float64', 'fallback_share Float64'])
    expect(r.data).toEqual([{ fallback_usd: usd(GPT4O_1000_500), total_usd: usd(total), fallback_share: GPT4O_1000_500 / total }])
    // Bob: b1's call was priced by the fallback, a1's was not.
    const bobs = await run(sql, request({ user: bob }))
    expect(bobs.data[0]!.fallback_share).toBe(GPT4O_1000_500 / (GPT4O_1000_500 + GPT4O_1000_50000))
    // No cost in the range: 0, not a division by zero.
    expect((await run(sql, request({ from: at(11, 16), to: at(11, 30) }))).data[0]!.fallback_share).toBe(0)
  })

  it('spend against budget: rolling 24 h cost over the newest threshold, 10 USD without a config', async () => {
    const sql = sqlOf(/^Spend against budget/)
    const r = await run(sql, request())
    expect(columns(r)).toEqual(['agent String', 'spend_usd Float64', 'budget_usd Float64', 'budget_used Nullable(Float64)'])
    const a1 = 2 * GPT4O_1000_500 + GPT4O_1000_5000
    const a3 = 2 * GPT4O_1000_500
    expect(r.data).toEqual([
      { agent: 'a3', spend_usd: usd(a3), budget_usd: 0.01, budget_used: usd(a3) / 0.01 },
      { agent: 'a1', spend_usd: usd(a1), budget_usd: 1, budget_used: usd(a1) / 1 },
      { agent: 'a2', spend_usd: usd(MINI_1000_500), budget_usd: 10, budget_used: usd(MINI_1000_500) / 10 },
    ])
    // The window ending at 10:25 the next day starts at 10:25 today: a1's and a2's calls of
    // 10:10 and 10:20 are out of it, a3's of 10:30 in it, though all are in the 10:00 hour.
    const nextDay = await run(sql, request({ to: at(10, 25) + 24 * HOUR }))
    expect(nextDay.data).toEqual([
      { agent: 'a3', spend_usd: usd(a3), budget_usd: 0.01, budget_used: usd(a3) / 0.01 },
      { agent: 'a1', spend_usd: usd(GPT4O_1000_5000), budget_usd: 1, budget_used: usd(GPT4O_1000_5000) },
      { agent: 'a2', spend_usd: 0, budget_usd: 10, budget_used: 0 },
    ])
    // Ending at 11:12: a1's call of 11:05 is in, a3's of 11:15 is not.
    const early = await run(sql, request({ to: at(11, 12) }))
    expect(early.data.find((x) => x.agent === 'a3')!.spend_usd).toBe(usd(GPT4O_1000_500))
    expect(early.data.find((x) => x.agent === 'a1')!.spend_usd).toBe(usd(a1))
    expect((await run(sql, request({ top: '1' }))).data.map((x) => x.agent)).toEqual(['a3'])
  })
})

describe('month to date against budget', () => {
  const A1 = 2 * GPT4O_1000_500 + GPT4O_1000_5000
  const A3 = 2 * GPT4O_1000_500
  const ALICE = A1 + MINI_1000_500 + A3

  it('per agent: the UTC month to the range end, against the newest month budget; agents without one left out', async () => {
    const sql = sqlOf(/^Month to date against budget/)
    expect(panel(/^Month to date against budget/).description).toMatch(/UTC calendar month/)
    const r = await run(sql, request())
    expect(columns(r)).toEqual(['agent String', 'spend_usd Float64', 'budget_usd Float64', 'budget_used Float64'])
    // a1's raised limit (3, not 2); a3's counted from November 1 UTC, not the 20th in New York.
    expect(r.data).toEqual([
      { agent: 'a1', spend_usd: usd(A1), budget_usd: 3, budget_used: usd(A1) / 3 },
      { agent: 'a3', spend_usd: usd(A3), budget_usd: 1, budget_used: usd(A3) },
    ])
    // Ending at 10:25: the hour in progress from the events, a1's two calls of 10:10 only.
    const early = await run(sql, request({ to: at(10, 25) }))
    expect(early.data).toEqual([
      { agent: 'a1', spend_usd: usd(2 * GPT4O_1000_500), budget_usd: 3, budget_used: usd(2 * GPT4O_1000_500) / 3 },
      { agent: 'a3', spend_usd: 0, budget_usd: 1, budget_used: 0 },
    ])
    // December 1, 00:30 UTC: a new month, nothing spent in it yet.
    const december = await run(sql, request({ from: Date.UTC(2026, 11, 1), to: Date.UTC(2026, 11, 1, 0, 30) }))
    expect(december.data.map((x) => [x.agent, x.spend_usd])).toEqual([
      ['a1', 0],
      ['a3', 0],
    ])
    expect((await run(sql, request({ top: '1' }))).data.map((x) => x.agent)).toEqual(['a1'])
    expect((await run(sql, request({ agent: ['a2', 'a3'] }))).data.map((x) => x.agent)).toEqual(['a3'])
    expect((await run(sql, request({ agent: ['a2'] }))).data).toEqual([])
    expect((await run(sql, request({ user: bob }))).data).toEqual([])
  })

  it("fleet: every agent of the user over the fleet's own month, from 00:00 in its zone on its start day", async () => {
    const sql = sqlOf(/^Fleet month to date/)
    // November 10, 00:00 in Kolkata: 18:30 UTC on the 9th, in the middle of alice's history.
    const monthStart = Date.UTC(2026, 10, 9, 18, 30)
    const r = await run(sql, request())
    expect(columns(r)).toEqual(['spend_usd Float64', 'budget_usd Float64', 'budget_used Float64', "month_start DateTime('Asia/Kolkata')"])
    const spent = ALICE + historyNano(monthStart, at(11, 30))
    expect(historyNano(monthStart, at(11, 30))).toBe(102_546 * HISTORY.nano)
    expect(r.data).toEqual([{ spend_usd: usd(spent), budget_usd: 400, budget_used: usd(spent) / 400, month_start: '2026-11-10 00:00:00' }])
    // The fleet's whole spend, whatever agents are picked.
    expect((await run(sql, request({ agent: ['a2'] }))).data).toEqual(r.data)
    // Ending at 10:25: the hour in progress from the events.
    const early = await run(sql, request({ to: at(10, 25) }))
    expect(early.data[0]!.spend_usd).toBe(usd(2 * GPT4O_1000_500 + MINI_1000_500 + historyNano(monthStart, at(10, 25))))
    // November 5 is before the 10th: the month that began on October 10 in Kolkata.
    const fifth = Date.UTC(2026, 10, 5)
    const october = historyNano(Date.UTC(2026, 9, 9, 18, 30), fifth)
    const before = await run(sql, request({ from: fifth - HOUR, to: fifth }))
    expect(before.data).toEqual([{ spend_usd: usd(october), budget_usd: 400, budget_used: usd(october) / 400, month_start: '2026-10-10 00:00:00' }])
    // No fleet month budget: no row.
    expect((await run(sql, request({ user: bob }))).data).toEqual([])
  })
})

describe('variables', () => {
  it('user: every user with spend in the 30 days before the range ends', async () => {
    const r = await run(variableSql('user'), request())
    expect(columns(r)).toEqual(['user_id String'])
    expect(r.data.map((x) => x.user_id)).toEqual([alice, bob, 'filler-0', 'filler-1', 'filler-2', 'filler-3'].sort())
    // The 30 days before October 1 hold alice's September history and nobody else's.
    const october = await run(variableSql('user'), request({ to: Date.UTC(2026, 9, 1) }))
    expect(october.data.map((x) => x.user_id)).toEqual([alice])
  })

  it("metadata_key: the keys of the user's events in the range, the most used first", async () => {
    const r = await run(variableSql('metadata_key'), request())
    expect(columns(r)).toEqual(['key String'])
    // customer on 6 events, tier on 2, feature and the odd key on 1 each (by their bytes).
    expect(r.data.map((x) => x.key)).toEqual(['customer', 'tier', 'feature', ODD_KEY])
    expect((await run(variableSql('metadata_key'), request({ user: bob }))).data.map((x) => x.key)).toEqual(['customer'])
    expect((await run(variableSql('metadata_key'), request({ from: at(11, 0) }))).data.map((x) => x.key)).toEqual(['customer', 'feature'])
  })

  it("agent: the user's agents active in the range", async () => {
    const r = await run(variableSql('agent'), request())
    expect(r.data.map((x) => x.agent_id)).toEqual(['a1', 'a2', 'a3'])
    expect((await run(variableSql('agent'), request({ user: bob }))).data.map((x) => x.agent_id)).toEqual(['a1', 'b1'])
  })
})

// ---- what each query reads -------------------------------------------------------------------

/** Every ReadFromMergeTree step of a query's plan, with its indexes (EXPLAIN json = 1, indexes = 1). */
interface ReadStep {
  Description?: string
  Indexes?: { Type: string; Keys?: string[]; Condition?: string; 'Initial Parts'?: number; 'Selected Parts'?: number; 'Initial Granules'?: number; 'Selected Granules'?: number }[]
}
async function reads(sql: string): Promise<ReadStep[]> {
  const rs = await h.services.clickhouse.query({ query: `EXPLAIN json = 1, indexes = 1 ${sql}`, format: 'TabSeparatedRaw' })
  const steps: ReadStep[] = []
  const walk = (node: { 'Node Type'?: string; Plans?: unknown[] } & ReadStep) => {
    if (node['Node Type'] === 'ReadFromMergeTree') steps.push(node)
    for (const child of node.Plans ?? []) walk(child as typeof node)
  }
  for (const plan of JSON.parse(await rs.text()) as { Plan: Parameters<typeof walk>[0] }[]) walk(plan.Plan)
  return steps
}

describe('reads: bounded by user and time range through the tables’ keys', () => {
  const everyQuery = () => [
    ...dashboard.panels.map((p) => ({ name: p.title, sql: p.targets[0]!.rawSql })),
    { name: 'variable agent', sql: variableSql('agent') },
    { name: 'variable metadata_key', sql: variableSql('metadata_key') },
  ]

  it('reads two granules or less per table it reads, not the 520,000 rows of other users and other times', async () => {
    // The fleet's month to date reads the user's month: its own test below.
    for (const { name, sql } of everyQuery().filter((q) => !/^Fleet month to date/.test(q.name))) {
      const r = await run(sql, request())
      const tablesRead = sql.match(/\bFROM (events|hourly_cost|hourly_dimensions|hourly_dimension_keys|pause_transitions|agent_configs)\b/g)!.length
      // A granule is 8,192 rows: the user's rows in the range and the granules at its edges.
      expect(r.statistics.rows_read, name).toBeLessThanOrEqual(tablesRead * 2 * 8192)
    }
  })

  // With the user's history across many agents, the engine reads events through the
  // user_recent projection (sql/0011: user_id, timestamp), by binary search on chDB 26.7; read
  // in the table's own order (user_id, agent_id, timestamp) it could not bound the time.
  it('reads the events table by a key that starts with user_id and bounds timestamp: a granule or two of 60', async () => {
    const eventsQueries = everyQuery().filter((q) => /\bFROM events\b/.test(q.sql))
    expect(eventsQueries.map((q) => q.name)).toEqual([
      'Share of cost priced by the fallback model',
      'Spend against budget, rolling 24 h (top $top)',
      'Events per minute by type',
      'Fleet month to date against its month budget',
      'Month to date against budget, UTC month (top $top)',
    ])
    for (const { name, sql } of eventsQueries) {
      const steps = (await reads(interpolate(sql, request()))).filter((s) => s.Indexes?.some((i) => i.Keys?.includes('timestamp')))
      expect(steps.length, name).toBeGreaterThan(0)
      for (const step of steps) {
        const pk = step.Indexes!.find((i) => i.Type === 'PrimaryKey')!
        expect(pk.Keys!.slice(0, 1), name).toEqual(['user_id'])
        expect(pk.Condition, name).toMatch(/user_id in \[/)
        expect(pk.Condition, name).toMatch(/timestamp in /)
        expect(pk['Initial Granules']!, name).toBeGreaterThan(50)
        expect(pk['Selected Granules']!, name).toBeLessThanOrEqual(2)
      }
    }
  })

  it("reads the chosen key's rows of the user's hours only, by hourly_dimensions' own order", async () => {
    const steps = (await reads(interpolate(sqlOf(/^Cost by \$\{metadata_key\}/), request({ key: ODD_KEY })))).filter((s) => s.Indexes?.some((i) => i.Keys?.includes('key')))
    expect(steps).toHaveLength(2)
    for (const step of steps) {
      const pk = step.Indexes!.find((i) => i.Type === 'PrimaryKey')!
      expect(pk.Keys).toEqual(['user_id', 'key', 'hour'])
      expect(pk.Condition).toMatch(/user_id in \[/)
      expect(pk.Condition).toMatch(/key in \[/)
      expect(pk.Condition).toContain(`hour in [${at(10, 0) / 1000}, +Inf)`)
      // Of 520,000 filler rows: other users' in these hours, alice's of other days and keys.
      expect(pk['Initial Granules']!).toBeGreaterThan(50)
      expect(pk['Selected Granules']!).toBeLessThanOrEqual(2)
    }
  })

  it("reads the user's hourly costs of the fleet's month only, through the (user_id, hour) projection", async () => {
    const steps = (await reads(interpolate(sqlOf(/^Fleet month to date/), request()))).filter((s) => s.Indexes?.some((i) => i.Keys?.includes('hour')))
    expect(steps).toHaveLength(1)
    const pk = steps[0]!.Indexes!.find((i) => i.Type === 'PrimaryKey')!
    expect(pk.Keys).toEqual(['user_id', 'hour'])
    expect(pk.Condition).toMatch(/user_id in \[/)
    // From the month's first whole UTC hour (19:00 on November 9) to the hour in progress, which the events give.
    expect(pk.Condition).toContain(`hour in [${Date.UTC(2026, 10, 9, 19) / 1000}, +Inf)`)
    expect(pk.Condition).toContain(`hour in (-Inf, ${at(11, 0) / 1000 - 1}]`)
    expect(pk['Selected Granules']!).toBeLessThan(pk['Initial Granules']!)
  })
})
