import { open, readFile, rename } from 'node:fs/promises'
import { join } from 'node:path'
import { z } from 'zod'
import { JOURNAL_TABLES } from '../journal/types.ts'

/**
 * DIR/manifest.json: what a backup holds and of which moment. It is written last, so a
 * directory without one is a backup that did not finish (restore refuses it).
 */
export const MANIFEST_FILE = 'manifest.json'
/** ClickHouse's BACKUP of the database. */
export const CLICKHOUSE_DIR = 'clickhouse'
/** The journal's rows not yet shipped at the backup's point, as records of the segment log. */
export const JOURNAL_FILE = 'journal.log'

const FORMAT = 'burnrate-backup/1'

const tableRows = z.record(z.string(), z.number().int().nonnegative())

export const manifestSchema = z.object({
  format: z.literal(FORMAT),
  burnrate_version: z.string(),
  /** The last migration applied to the database backed up (sql/NNNN_…). */
  schema_version: z.number().int().nonnegative(),
  database: z.string(),
  /** The backup's point: every row the journal had taken by then is in the backup, none after. */
  taken_at: z.iso.datetime(),
  /** Events in the backup: those in ClickHouse plus those in the journal's tail. */
  events: z.number().int().nonnegative(),
  clickhouse: z.object({
    /** Rows of the journal's plain MergeTree tables (their parts' rows), checked against the restored parts. */
    rows: tableRows,
  }),
  journal: z.object({
    file: z.literal(JOURNAL_FILE),
    /** The journal's id and the offsets copied: from its shipped point to its end at the point. */
    log_id: z.string(),
    from: z.number().int().nonnegative(),
    to: z.number().int().nonnegative(),
    bytes: z.number().int().nonnegative(),
    sha256: z.string().regex(/^[0-9a-f]{64}$/),
    rows: z.object(Object.fromEntries(JOURNAL_TABLES.map((t) => [t, z.number().int().nonnegative()]))),
  }),
})

export type BackupManifest = z.infer<typeof manifestSchema>

export function newManifest(m: Omit<BackupManifest, 'format'>): BackupManifest {
  return { format: FORMAT, ...m }
}

/** Writes the manifest through a file beside it, synced, then renamed: it appears whole or not at all. */
export async function writeManifest(dir: string, manifest: BackupManifest): Promise<void> {
  const path = join(dir, MANIFEST_FILE)
  const file = await open(`${path}.tmp`, 'wx')
  try {
    await file.writeFile(`${JSON.stringify(manifest, null, 2)}\n`)
    await file.datasync()
  } finally {
    await file.close()
  }
  await rename(`${path}.tmp`, path)
}

/** The manifest of the backup in `dir`; throws saying why it is not one that can be restored. */
export async function readManifest(dir: string): Promise<BackupManifest> {
  let text: string
  try {
    text = await readFile(join(dir, MANIFEST_FILE), 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    throw new Error(`${dir} holds no ${MANIFEST_FILE}: not a burnrate backup, or one that did not finish`, { cause: err })
  }
  const parsed = manifestSchema.safeParse(JSON.parse(text))
  if (!parsed.success) throw new Error(`${join(dir, MANIFEST_FILE)} is not a manifest this burnrate reads: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`)
  return parsed.data
}
