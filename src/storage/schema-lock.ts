import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { toChDateTime } from './clickhouse.ts'
import { ensureTable, insert, select } from './query.ts'

/**
 * The lock migrations are applied under, so that two instances starting at once on one
 * ClickHouse do not apply them both. ClickHouse has no transactions and no locks; what it
 * has is insert deduplication: a block whose insert_deduplication_token the table has seen
 * (within non_replicated_deduplication_window blocks, or the replicated window on a cluster)
 * is acknowledged and not stored. That makes a compare-and-set.
 *
 * The lock is a sequence of epochs. Epoch E is claimed by one INSERT of a 'claim' row whose
 * token is `claim:E`: whoever inserts it first stores it, every later claim of E is dropped,
 * and reading the claim of E back says who holds it. A claimant first reads the newest
 * epoch: while it is held (claimed, not released, its lease not run out), it waits; once it
 * is free, it claims the next. A lease (renewed while the holder works) frees the lock of a
 * holder that died, judged by ClickHouse's clock. Embedded (chDB), one process opens the
 * data path and the lock is always free; it is taken all the same: one code path.
 */

export interface SchemaLockOptions {
  /** How long a claim or renewal holds the lock without another renewal (default 30 s). */
  leaseMs?: number
  /** How often a waiting instance reads the lock again (default 250 ms). */
  pollMs?: number
  /** Who takes it, as waiting instances are told (default hostname:pid). */
  holder?: string
  /** Told once, when the lock is first found held by another: who holds it. */
  onWait?: (holder: string) => void
}

export interface SchemaLock {
  /** Throws when the lease may have run out (renewals failed): the work must stop. */
  check(): void
  /** Frees the lock for the next instance; throws when ClickHouse did not take the release. */
  release(): Promise<void>
}

export class SchemaLockLostError extends Error {
  constructor(holder: string, cause: unknown) {
    super(`the schema lock of ${holder} could not be renewed before its lease ran out: another instance may be migrating, stopping`, { cause })
    this.name = 'SchemaLockLostError'
  }
}

const TABLE = `CREATE TABLE IF NOT EXISTS schema_lock
(
    epoch      UInt64,
    kind       Enum8('claim' = 1, 'renew' = 2, 'release' = 3),
    token      String,
    holder     String,
    expires_at DateTime64(3, 'UTC'),
    at         DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY epoch
SETTINGS non_replicated_deduplication_window = 1000`

// The newest epoch (0, never claimed, on an empty table) and its state, with ClickHouse's now.
const STATE = `SELECT
    (SELECT max(epoch) FROM schema_lock) AS epoch,
    anyIf(token, kind = 'claim') AS token,
    anyIf(holder, kind = 'claim') AS holder,
    toUnixTimestamp64Milli(max(expires_at)) AS expires_ms,
    countIf(kind = 'release') AS releases,
    toUnixTimestamp64Milli(now64(3)) AS now_ms
FROM schema_lock
WHERE epoch = (SELECT max(epoch) FROM schema_lock)`

const int = z.union([z.number(), z.string()]).transform(Number)
const stateRow = z.object({ epoch: int, token: z.string(), holder: z.string(), expires_ms: int, releases: int, now_ms: int })
const claimRow = z.object({ token: z.string() })

/** Takes the schema lock, waiting while another instance holds it. */
export async function acquireSchemaLock(client: ClickHouseClient, opts: SchemaLockOptions = {}): Promise<SchemaLock> {
  const leaseMs = opts.leaseMs ?? 30_000
  const pollMs = opts.pollMs ?? 250
  const holder = opts.holder ?? `${hostname()}:${process.pid}`
  const token = randomUUID()
  await ensureTable(client, TABLE)
  let waitingFor: string | null = null
  for (;;) {
    // The lease is counted from here, before ClickHouse read the now it ends from.
    const readAt = Date.now()
    const [state] = await select(client, STATE, {}, stateRow)
    const s = state!
    const held = s.token !== '' && s.releases === 0 && s.expires_ms > s.now_ms
    if (!held) {
      const epoch = s.epoch + 1
      const row = { epoch, kind: 'claim', token, holder, expires_at: toChDateTime(s.now_ms + leaseMs) }
      await insert(client, 'schema_lock', [row], `schema_lock:claim:${epoch}`)
      const [claim] = await select(client, `SELECT token FROM schema_lock WHERE epoch = {epoch:UInt64} AND kind = 'claim'`, { epoch }, claimRow)
      // skewMs: the clock of ClickHouse less ours, for the expiry of renewals.
      if (claim?.token === token) return heldLock(client, { epoch, token, holder, leaseMs, skewMs: s.now_ms - readAt, validUntil: readAt + leaseMs })
    } else if (waitingFor !== s.holder) {
      waitingFor = s.holder
      opts.onWait?.(s.holder)
    }
    await new Promise((r) => setTimeout(r, pollMs))
  }
}

/** A claimed epoch: renewed every third of its lease until released. */
function heldLock(client: ClickHouseClient, o: { epoch: number; token: string; holder: string; leaseMs: number; skewMs: number; validUntil: number }): SchemaLock {
  let validUntil = o.validUntil
  let renewals = 0
  let renewing: Promise<void> = Promise.resolve()
  let lastFailure: unknown = null
  const renew = async () => {
    const started = Date.now()
    const row = { epoch: o.epoch, kind: 'renew', token: o.token, holder: o.holder, expires_at: toChDateTime(started + o.skewMs + o.leaseMs) }
    await insert(client, 'schema_lock', [row], `schema_lock:renew:${o.epoch}:${++renewals}`)
    validUntil = started + o.leaseMs
  }
  // A renewal that fails leaves validUntil as it was: check() stops the work once it passes,
  // with the failure as the cause (the next renewal may still succeed before then).
  const timer = setInterval(() => {
    renewing = renewing.then(renew).catch((err: unknown) => {
      lastFailure = err
    })
  }, Math.max(1, Math.floor(o.leaseMs / 3)))
  timer.unref()
  return {
    check() {
      if (Date.now() >= validUntil) throw new SchemaLockLostError(o.holder, lastFailure)
    },
    async release() {
      clearInterval(timer)
      await renewing
      const row = { epoch: o.epoch, kind: 'release', token: o.token, holder: o.holder, expires_at: toChDateTime(0) }
      await insert(client, 'schema_lock', [row], `schema_lock:release:${o.epoch}`)
    },
  }
}
