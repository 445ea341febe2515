import type { ClickHouseClient } from '@clickhouse/client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiKeys, generateKey, hashKey } from '../../src/auth/api-keys.ts'
import { ManualClock } from '../../src/clock.ts'
import { StoreUnavailableError } from '../../src/errors.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { migrate } from '../../src/storage/migrations.ts'
import { startClickHouseServer } from '../helpers/clickhouse-server.ts'

// Nothing on the path of POST /events may need ClickHouse, key verification included.
// A ClickHouse server (the real engine behind the HTTP interface) that can go away for real.
let server: Awaited<ReturnType<typeof startClickHouseServer>>
let clickhouse: ClickHouseClient
beforeAll(async () => {
  server = await startClickHouseServer()
  clickhouse = createClickHouse({ clickhouse: { kind: 'server', url: server.url }, clickhouseDatabase: 'default' })
  await migrate(clickhouse)
})
afterAll(async () => {
  await clickhouse?.close()
  await server?.stop()
})

/** ClickHouse down (connections refused) while `fn` runs, then back with its data. */
async function withClickHouseDown(fn: () => Promise<void>): Promise<void> {
  await server.stop()
  try {
    await fn()
  } finally {
    server = await startClickHouseServer({ path: server.path, port: server.port })
  }
}

describe('API key verification while ClickHouse is away', () => {
  it('keeps a verified key working past its cache TTL, and reads it again once ClickHouse answers', async () => {
    const clock = new ManualClock()
    const creator = new ApiKeys(clickhouse, { clock, cacheTtlMs: 0 })
    const { key, record } = await creator.create('alice')
    const keys = new ApiKeys(clickhouse, { clock, cacheTtlMs: 5000 }) // another instance: not created here
    const principal = { keyId: record.keyId, userId: 'alice', rateLimit: null }
    expect(await keys.verify(key)).toEqual(principal)

    const unknown = (await creator.create('bob')).key // never verified by `keys`
    await withClickHouseDown(async () => {
      clock.advance(60_000)
      expect(await keys.verify(key)).toEqual(principal)
      clock.advance(60_000)
      expect(await keys.verify(key)).toEqual(principal)
      await expect(keys.verify(unknown)).rejects.toBeInstanceOf(StoreUnavailableError)
    })
    await creator.revoke(record.keyId)
    clock.advance(60_000)
    expect(await keys.verify(key)).toBeNull() // read again, and the revocation is seen
    expect(await keys.verify(unknown)).toMatchObject({ userId: 'bob' })
  })

  it('stops a key at once when another instance says it was revoked, ClickHouse away or not', async () => {
    const clock = new ManualClock()
    const keys = new ApiKeys(clickhouse, { clock, cacheTtlMs: 5000 })
    const { key } = await keys.create('carol')
    expect(await keys.verify(key)).toMatchObject({ userId: 'carol' })
    await withClickHouseDown(async () => {
      keys.revoked(hashKey(key))
      expect(await keys.verify(key)).toBeNull()
      clock.advance(60_000)
      await expect(keys.verify(key)).resolves.toBeNull()
    })
  })
})

describe('API keys nobody has (floods of made-up keys)', () => {
  it('refuses a key not shaped like one without a read, and remembers an unknown one for the TTL', async () => {
    const clock = new ManualClock()
    const keys = new ApiKeys(clickhouse, { clock, cacheTtlMs: 5000 })
    const madeUp = generateKey().key
    expect(await keys.verify(madeUp)).toBeNull() // one read: nobody has it
    await withClickHouseDown(async () => {
      // No read for either: a malformed key never needs one, an unknown one is remembered.
      for (const bad of ['br_', 'br_zzzzzzzzzzzz_x', `${madeUp}x`, 'sk-live-123', madeUp.replace('br_', 'br-')]) expect(await keys.verify(bad)).toBeNull()
      expect(await keys.verify(madeUp)).toBeNull()
      clock.advance(5001)
      // Forgotten after the TTL: a key created meanwhile elsewhere is not refused for long.
      await expect(keys.verify(madeUp)).rejects.toBeInstanceOf(StoreUnavailableError)
    })
  })

  it('lets a key created through this instance in at once, even after it was tried as unknown', async () => {
    const keys = new ApiKeys(clickhouse, { clock: new ManualClock(), cacheTtlMs: 5000 })
    const { key } = await keys.create('dave')
    expect(await keys.verify(key)).toMatchObject({ userId: 'dave' })
  })
})
