import { createServer, type Server } from 'node:http'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { GroupCommitStats } from './ingest/group-commit.ts'
import type { JournalBacklog } from './journal/types.ts'

/**
 * Prometheus metrics of one burnrate process. They describe the service, not any user's
 * data, so they are served on their own port (METRICS_PORT) for the scraper, not on the API.
 */
export interface Metrics {
  registry: Registry
  batchSize: Histogram
  batchWaitSeconds: Histogram
  commitSeconds: Histogram
  shipFailures: Counter
  /** A batch of the journal is in ClickHouse. */
  shipped(s: { rows: number; durationMs: number; waitedMs: number[] }): void
}

export function createMetrics(sources: {
  /** The REDIS_URL write path's group commit (null when the journal is in use). */
  groupCommit: () => GroupCommitStats | null
  journal: { backlog(): JournalBacklog; readonly stats: { writes: number } } | null
  agents: () => number
}): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  const gauge = (name: string, help: string, read: () => number) =>
    new Gauge({ name, help, registers: [registry], collect: function (this: Gauge) { this.set(read()) } })
  const commit = () => sources.groupCommit() ?? { queued: 0, commits: 0, failures: 0 }
  gauge('burnrate_ingest_queue_length', 'Events waiting for the next ClickHouse insert (REDIS_URL write path)', () => commit().queued)
  gauge('burnrate_ingest_commits_total', 'ClickHouse inserts of event batches that succeeded (REDIS_URL write path)', () => commit().commits)
  gauge('burnrate_ingest_commit_failures_total', 'ClickHouse inserts of event batches that failed, answered 503 (REDIS_URL write path)', () => commit().failures)
  gauge('burnrate_hot_state_agents', 'Agents held in the hot state', sources.agents)
  const { journal } = sources
  if (journal) {
    gauge('burnrate_journal_backlog_rows', 'Rows in the journal not yet shipped to ClickHouse', () => journal.backlog().rows)
    gauge('burnrate_journal_backlog_bytes', 'Bytes in the journal not yet shipped to ClickHouse', () => journal.backlog().bytes)
    gauge('burnrate_journal_oldest_age_seconds', 'Age of the oldest row not yet shipped to ClickHouse (0 when none)', () => {
      const { oldestAt } = journal.backlog()
      return oldestAt === null ? 0 : Math.max(0, (Date.now() - oldestAt) / 1000)
    })
    gauge('burnrate_journal_writes_total', 'Group writes of the journal (rows appended together share one)', () => journal.stats.writes)
  }
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
    shipped(s) {
      shipBatches.inc()
      shipRows.inc(s.rows)
      shipSeconds.observe(s.durationMs / 1000)
      for (const ms of s.waitedMs) shipLag.observe(ms / 1000)
    },
    batchSize: new Histogram({
      name: 'burnrate_ingest_batch_size',
      help: 'Events per ClickHouse insert',
      buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000],
      registers: [registry],
    }),
    batchWaitSeconds: new Histogram({
      name: 'burnrate_ingest_batch_wait_seconds',
      help: 'How long the oldest event of a batch waited before its insert started',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers: [registry],
    }),
    commitSeconds: new Histogram({
      name: 'burnrate_ingest_commit_seconds',
      help: 'Time to store a batch (insert and hot-state update)',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
  }
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
