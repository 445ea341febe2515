import { createServer, type Server } from 'node:http'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import { PAUSE_REASONS, isMeterId, shownReason } from './hot-state/meters.ts'
import { isFleet, type AgentRef } from './hot-state/agent-ref.ts'
import { type BudgetAlert, type Transition } from './hot-state/types.ts'
import { backlogAgeSeconds, type JournalBacklog } from './journal/types.ts'
import { EXPORT_FORMATS } from './storage/exports.ts'
import type { MergeStats } from './storage/merges.ts'

/**
 * Prometheus metrics of one burnrate process. They describe the service, not any user's
 * data, so they are served on their own port (METRICS_PORT) for the scraper, not on the API.
 */
export interface Metrics {
  registry: Registry
  shipFailures: Counter
  /** Rows ClickHouse refused for their content, moved to dead_letters. */
  deadLetters: Counter
  /** Quantities of counted llm_calls that the price data has no price for, by name. */
  unpricedQuantities: Counter<'quantity'>
  /** Agents flagged for calling the model after their pause and its grace, once per pause. */
  ignoredPauses: Counter
  runStops: Counter
  /** OTLP spans (POST /v1/traces) by what became of them: stored, ignored, rejected. */
  otlpSpans: Counter<'result'>
  holds: Counter<'result'>
  /** Exports (GET /export, `burnrate export` through a server) by format and outcome. */
  exports: Counter<'format' | 'outcome'>
  /** A batch of the journal is in ClickHouse. */
  shipped(s: { rows: number; durationMs: number; waitedMs: number[] }): void
  /** Changes of pause state the service made (ingestion, POST /config/pause, a rebuild): the pauses are counted. */
  transitions(ts: readonly Transition[]): void
  /** Alert levels crossed. */
  alerts(as: readonly BudgetAlert[]): void
}

const SCOPES = ['agent', 'fleet'] as const

const scopeOf = (ref: AgentRef) => (isFleet(ref) ? 'fleet' : 'agent')

export function createMetrics(sources: {
  /** This instance's journal; the segment log counts its group writes too. */
  journal: { backlog(): JournalBacklog; readonly stats?: { writes: number } }
  agents: () => number
  /** ClickHouse's merges and parts, read at each scrape (a scrape that cannot read them keeps the last figures). */
  merges?: () => Promise<MergeStats>
  /** Free bytes of DATA_DIR's filesystem as the embedded journal last read them. */
  freeBytes?: () => number
  /** The oldest event ClickHouse keeps (epoch ms; null: none). */
  oldestEvent?: () => Promise<number | null>
}): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  // prom-client's default set has three gauges named like counters, which Prometheus's own
  // checker refuses (promtool check metrics); the same figures by type remain, in
  // nodejs_active_handles, nodejs_active_requests and nodejs_active_resources.
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) registry.removeSingleMetric(name)
  const gauge = (name: string, help: string, read: () => number) =>
    new Gauge({ name, help, registers: [registry], collect: function (this: Gauge) { this.set(read()) } })
  gauge('burnrate_hot_state_agents', 'Agents held in the hot state', sources.agents)
  const { journal } = sources
  gauge('burnrate_journal_backlog_rows', 'Rows in the journal not yet shipped to ClickHouse', () => journal.backlog().rows)
  gauge('burnrate_journal_backlog_bytes', 'Bytes in the journal not yet shipped to ClickHouse (embedded)', () => journal.backlog().bytes)
  gauge('burnrate_journal_oldest_age_seconds', 'Age of the oldest row not yet shipped to ClickHouse (0 when none)', () => backlogAgeSeconds(journal.backlog(), Date.now()))
  const { stats } = journal
  // A count the journal keeps itself.
  if (stats) followingCounter(registry, 'burnrate_journal_writes_total', 'Group writes of the embedded journal (rows appended together share one)', () => stats.writes)
  if (sources.merges) clickhouseMetrics(registry, sources.merges)
  const { freeBytes } = sources
  if (freeBytes) gauge('burnrate_data_dir_free_bytes', "Free bytes of DATA_DIR's filesystem (embedded): under DISK_MIN_FREE_MB events are refused", freeBytes)
  const { oldestEvent } = sources
  if (oldestEvent) {
    new Gauge({
      name: 'burnrate_oldest_event_timestamp_seconds',
      help: 'Time of the oldest event ClickHouse keeps (retention: EVENTS_RETENTION_DAYS), in Unix seconds; absent while it keeps none',
      registers: [registry],
      collect: async function (this: Gauge) {
        const ms = await oldestEvent()
        if (ms === null) this.reset()
        else this.set(ms / 1000)
      },
    })
  }
  const pauses = new Counter({
    name: 'burnrate_pauses_total',
    help: 'Pauses by scope (agent, fleet) and reason (budget, velocity: by the rules; manual: POST /config/pause)',
    labelNames: ['scope', 'reason'],
    registers: [registry],
  })
  const alerts = new Counter({ name: 'burnrate_budget_alerts_total', help: 'Alert levels of a budget crossed, by scope (agent, fleet)', labelNames: ['scope'], registers: [registry] })
  const holds = new Counter({
    name: 'burnrate_holds_total',
    help: 'Budget holds asked for (POST /holds), by result: granted, or why refused (paused, budget, fleet_budget)',
    labelNames: ['result'],
    registers: [registry],
  })
  // Every series from 0, so a dashboard sees "none yet" rather than no data.
  for (const result of ['granted', 'paused', 'budget', 'fleet_budget']) holds.inc({ result }, 0)
  for (const scope of SCOPES) {
    alerts.inc({ scope }, 0)
    for (const reason of PAUSE_REASONS) pauses.inc({ scope, reason }, 0)
  }
  const exports = new Counter({
    name: 'burnrate_exports_total',
    help: 'Exports of events by format and outcome: completed, cancelled (the client went away), failed, busy (refused: every export slot taken)',
    labelNames: ['format', 'outcome'],
    registers: [registry],
  })
  for (const format of EXPORT_FORMATS) for (const outcome of ['completed', 'cancelled', 'failed', 'busy']) exports.inc({ format, outcome }, 0)
  const shipBatches = new Counter({ name: 'burnrate_ship_batches_total', help: 'Journal batches stored in ClickHouse (one INSERT per table each)', registers: [registry] })
  const shipRows = new Counter({ name: 'burnrate_ship_rows_total', help: 'Journal rows stored in ClickHouse', registers: [registry] })
  const shipSeconds = new Histogram({
    name: 'burnrate_ship_batch_seconds',
    help: 'Time to store one journal batch in ClickHouse',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  })
  const shipLag = new Histogram({
    name: 'burnrate_ship_lag_seconds',
    help: 'From a row\'s acknowledgement (its journal append) to its being readable in ClickHouse',
    buckets: [0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300],
    registers: [registry],
  })
  return {
    registry,
    shipFailures: new Counter({ name: 'burnrate_ship_failures_total', help: 'Failed attempts to store a journal batch (retried)', registers: [registry] }),
    unpricedQuantities: new Counter({
      name: 'burnrate_unpriced_quantities_total',
      help: 'Quantities of counted llm_calls (usage objects) that the price data has no price for, by quantity: stored on the event, not charged',
      labelNames: ['quantity'],
      registers: [registry],
    }),
    ignoredPauses: new Counter({
      name: 'burnrate_ignored_pauses_total',
      help: 'Agents flagged ignoring_pause: llm_calls kept arriving after their pause and its grace period (once per pause)',
      registers: [registry],
    }),
    otlpSpans: new Counter({
      name: 'burnrate_otlp_spans_total',
      help: 'OTLP spans received (POST /v1/traces) by result: stored (they described a model call, a tool call or an agent run), ignored (nothing billable), rejected (reported in partial_success)',
      labelNames: ['result'],
      registers: [registry],
    }),
    runStops: new Counter({
      name: 'burnrate_run_stops_total',
      help: "Runs stopped by their agent's run budget (once per run)",
      registers: [registry],
    }),
    holds,
    exports,
    deadLetters: new Counter({ name: 'burnrate_ship_dead_letters_total', help: 'Journal rows ClickHouse refused for their content, moved to the dead_letters table', registers: [registry] }),
    shipped(s) {
      shipBatches.inc()
      shipRows.inc(s.rows)
      shipSeconds.observe(s.durationMs / 1000)
      for (const ms of s.waitedMs) shipLag.observe(ms / 1000)
    },
    transitions(ts) {
      // A period budget's pause counts under period_budget, whatever its period.
      for (const t of ts) if (t.paused && (t.reason === 'manual' || isMeterId(t.reason))) pauses.inc({ scope: scopeOf(t), reason: shownReason(t.reason) })
    },
    alerts(as) {
      for (const a of as) alerts.inc({ scope: scopeOf(a) })
    },
  }
}

/**
 * A counter that follows a total kept elsewhere: each scrape adds what the total grew by
 * since the last one; a total that starts again from 0 (a restarted ClickHouse server)
 * counts from there.
 */
function followingCounter(registry: Registry, name: string, help: string, total: () => number | Promise<number>): void {
  let seen = 0
  new Counter({
    name,
    help,
    registers: [registry],
    collect: async function (this: Counter) {
      const now = await total()
      this.inc(now >= seen ? now - seen : now)
      seen = now
    },
  })
}

/**
 * ClickHouse's merge counters (its own since its process started) and active parts.
 */
function clickhouseMetrics(registry: Registry, read: () => Promise<MergeStats>): void {
  let last: MergeStats = { merges: 0, mergeMs: 0, parts: [] }
  // The three collects of a scrape share one read: a read under a second old is reused.
  let reading: { at: number; done: Promise<void> } | null = null
  const refresh = () => {
    if (reading === null || Date.now() - reading.at >= 1000) {
      reading = { at: Date.now(), done: read().then((s) => void (last = s), () => undefined) }
    }
    return reading.done
  }
  const counter = (name: string, help: string, value: (s: MergeStats) => number) =>
    followingCounter(registry, name, help, async () => {
      await refresh()
      return value(last)
    })
  counter('burnrate_clickhouse_merges_total', "Background merges ClickHouse ran (every database of its process: chDB's when embedded)", (s) => s.merges)
  counter('burnrate_clickhouse_merge_seconds_total', 'Time ClickHouse spent in background merges (every database of its process)', (s) => s.mergeMs / 1000)
  new Gauge({
    name: 'burnrate_clickhouse_active_parts',
    help: "Active parts of each of burnrate's ClickHouse tables (parts that pile up: merges falling behind inserts)",
    labelNames: ['table'],
    registers: [registry],
    collect: async function (this: Gauge<'table'>) {
      await refresh()
      this.reset()
      for (const { table, parts } of last.parts) this.set({ table }, parts)
    },
  })
}

/** GET /metrics on its own listener. */
export async function serveMetrics(registry: Registry, port: number, host: string): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url !== '/metrics') return void res.writeHead(404).end()
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      () => res.writeHead(500).end(),
    )
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => resolve())
  })
  return server
}
