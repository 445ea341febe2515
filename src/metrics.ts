import { createServer, type Server } from 'node:http'
import { collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'
import type { GroupCommitStats } from './ingest/group-commit.ts'

/**
 * Prometheus metrics of one burnrate process. They describe the service, not any user's
 * data, so they are served on their own port (METRICS_PORT) for the scraper, not on the API.
 */
export interface Metrics {
  registry: Registry
  batchSize: Histogram
  batchWaitSeconds: Histogram
  commitSeconds: Histogram
}

export function createMetrics(sources: { ingest: () => GroupCommitStats; agents: () => number }): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  const gauge = (name: string, help: string, read: () => number) =>
    new Gauge({ name, help, registers: [registry], collect: function (this: Gauge) { this.set(read()) } })
  gauge('burnrate_ingest_queue_length', 'Events waiting for the next ClickHouse insert', () => sources.ingest().queued)
  gauge('burnrate_ingest_commits_total', 'ClickHouse inserts of event batches that succeeded', () => sources.ingest().commits)
  gauge('burnrate_ingest_commit_failures_total', 'ClickHouse inserts of event batches that failed (answered 503)', () => sources.ingest().failures)
  gauge('burnrate_hot_state_agents', 'Agents held in the hot state', sources.agents)
  return {
    registry,
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
