/**
 * The write path through an outage: burnrate with its ClickHouse as a server of its own
 * (the project's chDB-over-HTTP helper, test/helpers/clickhouse-server.ts, so that it can
 * fail and come back) and the in-process hot state with its journal.
 *
 *   1. Steady: a fixed rate for `duration` seconds with ClickHouse up: INSERTs per second and
 *      the acknowledgement-to-readable lag p50/p99 (burnrate_ship_lag_seconds).
 *   2. Outage: ClickHouse stopped, three times the rate for `duration` seconds: every event
 *      is acknowledged from the journal, which grows by many batches.
 *   3. Recovery: ClickHouse back on the same data and port; the seconds until the shipper's
 *      next attempt ships (its retry backoff), then the rows per second it drains the rest at,
 *      with no other load: the shipper alone.
 *   4. Check: GET /agents counts every acknowledged event once.
 *
 *   node bench/write-path.ts [--rate 1000] [--duration 10]
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { startClickHouseServer } from '../test/helpers/clickhouse-server.ts'
import type { LoadSummary } from './load.ts'
import { ROOT, bucketQuantile, children, createKey, fmt, run, scrape, startBurnrate, stop, storedLlmCalls, table } from './processes.ts'
import type { Figure } from './results.ts'

export interface WritePathResult {
  rate: number
  steady: { acked: number; insertsPerSec: number; lagP50: string; lagP99: string; ingestP99: number }
  outage: { acked: number; backlogRows: number; ingestP99: number; failed: number }
  recovery: { seconds: number; firstShipSeconds: number; rowsPerSec: number | null }
  check: { stored: number; acked: number; ok: boolean }
}

async function until<T>(what: string, ms: number, probe: () => Promise<T | null>): Promise<T> {
  const deadline = performance.now() + ms
  for (;;) {
    const v = await probe()
    if (v !== null) return v
    if (performance.now() > deadline) throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

export async function writePathScenario(o: { rate: number; duration: number }): Promise<WritePathResult> {
  const dir = await mkdtemp(join(tmpdir(), 'burnrate-write-path-'))
  let clickhouse = await startClickHouseServer({ path: join(dir, 'clickhouse') })
  try {
    await mkdir(join(dir, 'data'))
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: join(dir, 'data'), CLICKHOUSE_URL: clickhouse.url, PORT: '0', HOST: '127.0.0.1', METRICS_PORT: '0' }
    for (const name of ['REDIS_URL', 'PRICES_FILE', 'CLICKHOUSE_USER', 'CLICKHOUSE_PASSWORD', 'CLICKHOUSE_DATABASE']) delete env[name]
    const burnrate = await startBurnrate(env, join(dir, 'burnrate.log'), null)
    try {
      const apiKey = await createKey(env, 'write-path')
      const ingest = async (prefix: string, rate: number) => {
        const out = await run(
          [join(ROOT, 'bench', 'load.ts'), '--url', burnrate.url, '--rate', String(rate), '--duration', String(o.duration), '--warmup', '0', '--connections', '50', '--agent-prefix', prefix],
          { ...process.env, BENCH_API_KEY: apiKey },
          'ingest load',
          (o.duration + 120) * 1000,
        )
        return JSON.parse(out.trim().split('\n').at(-1)!) as LoadSummary
      }
      const backlog = async () => (await scrape(burnrate.metrics)).get('burnrate_journal_backlog_rows') ?? 0

      // 1. Steady, then wait for the journal to empty so the outage starts from nothing.
      const before = await scrape(burnrate.metrics)
      const steadyLoad = await ingest('steady-agent-', o.rate)
      await until('the steady phase to be shipped', 60_000, async () => ((await backlog()) === 0 ? true : null))
      const after = await scrape(burnrate.metrics)
      const inserts = (after.get('burnrate_ship_batches_total') ?? 0) - (before.get('burnrate_ship_batches_total') ?? 0)

      // 2. The outage.
      await clickhouse.stop()
      // Three times the rate: a backlog of many batches, for the shipper's own rate.
      const outageLoad = await ingest('outage-agent-', 3 * o.rate)
      const backlogRows = await backlog()

      // 3. ClickHouse back; the shipper alone drains the journal: first the wait for its next
      //    attempt (its retry backoff), then the drain itself.
      clickhouse = await startClickHouseServer({ path: clickhouse.path, port: clickhouse.port })
      const back = performance.now()
      const firstShipped = await until('the first rows shipped', 600_000, async () => ((await backlog()) < backlogRows ? performance.now() : null))
      const left = await backlog()
      await until('the backlog to drain', 600_000, async () => ((await backlog()) === 0 ? true : null))
      const drained = performance.now()

      // 4. Every acknowledged event stored once.
      const acked = steadyLoad.ok + outageLoad.ok
      const stored = await storedLlmCalls(burnrate.url, apiKey)
      return {
        rate: o.rate,
        steady: {
          acked: steadyLoad.ok,
          insertsPerSec: inserts / steadyLoad.durationS,
          lagP50: bucketQuantile(before, after, 'burnrate_ship_lag_seconds', 0.5),
          lagP99: bucketQuantile(before, after, 'burnrate_ship_lag_seconds', 0.99),
          ingestP99: steadyLoad.latencyMs.p99,
        },
        outage: { acked: outageLoad.ok, backlogRows, ingestP99: outageLoad.latencyMs.p99, failed: outageLoad.non2xx + outageLoad.errors },
        recovery: {
          seconds: (drained - back) / 1000,
          firstShipSeconds: (firstShipped - back) / 1000,
          // What the first pass shipped is not timed: from the moment it was seen, the rest.
          rowsPerSec: drained > firstShipped ? left / ((drained - firstShipped) / 1000) : null,
        },
        check: { stored, acked, ok: stored === acked },
      }
    } finally {
      await stop(burnrate.child, 'burnrate')
    }
  } finally {
    await clickhouse.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

export function writePathTable(r: WritePathResult): string {
  return table([
    ['write path (ClickHouse over HTTP)', 'value'],
    [`steady ${fmt(r.rate)} req/s: ClickHouse INSERTs of events per second`, fmt(r.steady.insertsPerSec, 2)],
    ['steady: acknowledgement to readable, p50 / p99 s', `${r.steady.lagP50} / ${r.steady.lagP99}`],
    ['steady: ingest p99 ms', fmt(r.steady.ingestP99, 1)],
    [`ClickHouse down, ${fmt(3 * r.rate)} req/s: events acknowledged / failed`, `${fmt(r.outage.acked)} / ${fmt(r.outage.failed)}`],
    ['ClickHouse down: ingest p99 ms', fmt(r.outage.ingestP99, 1)],
    ['ClickHouse back: backlog rows, seconds to empty', `${fmt(r.outage.backlogRows)} rows, ${fmt(r.recovery.seconds, 1)} s`],
    ['ClickHouse back: seconds to the first rows shipped (retry backoff)', fmt(r.recovery.firstShipSeconds, 1)],
    ['ClickHouse back: shipper alone, rows per second', r.recovery.rowsPerSec === null ? 'n/a' : fmt(r.recovery.rowsPerSec)],
    ['check: stored llm_calls = acknowledged', `${r.check.ok ? 'ok' : 'FAIL'} ${fmt(r.check.stored)} = ${fmt(r.check.acked)}`],
  ])
}

export function writePathFigures(r: WritePathResult): Figure[] {
  return [
    { figure: 'write path: ClickHouse INSERTs of events per second, steady', value: r.steady.insertsPerSec, unit: '/s' },
    { figure: `write path: ingest p99 with ClickHouse down, ${3 * r.rate} req/s`, value: r.outage.ingestP99, unit: 'ms' },
    { figure: 'write path: seconds from ClickHouse back to the first rows shipped', value: r.recovery.firstShipSeconds, unit: 's' },
    { figure: 'write path: backlog drained after an outage (the shipper alone)', value: r.recovery.rowsPerSec, unit: 'rows/s' },
  ]
}

async function main(): Promise<number> {
  const { values } = parseArgs({ options: { rate: { type: 'string' }, duration: { type: 'string' } }, strict: true })
  const interrupted = () => void Promise.all([...children].map((c) => stop(c, `pid ${c.pid}`))).finally(() => process.exit(130))
  process.once('SIGINT', interrupted)
  process.once('SIGTERM', interrupted)
  const r = await writePathScenario({ rate: Number(values.rate ?? 1000), duration: Number(values.duration ?? 10) })
  console.log(writePathTable(r))
  console.log(JSON.stringify(r))
  return r.check.ok ? 0 : 1
}

if (import.meta.main) process.exitCode = await main()
