import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { ClickHouseClient } from '@clickhouse/client'
import { countRecords, SegmentLog } from '../journal/segment-log.ts'
import { JOURNAL_TABLES } from '../journal/types.ts'
import { backupDatabase, currentDatabase, partRows, plainTables, restoreDatabase, schemaVersion } from '../storage/backups.ts'
import { readMigrations } from '../storage/migrations.ts'
import { CLICKHOUSE_DIR, JOURNAL_FILE, newManifest, readManifest, writeManifest, type BackupManifest } from './manifest.ts'

/**
 * Online backup of the embedded store: ClickHouse's own BACKUP of the database plus the
 * journal's rows not yet shipped, both of one moment.
 *
 * The consistency point: the shipper is held (nothing moves from the journal into
 * ClickHouse), so ClickHouse holds exactly the journal's rows up to its shipped offset; the
 * BACKUP copies those; then the journal is copied from that offset to its end at that moment,
 * whole records. A row is in one half or the other, never both, and every row the journal
 * had taken at the point (every event acknowledged before it) is in one of them. POST
 * /events goes on meanwhile: rows appended after the point are not in the backup. Then the
 * shipper resumes. The hot state (totals, pauses, configs) is not copied: a restored server
 * rebuilds it from the two halves as any start does. Budget holds live in the hot state only
 * and are not in a backup, as a restart does not keep them.
 */

export interface BackupSource {
  clickhouse: ClickHouseClient
  journal: SegmentLog
  /** Stops the shipper until the release is called (Shipper.hold); none when nothing ships (no server). */
  holdShipping?: () => Promise<() => void>
  /** Told when shipping is held and the copy begins (the server's log). */
  onHeld?: () => void
}

/** A backup was asked for while one is under way. */
export class BackupBusyError extends Error {
  constructor() {
    super('a backup is already under way on this server')
    this.name = 'BackupBusyError'
  }
}

/** Writes a backup into `dir` (absent, or an empty directory) and returns its manifest. */
export async function takeBackup(source: BackupSource, dir: string): Promise<BackupManifest> {
  claimEmptyDir(dir, 'the backup directory')
  const release = (await source.holdShipping?.()) ?? (() => {})
  try {
    source.onHeld?.()
    const schema = await schemaVersion(source.clickhouse)
    // The client's own database: embedded, chDB's current one (CLICKHOUSE_DATABASE names a server's).
    const database = await currentDatabase(source.clickhouse)
    // The rows of the tables the journal fills, which restore checks: only the shipper inserts
    // into them, and it is held. A merge that drops expired rows (a retention TTL) may still
    // change one during the BACKUP: a count that moved is left out, not recorded wrong.
    const plain = await plainTables(source.clickhouse, JOURNAL_TABLES)
    const before = await partRows(source.clickhouse, plain)
    await backupDatabase(source.clickhouse, database, join(dir, CLICKHOUSE_DIR))
    const after = await partRows(source.clickhouse, plain)
    const rows = Object.fromEntries(plain.flatMap((t) => (before[t] === after[t] ? [[t, after[t]!]] : [])))
    const takenAt = new Date()
    const copy = await source.journal.copyUnshipped(join(dir, JOURNAL_FILE))
    release()
    const manifest = newManifest({
      burnrate_version: packageVersion(),
      schema_version: schema,
      database,
      taken_at: takenAt.toISOString(),
      events: (after.events ?? 0) + copy.rows.events,
      clickhouse: { rows },
      journal: { file: JOURNAL_FILE, log_id: copy.id, from: copy.from, to: copy.to, bytes: copy.bytes, sha256: copy.sha256, rows: copy.rows },
    })
    await writeManifest(dir, manifest)
    return manifest
  } finally {
    release()
  }
}

/**
 * DATA_DIR/RESTORE_INCOMPLETE: present while a restore writes DATA_DIR. A server refuses to
 * start on a DATA_DIR that has it (a restore cut short would serve part of a backup).
 */
export const RESTORE_MARKER = 'RESTORE_INCOMPLETE'

/** Throws when a restore into `dataDir` did not finish. */
export function refuseUnfinishedRestore(dataDir: string): void {
  if (existsSync(join(dataDir, RESTORE_MARKER))) {
    throw new Error(`DATA_DIR ${dataDir} holds a restore that did not finish (${RESTORE_MARKER}): empty it and run burnrate restore again`)
  }
}

export interface RestoreTarget {
  dataDir: string
  /** Where the journal lives in DATA_DIR. */
  journalDir: string
  /** A ClickHouse client on DATA_DIR's engine, opened once the checks have passed; closed here. */
  openClickHouse: () => ClickHouseClient
}

/**
 * Restores the backup in `from` into an empty (or absent) DATA_DIR: ClickHouse's RESTORE of
 * the database, checked against the manifest's counts, then a new journal whose unshipped rows
 * are the backup's tail, under a new id, so its batches' deduplication tokens are new to
 * ClickHouse (the restored tables keep no deduplication log: a token the old journal used
 * would not be recognised, and its rows are not in ClickHouse anyway). A server started on it
 * ships the tail once and rebuilds the hot state as after a restart.
 */
export async function restoreBackup(from: string, target: RestoreTarget): Promise<BackupManifest> {
  const manifest = await readManifest(from)
  const known = Math.max(0, ...(await readMigrations()).map((m) => m.version))
  if (manifest.schema_version > known) {
    throw new Error(`the backup's schema is version ${manifest.schema_version}, newer than this burnrate's (${known}): restore it with burnrate ${manifest.burnrate_version} or later`)
  }
  const tail = join(from, JOURNAL_FILE)
  const digest = createHash('sha256').update(await readFile(tail)).digest('hex')
  if (digest !== manifest.journal.sha256) throw new Error(`${tail} is not the file the backup wrote (its SHA-256 differs from the manifest's)`)
  const tailRows = await countRecords(tail)
  for (const table of JOURNAL_TABLES) {
    if (tailRows[table] !== manifest.journal.rows[table]) throw new Error(`${tail} holds ${tailRows[table]} ${table} rows, the manifest says ${manifest.journal.rows[table]}`)
  }
  claimEmptyDir(target.dataDir, 'DATA_DIR')
  await writeFile(join(target.dataDir, RESTORE_MARKER), `burnrate restore --from ${from} began at ${new Date().toISOString()} and has not finished\n`)
  const clickhouse = target.openClickHouse()
  try {
    await restoreDatabase(clickhouse, manifest.database, await currentDatabase(clickhouse), join(from, CLICKHOUSE_DIR))
    const rows = await partRows(clickhouse, Object.keys(manifest.clickhouse.rows))
    for (const [table, n] of Object.entries(manifest.clickhouse.rows)) {
      if (rows[table] !== n) throw new Error(`the restored table ${table} holds ${rows[table] ?? 'no'} rows, the manifest says ${n}`)
    }
  } finally {
    await clickhouse.close()
  }
  await SegmentLog.seed(target.journalDir, tail)
  await rm(join(target.dataDir, RESTORE_MARKER))
  return manifest
}

/** Creates `dir`, or checks that it is an empty directory. */
function claimEmptyDir(dir: string, what: string): void {
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory()) throw new Error(`${what} ${dir} is not a directory`)
    if (readdirSync(dir).length > 0) throw new Error(`${what} ${dir} is not empty`)
  }
  mkdirSync(dir, { recursive: true })
}

/** The version of the burnrate package this file belongs to. */
function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown }
  return String(pkg.version)
}
