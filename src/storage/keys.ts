import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { fromChDateTime, toChDateTime } from './clickhouse.ts'
import { insert, select } from './query.ts'

export interface ApiKeyRecord {
  keyId: string
  userId: string
  name: string
  keyHash: string
  rateLimit: number | null
  createdAt: string
  revokedAt: string | null
}

const keyRow = z
  .object({
    key_id: z.string(),
    user_id: z.string(),
    name: z.string(),
    key_hash: z.string(),
    rate_limit: z.coerce.number().int().nullable(),
    created: z.string(),
    revoked: z.string().nullable(),
  })
  .transform(
    (r): ApiKeyRecord => ({
      keyId: r.key_id,
      userId: r.user_id,
      name: r.name,
      keyHash: r.key_hash,
      rateLimit: r.rate_limit,
      createdAt: fromChDateTime(r.created),
      revokedAt: r.revoked === null ? null : fromChDateTime(r.revoked),
    }),
  )

function toRow(k: ApiKeyRecord, version: number) {
  return {
    key_id: k.keyId,
    user_id: k.userId,
    name: k.name,
    key_hash: k.keyHash,
    rate_limit: k.rateLimit,
    created_at: toChDateTime(Date.parse(k.createdAt)),
    revoked_at: k.revokedAt === null ? null : toChDateTime(Date.parse(k.revokedAt)),
    version,
  }
}

// The newest version of each key wins, merged or not. (argMax skips NULLs: fine here,
// a revocation is never undone and a key's rate limit never changes.)
const LATEST = `SELECT key_id,
    argMax(user_id, version) AS user_id, argMax(name, version) AS name,
    argMax(key_hash, version) AS key_hash, argMax(rate_limit, version) AS rate_limit,
    toString(argMax(created_at, version)) AS created,
    toString(argMax(revoked_at, version)) AS revoked
  FROM api_keys`

export function saveKey(client: ClickHouseClient, key: ApiKeyRecord, version: number): Promise<void> {
  return insert(client, 'api_keys', [toRow(key, version)])
}

export async function findKeyByHash(client: ClickHouseClient, keyHash: string): Promise<ApiKeyRecord | null> {
  const rows = await select(
    client,
    `${LATEST} WHERE key_id IN (SELECT key_id FROM api_keys WHERE key_hash = {hash:String}) GROUP BY key_id`,
    { hash: keyHash },
    keyRow,
  )
  return rows[0] ?? null
}

export async function findKeyById(client: ClickHouseClient, keyId: string): Promise<ApiKeyRecord | null> {
  const rows = await select(client, `${LATEST} WHERE key_id = {id:String} GROUP BY key_id`, { id: keyId }, keyRow)
  return rows[0] ?? null
}

export function listKeys(client: ClickHouseClient): Promise<ApiKeyRecord[]> {
  return select(client, `${LATEST} GROUP BY key_id ORDER BY created, key_id`, {}, keyRow)
}

/** The id of every key there is, revoked or not. */
export async function listKeyIds(client: ClickHouseClient): Promise<string[]> {
  const rows = await select(client, 'SELECT DISTINCT key_id FROM api_keys', {}, z.object({ key_id: z.string() }))
  return rows.map((r) => r.key_id)
}
