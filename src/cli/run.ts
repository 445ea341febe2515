import type { ClickHouseClient } from '@clickhouse/client'
import { join, resolve } from 'node:path'
import { restoreBackup, takeBackup } from '../backup/backup.ts'
import type { BackupManifest } from '../backup/manifest.ts'
import { SegmentLog } from '../journal/segment-log.ts'
import { createWriteStream, existsSync, renameSync, rmSync } from 'node:fs'
import { userInfo } from 'node:os'
import { pino } from 'pino'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { CreatedKey } from '../auth/api-keys.ts'
import type { Erasure } from '../erasure/service.ts'
import { ApiKeys } from '../auth/api-keys.ts'
import { systemClock } from '../clock.ts'
import type { Config } from '../config.ts'
import { openServices, startServer } from '../server.ts'
import { createClickHouse } from '../storage/clickhouse.ts'
import type { ApiKeyRecord } from '../storage/keys.ts'
import { migrate, migrationStatus, SchemaTooNewError, type Migration } from '../storage/migrations.ts'
import { applyRetention, retentionChanges } from '../storage/retention.ts'
import { Problem } from '../errors.ts'
import { parse } from '../routes/parse.ts'
import { exportQuery, exportRange, type ExportRange } from '../schemas/export.ts'
import { exportEvents } from '../storage/exports.ts'
import { AdminError, adminExport, adminRequest, adminSocketPath, claimAdminSocket, isListening, refuseAdminRequests } from './admin.ts'
import { COMMANDS, usage } from './commands.ts'
import { complain, holdConsole, say } from './output.ts'

/** Runs a command whose command line commands.ts has checked. Resolves to the exit status. */
export function run(command: string, config: Config, values: Record<string, string | undefined>, positionals: string[]): Promise<number> {
  switch (command) {
    case 'serve':
      return serve(config)
    case 'migrate':
      return migrateCommand(config, values['dry-run'] !== undefined)
    case 'keys create':
      return createKey(config, values.user!, values.name ?? '', values['rate-limit'] === undefined ? null : Number(values['rate-limit']))
    case 'keys list':
      return listKeys(config)
    case 'keys revoke':
      return revokeKey(config, positionals[0]!)
    case 'export':
      return exportCommand(config, values)
    case 'users erase':
      return eraseCommand(config, values.user!)
    case 'backup':
      return backupCommand(config, values.to!)
    case 'restore':
      return restoreCommand(config, values.from!)
    default:
      throw new Error(`no handler for the command '${command}'`)
  }
}

async function serve(config: Config): Promise<number> {
  // A start-up failure is one line (main.ts); once serving, the libraries log as they do.
  const release = holdConsole()
  const server = await startServer(config).catch((err: unknown) => {
    release(false)
    throw err
  })
  release(true)
  server.app.log.info({ address: server.address, ...stores(config), metrics: server.metricsAddress ?? 'off (METRICS_PORT unset)' }, 'burnrate is serving')
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      server.app.log.info({ signal }, 'draining: finishing in-flight batches')
      server.close().then(resolve, (err: unknown) => {
        server.app.log.error({ err }, 'error while shutting down')
        resolve()
      })
    }
    process.once('SIGTERM', () => stop('SIGTERM'))
    process.once('SIGINT', () => stop('SIGINT'))
  })
  return 0
}

/**
 * What the start-up line says the service runs on: the hot state, the journal and
 * ClickHouse, by where they are and never with their credentials.
 */
function stores(config: Config): { hotState: string; journal: string; clickhouse: string } {
  const r = config.redis
  const redis = !r ? null : r.kind === 'single' ? `Redis at ${where(r.url)}` : `Redis Cluster at ${r.nodes.map((n) => `${n.host}:${n.port}`).join(',')}`
  return {
    hotState: redis ?? 'in process',
    journal: redis ? `${redis} (streams)` : `segment log in ${config.dataDir}`,
    clickhouse: config.clickhouse.kind === 'embedded' ? `embedded (chDB) in ${config.clickhouse.path}` : `server at ${where(config.clickhouse.url)}`,
  }
}

/** A store's URL as a log may show it: scheme, host and port, no user, password or path. */
function where(url: string): string {
  const u = new URL(url)
  return `${u.protocol}//${u.host}`
}

/** Whether a `burnrate serve` answers on DATA_DIR's admin socket. */
async function serverRunning(dataDir: string): Promise<boolean> {
  const socket = adminSocketPath(dataDir)
  return existsSync(socket) && (await isListening(socket))
}

async function migrateCommand(config: Config, dryRun: boolean): Promise<number> {
  // chDB opens a data path in one process only. The admin socket has no migrate operation, and
  // needs none: the server applied every migration it has when it started. (A dry run is
  // refused too: what the server's release applied is all there is to see while it runs.)
  if (config.clickhouse.kind === 'embedded' && (await serverRunning(config.dataDir))) {
    complain(`burnrate migrate: a burnrate server is running on DATA_DIR ${config.dataDir} and holds its ClickHouse; it applied the migrations when it started`)
    return 1
  }
  try {
    if (dryRun) {
      const { pending, retention } = await withClickHouse(config, async (clickhouse) => ({
        ...(await migrationStatus(clickhouse)),
        retention: await retentionChanges(clickhouse, config.retention),
      }))
      say(pending.length > 0 || retention.length > 0 ? dryRunText(pending, retention) : 'the schema is up to date')
      return 0
    }
    const applied = await withClickHouse(config, async (clickhouse) => [...(await migrate(clickhouse)), ...(await applyRetention(clickhouse, config.retention))])
    say(applied.length > 0 ? `applied ${applied.join(', ')}` : 'the schema is up to date')
    return 0
  } catch (err) {
    if (!(err instanceof Error && err.cause instanceof SchemaTooNewError)) throw err
    complain(`burnrate migrate: ${err.cause.message}`)
    return 1
  }
}

/** The migrations a dry run finds pending, as SQL a reader can check: each named, then its statements. */
function dryRunText(pending: readonly Migration[], retention: readonly string[]): string {
  const parts = pending.map((m) => [`-- ${m.name}`, ...m.statements.map((s) => `${s};`)].join('\n\n'))
  const count = pending.length === 1 ? '1 migration' : `${pending.length} migrations`
  if (retention.length > 0) parts.push(['-- retention (TTLs) to set:', ...retention.map((r) => `--   ${r}`)].join('\n'))
  return `${parts.join('\n\n')}\n\n-- ${count}${retention.length > 0 ? ` and ${retention.length} retention setting${retention.length === 1 ? '' : 's'}` : ''} would be applied (--dry-run: nothing was changed)`
}

/** What the key commands need, from ApiKeys itself or from a running server's admin socket. */
type KeyCommands = Pick<ApiKeys, 'create' | 'list' | 'revoke'>

function adminKeys(socket: string): KeyCommands {
  return {
    create: (user, opts = {}) => adminRequest<CreatedKey>(socket, 'POST', '/keys', { user, name: opts.name ?? '', rate_limit: opts.rateLimit ?? null }),
    list: () => adminRequest<ApiKeyRecord[]>(socket, 'GET', '/keys'),
    revoke: (keyId) =>
      adminRequest<ApiKeyRecord>(socket, 'POST', `/keys/${encodeURIComponent(keyId)}/revoke`).catch((err: unknown) => {
        if (err instanceof AdminError && err.status === 404) return null
        throw err
      }),
  }
}

/**
 * Runs a key command against a running server's admin socket when there is one (it holds
 * the embedded data path, and its key cache learns at once), else directly on ClickHouse.
 */
async function withKeyCommands<T>(config: Config, fn: (keys: KeyCommands) => Promise<T>): Promise<T> {
  if (await serverRunning(config.dataDir)) {
    return fn(adminKeys(adminSocketPath(config.dataDir))).catch((err: unknown) => {
      throw new Error(`the burnrate server on DATA_DIR ${config.dataDir}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
    })
  }
  return withClickHouse(config, async (clickhouse) => {
    await migrate(clickhouse)
    return fn(new ApiKeys(clickhouse, { clock: systemClock, cacheTtlMs: 0 }))
  })
}

/** A ClickHouse client for one command; a failure names the ClickHouse it came from. */
async function withClickHouse<T>(config: Config, fn: (clickhouse: ClickHouseClient) => Promise<T>): Promise<T> {
  const release = holdConsole()
  const where =
    config.clickhouse.kind === 'server' ? `ClickHouse at ${withoutCredentials(config.clickhouse.url)}` : `ClickHouse (embedded, ${config.clickhouse.path})`
  try {
    const clickhouse = createClickHouse(config)
    try {
      const result = await fn(clickhouse)
      release(true)
      return result
    } finally {
      await clickhouse.close().catch(() => {})
    }
  } catch (err) {
    release(false)
    throw new Error(`${where}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
  }
}

function withoutCredentials(url: string): string {
  const u = new URL(url)
  return `${u.protocol}//${u.host}${u.pathname === '/' ? '' : u.pathname}`
}

async function createKey(config: Config, user: string, name: string, rateLimit: number | null): Promise<number> {
  const created = await withKeyCommands(config, (keys) => keys.create(user, { name, rateLimit }))
  say(`created key ${created.record.keyId} for user ${created.record.userId}; it is shown once:`)
  say(created.key)
  return 0
}

async function listKeys(config: Config): Promise<number> {
  const keys = await withKeyCommands(config, (k) => k.list())
  say(['KEY ID', 'USER', 'NAME', 'RATE LIMIT', 'CREATED', 'REVOKED'].join('\t'))
  for (const k of keys) {
    say([k.keyId, k.userId, k.name || '-', k.rateLimit ?? 'default', k.createdAt, k.revokedAt ?? '-'].join('\t'))
  }
  return 0
}

async function revokeKey(config: Config, keyId: string): Promise<number> {
  // revoke() of a revoked key returns it unchanged, so whether it already was is read first:
  // an operator who revokes the wrong id twice is told so, not reassured. (Two revocations
  // racing between the read and the write may both say "revoked": the key is, either way.)
  const outcome = await withKeyCommands(config, async (keys) => {
    const before = (await keys.list()).find((k) => k.keyId === keyId)
    if (!before || before.revokedAt !== null) return { before: before ?? null, revoked: null }
    return { before, revoked: await keys.revoke(keyId) }
  })
  if (outcome.before?.revokedAt) {
    complain(`burnrate keys revoke: key ${keyId} was already revoked at ${outcome.before.revokedAt}`)
    return 1
  }
  if (!outcome.revoked) {
    complain(`burnrate keys revoke: no key has the id ${keyId} (burnrate keys list shows them)`)
    return 1
  }
  say(`revoked key ${outcome.revoked.keyId} of user ${outcome.revoked.userId}`)
  return 0
}

/**
 * `burnrate export`: the same query as GET /export, through a running server's admin socket
 * (it holds the embedded data path) or on ClickHouse itself. The bytes go to stdout, or to
 * --out through a file beside it that is renamed once the export is whole.
 */
async function exportCommand(config: Config, values: Record<string, string | undefined>): Promise<number> {
  let range: ExportRange
  try {
    range = exportRange(parse(exportQuery, { from: values.from, to: values.to, format: values.format }, 'invalid_query'), Date.now())
  } catch (err) {
    if (!(err instanceof Problem)) throw err
    // The fields are the options: "from: …" is "--from: …".
    const reason = (err.errors ?? []).map((e) => `--${e.field}: ${e.message}`).join('; ') || err.message
    complain(`burnrate export: ${reason}\n\n${usage(COMMANDS.export!, { brief: true })}`)
    return 2
  }
  const user = values.user!
  const out = values.out
  const write = async (source: Readable) => {
    if (out === undefined) return pipeline(source, process.stdout)
    const partial = `${out}.partial`
    try {
      await pipeline(source, createWriteStream(partial))
      renameSync(partial, out)
    } catch (err) {
      rmSync(partial, { force: true })
      throw err
    }
  }
  try {
    if (config.clickhouse.kind === 'embedded' && (await serverRunning(config.dataDir))) {
      await write(await adminExport(adminSocketPath(config.dataDir), user, range)).catch((err: unknown) => {
        throw new Error(`the burnrate server on DATA_DIR ${config.dataDir}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
      })
    } else {
      await withClickHouse(config, async (clickhouse) => {
        await migrate(clickhouse)
        await write(await exportEvents(clickhouse, { userId: user, ...range }))
      })
    }
  } catch (err) {
    // A reader of stdout that stops early (`| head`) is not a failure of the export.
    if (out === undefined && (err as NodeJS.ErrnoException | undefined)?.code === 'EPIPE') return 0
    throw err
  }
  if (out !== undefined) say(`exported the events of user ${user} to ${out}`)
  return 0
}

/**
 * `burnrate users erase`: through a running server's admin socket (it holds the data path and
 * the hot state, and goes on serving), or with the stores opened here as a server opens them.
 */
async function eraseCommand(config: Config, user: string): Promise<number> {
  const actor = `cli:${osUser()}`
  let erasure: Erasure
  if (await serverRunning(config.dataDir)) {
    erasure = await adminRequest<Erasure>(adminSocketPath(config.dataDir), 'POST', '/users/erase', { user, actor }).catch((err: unknown) => {
      throw new Error(`the burnrate server on DATA_DIR ${config.dataDir}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
    })
  } else {
    const release = holdConsole()
    // Its log goes to stderr, warnings up: stdout is the command's answer.
    const services = await openServices(config, { log: pino({ level: 'warn' }, pino.destination(2)) }).catch((err: unknown) => {
      release(false)
      throw err
    })
    try {
      erasure = await services.eraseUser(user, actor)
    } finally {
      await services.close()
      release(true)
    }
  }
  say(`erased user ${user}; the audit log records it as ${erasure.subject}`)
  say(['KIND', 'REMOVED'].join('\t'))
  for (const [kind, n] of Object.entries(erasure.removed)) say(`${kind}\t${n}`)
  for (const node of erasure.unconfirmed) complain(`burnrate users erase: could not confirm that Redis at ${node} wrote its persistence files again (BGREWRITEAOF): check it has no copy of the user`)
  return 0
}

/** Who runs the command, for the audit record: the OS user, when the system names one. */
function osUser(): string {
  try {
    return userInfo().username
  } catch {
    return 'unknown'
  }
}

/** Why backup and restore do not run on this configuration, or null when they do. */
function notEmbedded(config: Config): string | null {
  if (config.clickhouse.kind === 'server') return 'CLICKHOUSE_URL is set: back up the ClickHouse server and Redis as docs/backups.md says'
  if (config.redis) return "REDIS_URL is set: the journal is Redis's; back up ClickHouse and Redis as docs/backups.md says"
  return null
}

/**
 * `burnrate backup --to DIR`: through a running server's admin socket (it holds the data and
 * the journal, and holds its shipper for the copy), else on DATA_DIR itself, with the admin
 * socket taken meanwhile so that a server does not start on it halfway.
 */
async function backupCommand(config: Config, to: string): Promise<number> {
  const why = notEmbedded(config)
  // (The second test is the first's, said so that TypeScript knows the store's path.)
  if (why !== null || config.clickhouse.kind !== 'embedded') {
    complain(`burnrate backup: ${why}`)
    return 1
  }
  const store = config.clickhouse.path
  const dir = resolve(to)
  const socket = adminSocketPath(config.dataDir)
  let manifest: BackupManifest
  if (await serverRunning(config.dataDir)) {
    manifest = await adminRequest<BackupManifest>(socket, 'POST', '/backup', { to: dir }).catch((err: unknown) => {
      throw new Error(`the burnrate server on DATA_DIR ${config.dataDir}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
    })
  } else {
    if (!existsSync(store)) {
      complain(`burnrate backup: DATA_DIR ${config.dataDir} holds no burnrate store (no ${store})`)
      return 1
    }
    await claimAdminSocket(socket)
    const guard = await refuseAdminRequests(socket, 'burnrate backup is copying this DATA_DIR')
    try {
      const journal = await SegmentLog.open({ dir: join(config.dataDir, 'journal'), fsync: config.journal.fsync, maxRows: config.journal.maxRows })
      try {
        manifest = await withClickHouse(config, (clickhouse) => takeBackup({ clickhouse, journal }, dir))
      } finally {
        await journal.close()
      }
    } finally {
      await new Promise<void>((r) => guard.close(() => r()))
    }
  }
  const tail = manifest.journal.rows.events ?? 0
  say(`backed up DATA_DIR ${config.dataDir} as of ${manifest.taken_at} to ${dir}: ${manifest.events} events (${manifest.events - tail} in ClickHouse, ${tail} in the journal's tail), schema version ${manifest.schema_version}`)
  return 0
}

/** `burnrate restore --from DIR` into an empty (or absent) DATA_DIR. */
async function restoreCommand(config: Config, from: string): Promise<number> {
  const why = notEmbedded(config)
  if (why) {
    complain(`burnrate restore: ${why}`)
    return 1
  }
  const release = holdConsole()
  const manifest = await restoreBackup(resolve(from), {
    dataDir: config.dataDir,
    journalDir: join(config.dataDir, 'journal'),
    openClickHouse: () => createClickHouse(config),
  }).catch((err: unknown) => {
    release(false)
    throw err
  })
  release(true)
  say(`restored the backup of ${manifest.taken_at} into DATA_DIR ${config.dataDir}: ${manifest.events} events; burnrate serve starts on it`)
  return 0
}
