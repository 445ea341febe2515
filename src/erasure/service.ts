import { setTimeout as sleep } from 'node:timers/promises'
import type { ClickHouseClient } from '@clickhouse/client'
import type { ApiKeys } from '../auth/api-keys.ts'
import type { Clock } from '../clock.ts'
import type { HotState } from '../hot-state/types.ts'
import type { Shipper } from '../journal/shipper.ts'
import type { ErasableJournal } from '../journal/types.ts'
import { eventsBudget, ROUTE_LIMITS_PREFIX } from '../routes/limits.ts'
import { countUserRows, deleteUserRows, erasureSubject, recordErasure, userAgentIds, waitForReplacedParts } from '../storage/erasure.ts'
import { rewritePersistence, unlinkMatching, type RedisClient } from '../storage/redis.ts'

export interface ErasureDeps {
  clickhouse: ClickHouseClient
  keys: ApiKeys
  hotState: HotState
  journal: ErasableJournal
  shipper: Shipper
  /** The shared Redis, whose persistence files are written again after; null embedded. */
  redis: RedisClient | null
  clock: Clock
}

export interface Erasure {
  /** What the audit log's record of it is filed under (storage/erasure.ts erasureSubject). */
  subject: string
  /**
   * What it removed, by kind: each table's rows (the journal's rows of the user count in
   * their tables once shipped), `api_keys_revoked`, `hot_state` entries and `journal_unshipped`,
   * the user's journal rows not yet in ClickHouse when it began.
   */
  removed: Record<string, number>
  /** Redis nodes whose persistence files could not be confirmed rewritten. */
  unconfirmed: string[]
}

/** How long an erasure waits for a journal to ship, for a Redis rewrite. */
const WAIT_MS = 120_000

/**
 * How long it waits for the parts ClickHouse replaced to leave the disk: a ClickHouse server
 * keeps them old_parts_lifetime first, 480 s by default (chDB none).
 */
const PARTS_WAIT_MS = 600_000

/** Passes at most: another one runs when an event of the user was counted during the last. */
const MAX_PASSES = 5

/**
 * burnrate users erase: every row, key, hot-state entry and journal entry of one user goes,
 * and one audit record says so (storage/erasure.ts recordErasure). Safe while events of
 * other users arrive. In this order:
 *
 * 1. The user's API keys are revoked, so their requests are refused (401) from now on, on
 *    every instance (the revocation is published through Redis).
 * 2. The hot state forgets the user: no read answers from it, and nothing of it is written
 *    back from memory.
 * 3. The journal ships every row of the user it holds (they are deleted with the others) and
 *    begins a new segment (embedded) after them.
 * 4. ClickHouse deletes the user's rows from every table of USER_DATA.
 * 5. A request authenticated just before step 1 may still have been counted after step 2: the
 *    hot state is asked again, and a pass that finds anything is followed by another.
 * 6. The parts ClickHouse replaced, the journal's shipped segments or stream nodes, and
 *    Redis's append-only file are removed or written again without the user's bytes.
 */
export async function eraseUser(deps: ErasureDeps, userId: string, actor: string): Promise<Erasure> {
  const { clickhouse, keys, hotState, journal, clock } = deps
  const removed: Record<string, number> = {}
  const add = (kind: string, n: number) => (removed[kind] = (removed[kind] ?? 0) + n)

  const userKeys = (await keys.list()).filter((k) => k.userId === userId)
  for (const k of userKeys) await keys.revoke(k.keyId)
  add('api_keys_revoked', userKeys.filter((k) => k.revokedAt === null).length)
  const budgets = userKeys.map((k) => eventsBudget(k.keyId))

  for (let pass = 1; ; pass++) {
    const agentIds = await userAgentIds(clickhouse, userId)
    add('hot_state', await hotState.erase(userId, { agentIds, budgets }))
    const seal = await journal.seal(userId)
    add('journal_unshipped', seal.rows)
    await shipped(deps.shipper, seal.shipped)
    for (const [table, n] of Object.entries(await countUserRows(clickhouse, userId))) add(table, n)
    await deleteUserRows(clickhouse, userId)
    const late = await hotState.erase(userId, { agentIds: await userAgentIds(clickhouse, userId), budgets })
    add('hot_state', late)
    if (late === 0) break
    if (pass === MAX_PASSES) throw new Error(`events of the user kept being counted after ${MAX_PASSES} passes: are its API keys revoked everywhere?`)
  }

  // The other routes' limits (@fastify/rate-limit) count per key id in Redis too; in process they are memory only.
  for (const k of userKeys) if (deps.redis) add('hot_state', await unlinkMatching(deps.redis, `${ROUTE_LIMITS_PREFIX}*:${k.keyId}`))
  await waitForReplacedParts(clickhouse, PARTS_WAIT_MS)
  await journal.scrub(userId)
  const unconfirmed = deps.redis ? await rewritePersistence(deps.redis, WAIT_MS) : []
  await recordErasure(clickhouse, { userId, actor, at: clock.now(), removed })
  return { subject: erasureSubject(userId), removed, unconfirmed }
}

/** Waits, with a deadline, until the shipper (this instance's, or another's) has shipped what the seal covers. */
async function shipped(shipper: Shipper, done: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + WAIT_MS
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`the journal did not ship the user's rows within ${WAIT_MS} ms: is ClickHouse reachable, is every instance running?`)
    shipper.kick()
    await sleep(50)
  }
}
