import { randomUUID } from 'node:crypto'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Server } from 'node:http'
import type { ClickHouseClient } from '@clickhouse/client'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import { pino } from 'pino'
import { AgentService } from './agents/service.ts'
import { RunService } from './runs/service.ts'
import { buildApp } from './app.ts'
import { ApiKeys } from './auth/api-keys.ts'
import { adminSocketPath, claimAdminSocket, startAdminSocket } from './cli/admin.ts'
import { systemClock, type Clock } from './clock.ts'
import type { Config } from './config.ts'
import type { OtlpOutcome } from './routes/otlp.ts'
import { MemoryHotState } from './hot-state/memory.ts'
import { RedisHotState } from './hot-state/redis.ts'
import type { HotState } from './hot-state/types.ts'
import { createMetrics, serveMetrics, type Metrics } from './metrics.ts'
import { mergeStats } from './storage/merges.ts'
import { announceBudgetPauses, WebhookPauseNotifier } from './ingest/notify.ts'
import { agentLoader, rebuildHotState } from './ingest/rebuild.ts'
import { IngestService } from './ingest/service.ts'
import { HoldService } from './holds/service.ts'
import { ExportService } from './exports/service.ts'
import { eraseUser, type Erasure } from './erasure/service.ts'
import { keepJournal } from './journal/keeper.ts'
import { RedisJournal } from './journal/redis-streams.ts'
import { SegmentLog } from './journal/segment-log.ts'
import { Shipper, type DeadLetter } from './journal/shipper.ts'
import type { JournalStatus } from './journal/types.ts'
import { WebhookNotifier } from './notify/webhook.ts'
import { createPriceTable, loadPricesFile } from './pricing/price-table.ts'
import { createClickHouse } from './storage/clickhouse.ts'
import { agentTotals } from './storage/events.ts'
import { migrate } from './storage/migrations.ts'
import { applyRetention, oldestEventReader } from './storage/retention.ts'
import { shortenCleanup } from './storage/erasure.ts'
import { Cluster } from 'ioredis'
import { checkPersistence, createRedis, KEY_REVOKED_CHANNEL, watch, type RedisClient } from './storage/redis.ts'
import { windowStartMs } from './rolling-day.ts'
import { BackupBusyError, refuseUnfinishedRestore, takeBackup } from './backup/backup.ts'
import type { BackupManifest } from './backup/manifest.ts'

export interface Services {
  config: Config
  /** The shared Redis (hot state, journal, rate limits, revocations); null in the embedded mode. */
  redis: RedisClient | null
  metrics: Metrics
  clock: Clock
  clickhouse: ClickHouseClient
  hotState: HotState
  ingest: IngestService
  holds: HoldService
  /** This instance's journal (the segment log, or its Redis streams): its backlog for /readyz. */
  journal: JournalStatus
  /** Rows moved to dead_letters since start (/readyz). */
  deadLetters(): number
  shipper: Shipper
  agents: AgentService
  runs: RunService
  exports: ExportService
  keys: ApiKeys
  webhooks: WebhookNotifier
  /** burnrate users erase: every row, key, hot-state and journal entry of the user (erasure/service.ts). */
  eraseUser(userId: string, actor: string): Promise<Erasure>
  /** Told what each OTLP export came to (its metric). */
  onOtlpExport(o: OtlpOutcome): void
  /** `burnrate backup` through the admin socket: embedded (segment log) only, one at a time. */
  backup?: (dir: string) => Promise<BackupManifest>
  /** Stores what is pending, lets notifications finish (bounded), closes the stores. */
  close(): Promise<void>
}

/**
 * Opens the stores, applies migrations and rebuilds the hot state from ClickHouse and the
 * journal. `onJournalFailure`: a journal write failed, the process must stop (see SegmentLog).
 */
export async function openServices(
  config: Config,
  opts: { clock?: Clock; log: FastifyBaseLogger; onJournalFailure?: (err: unknown) => void },
): Promise<Services> {
  const clock = opts.clock ?? systemClock
  const { log } = opts
  const prices = createPriceTable({ overrides: config.pricesFile ? await loadPricesFile(config.pricesFile) : null, clock })
  const clickhouse = createClickHouse(config)
  const applied = await migrate(clickhouse, undefined, {
    lock: { onWait: (holder) => log.info({ holder }, 'waiting for another instance to apply the migrations') },
  })
  if (applied.length > 0) log.info({ applied }, 'applied migrations')
  const retention = await applyRetention(clickhouse, config.retention)
  if (retention.length > 0) log.info({ retention }, 'applied retention')
  await shortenCleanup(clickhouse)

  // Two homes for the hot state and its journal: in process with a segment log
  // under DATA_DIR, or Redis with its streams, shared by every instance.
  const redis = config.redis ? createRedis(config.redis, log) : null
  const segmentLog = redis
    ? null
    : await SegmentLog.open({
        dir: join(config.dataDir, 'journal'),
        fsync: config.journal.fsync,
        maxRows: config.journal.maxRows,
        minFreeBytes: config.diskMinFreeBytes,
        onFailure: (err) => {
          log.fatal({ err }, 'the journal could not be written: stopping, a restart rebuilds from what is durable')
          opts.onJournalFailure?.(err)
        },
      })
  const redisJournal = redis
    ? new RedisJournal({
        redis,
        instance: randomUUID(),
        partitions: config.redisPartitions,
        maxRows: config.journal.maxRows,
        leaseMs: config.journal.leaseMs,
        replicaWait: config.redisWait,
      })
    : null
  if (redis && redisJournal) {
    await checkPersistence(redis, log)
    await redisJournal.register()
  }
  const journal = (segmentLog ?? redisJournal)!
  const memory = segmentLog ? new MemoryHotState(segmentLog, { graceMs: config.pauseGraceMs, runIdleMs: config.runAbandonedAfterMs }) : null
  const hotState: HotState =
    memory ??
    new RedisHotState({
      redis: redis!,
      journal: redisJournal!,
      loader: agentLoader(clickhouse, { runIdleMs: config.runAbandonedAfterMs, journalRows: (users) => redisJournal!.rowsOf(users) }),
      userAgents: async (userId, now) => (await agentTotals(clickhouse, userId, windowStartMs(now))).map((t) => t.agent_id),
      graceMs: config.pauseGraceMs,
      runIdleMs: config.runAbandonedAfterMs,
      replicaWait: config.redisWait,
    })
  const metrics = createMetrics({ journal: segmentLog ?? redisJournal!, agents: () => memory?.size ?? Number.NaN, merges: () => mergeStats(clickhouse), oldestEvent: oldestEventReader(clickhouse), freeBytes: segmentLog ? () => segmentLog.freeBytes : undefined })
  const webhooks = new WebhookNotifier({
    allowPrivate: config.webhook.allowPrivate,
    timeoutMs: config.webhook.timeoutMs,
    logger: log,
    registry: metrics.registry,
  })
  const notifier = new WebhookPauseNotifier(webhooks)
  let deadLetters = 0
  const onDeadLetter = (d: DeadLetter) => {
    deadLetters++
    metrics.deadLetters.inc()
    log.error({ table: d.table, error: d.error }, 'ClickHouse refused a journal row for its content: moved to the dead_letters table, the rest shipped')
  }
  const shipper = new Shipper({
    source: journal,
    clickhouse,
    maxRows: config.ship.maxRows,
    intervalMs: config.ship.intervalMs,
    log,
    onShipped: (s) => metrics.shipped(s),
    onFailed: () => metrics.shipFailures.inc(),
    onDeadLetter,
  })
  const ingest = new IngestService({
    hotState,
    prices,
    notifier,
    clock,
    log,
    // The segment log knows its backlog at once: a full batch ships without waiting.
    onRecorded: segmentLog ? () => segmentLog.backlog().rows >= config.ship.maxRows && shipper.kick() : undefined,
    onUnpriced: (quantities) => {
      for (const quantity of quantities) metrics.unpricedQuantities.inc({ quantity })
    },
    onIgnoredPause: () => metrics.ignoredPauses.inc(),
    onRunStopped: () => metrics.runStops.inc(),
    onChanges: (transitions, alerts) => {
      metrics.transitions(transitions)
      metrics.alerts(alerts)
    },
  })
  if (memory && segmentLog) {
    const transitions = await rebuildHotState(clickhouse, memory, clock.now(), segmentLog.unshipped())
    announceBudgetPauses(transitions, log, notifier)
    metrics.transitions(transitions)
  }
  shipper.start()
  // With Redis, journals of instances that died are shipped by whichever instance sees it first.
  const keeper = redisJournal ? keepJournal({ journal: redisJournal, clickhouse, maxRows: config.ship.maxRows, log, onDeadLetter }) : null

  const holds = new HoldService({ hotState, prices, clock, onHold: (refusal) => metrics.holds.inc({ result: refusal ?? 'granted' }) })
  const agents = new AgentService({
    clickhouse,
    hotState,
    clock,
    allowPrivateWebhooks: config.webhook.allowPrivate,
    onTransition: (t) => {
      metrics.transitions([t])
      announceBudgetPauses([t], log, notifier)
    },
  })
  const runs = new RunService({ clickhouse, hotState, clock, abandonedAfterMs: config.runAbandonedAfterMs })
  const exports = new ExportService({ clickhouse, concurrency: config.exports.concurrency, onOutcome: (format, outcome) => metrics.exports.inc({ format, outcome }) })
  const keys = new ApiKeys(clickhouse, {
    clock,
    cacheTtlMs: config.keyCacheTtlMs,
    onRevoked: redis ? (hash) => void redis.publish(KEY_REVOKED_CHANNEL, hash).catch(() => {}) : undefined,
  })
  // A key revoked through any instance stops working on every instance at once (without
  // Redis, within KEY_CACHE_TTL_MS).
  // On a cluster, PUBLISH reaches the subscribers of every node (the cluster bus carries it).
  const subscriber = redis ? duplicate(redis) : null
  if (subscriber) {
    watch(subscriber, log)
    await subscriber.subscribe(KEY_REVOKED_CHANNEL)
    subscriber.on('message', (_channel: string, hash: string) => keys.revoked(hash))
  }

  let backingUp = false
  const backup = async (dir: string) => {
    if (backingUp) throw new BackupBusyError()
    backingUp = true
    try {
      log.info({ dir }, 'backup: starting')
      const manifest = await takeBackup(
        { clickhouse, journal: segmentLog!, holdShipping: () => shipper.hold(), onHeld: () => log.info({ dir }, 'backup: shipping held, copying') },
        dir,
      )
      log.info({ dir, takenAt: manifest.taken_at, events: manifest.events, journalRows: manifest.journal.rows }, 'backup: taken, shipping resumed')
      return manifest
    } catch (err) {
      log.error({ err, dir }, 'backup: failed, shipping resumed')
      throw err
    } finally {
      backingUp = false
    }
  }

  return {
    config,
    redis,
    metrics,
    ...(segmentLog ? { backup } : {}),
    onOtlpExport: (o) => {
      for (const result of ['stored', 'ignored', 'rejected'] as const) if (o[result] > 0) metrics.otlpSpans.inc({ result }, o[result])
    },
    clock,
    clickhouse,
    hotState,
    ingest,
    holds,
    journal,
    deadLetters: () => deadLetters,
    shipper,
    agents,
    runs,
    exports,
    keys,
    webhooks,
    eraseUser: (userId, actor) => eraseUser({ clickhouse, keys, hotState, journal: (segmentLog ?? redisJournal)!, shipper, redis, clock }, userId, actor),
    async close() {
      // What is left stays in the journal and ships after the next start (or, with Redis,
      // from another instance once this one's lease has run out).
      await shipper.flush(5000)
      await shipper.stop()
      await keeper?.stop()
      await segmentLog?.close()
      await Promise.race([webhooks.drain(), new Promise((r) => setTimeout(r, 10_000).unref())])
      await hotState.close()
      subscriber?.disconnect()
      await redis?.quit()
      await clickhouse.close()
    },
  }
}

export interface RunningServer {
  app: FastifyInstance
  services: Services
  address: string
  /** http://host:port/metrics, when METRICS_PORT is set. */
  metricsAddress: string | null
  close(): Promise<void>
}

/** `burnrate serve`: stores, HTTP on HOST:PORT, the admin socket, and a drain on SIGTERM/SIGINT. */
export async function startServer(config: Config): Promise<RunningServer> {
  const log = pino({ level: config.logLevel })
  // Before opening the stores: a second server on one DATA_DIR stops here, with a message.
  // (With a ClickHouse server, DATA_DIR holds only the admin socket: create it too.)
  mkdirSync(config.dataDir, { recursive: true })
  await claimAdminSocket(adminSocketPath(config.dataDir))
  refuseUnfinishedRestore(config.dataDir)
  const services = await openServices(config, {
    log,
    // A write that failed may be counted in memory and not on disk: stop rather than answer from it.
    onJournalFailure: () => setImmediate(() => process.exit(1)),
  })
  const app = await buildApp({ ...services, log })
  let admin: Server | null = null
  let metricsServer: Server | null = null
  try {
    admin = await startAdminSocket(adminSocketPath(config.dataDir), services.keys, services.exports, services.eraseUser, services.backup)
    if (config.metricsPort !== undefined) metricsServer = await serveMetrics(services.metrics.registry, config.metricsPort, config.host)
    const address = await app.listen({ port: config.port, host: config.host })
    let closing: Promise<void> | null = null
    const close = () =>
      (closing ??= (async () => {
        await app.close() // stops accepting; in-flight requests finish with their batches
        await new Promise<void>((r) => (admin ? admin.close(() => r()) : r()))
        await new Promise<void>((r) => (metricsServer ? metricsServer.close(() => r()) : r()))
        await services.close()
      })())
    const bound = metricsServer?.address()
    const metricsAddress = bound && typeof bound === 'object' ? `http://${config.host}:${bound.port}/metrics` : null
    return { app, services, address, metricsAddress, close }
  } catch (err) {
    admin?.close()
    metricsServer?.close()
    await services.close()
    throw err
  }
}

/**
 * A second connection of the same kind (a subscriber takes a connection of its own). The two
 * branches read alike but call different methods: TypeScript cannot call duplicate() on the
 * union of the two clients, whose signatures differ.
 */
function duplicate(redis: RedisClient): RedisClient {
  return redis instanceof Cluster ? redis.duplicate() : redis.duplicate()
}
