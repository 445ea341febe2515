import type { ClickHouseClient } from '@clickhouse/client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiKeys, generateKey, hashKey } from '../../src/auth/api-keys.ts'
import { ManualClock } from '../../src/clock.ts'
import { StoreUnavailableError } from '../../src/errors.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { migrate } from '../../src/storage/migrations.ts'
import { startClickHouseServer } from '../helpers/clickhouse-server.ts'
import { startCountingProxy } from '../helpers/counting-proxy.ts'

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
    // Answered as before while it is read again; the read sees the revocation.
    expect(await keys.verify(key)).toEqual(principal)
    expect(await keys.verify(key)).toBeNull()
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
  it('refuses a key not shaped like one, or of an id no key has, without a read of its own', async () => {
    const proxy = await startCountingProxy(server.url)
    const counted = createClickHouse({ clickhouse: { kind: 'server', url: proxy.url }, clickhouseDatabase: 'default' })
    try {
      const keys = new ApiKeys(counted, { clock: new ManualClock(), cacheTtlMs: 5000 })
      const real = await new ApiKeys(clickhouse, { clock: new ManualClock(), cacheTtlMs: 5000 }).create('ivan')
      const madeUp = generateKey().key
      const malformed = ['br_', 'br_zzzzzzzzzzzz_x', `${madeUp}x`, 'sk-live-123', madeUp.replace('br_', 'br-')]
      const flood = () => [...malformed, ...Array.from({ length: 200 }, () => generateKey().key)].map((k) => keys.verify(k))
      expect(await Promise.all(flood())).toEqual(Array(205).fill(null))
      expect(await Promise.all(flood())).toEqual(Array(205).fill(null)) // again, a second later at most
      // Two reads of the ids in all, none of a key; a real key's one read of its own.
      const reads = () => proxy.queries.filter((q) => /SELECT/i.test(q))
      expect(reads().map((q) => (q.includes('DISTINCT key_id') ? 'ids' : 'key'))).toEqual(['ids', 'ids'])
      expect(await keys.verify(real.key)).toMatchObject({ userId: 'ivan' })
      expect(reads().filter((q) => q.includes('key_hash'))).toHaveLength(1)
    } finally {
      await counted.close()
      await proxy.close()
    }
  })

  it('finds a key created elsewhere by reading the ids again', async () => {
    const keys = new ApiKeys(clickhouse, { clock: new ManualClock(), cacheTtlMs: 5000 })
    const elsewhere = new ApiKeys(clickhouse, { clock: new ManualClock(), cacheTtlMs: 5000 }) // another instance, or the CLI
    expect(await keys.verify(generateKey().key)).toBeNull() // the ids are read
    const created = await elsewhere.create('frank')
    expect(await keys.verify(created.key)).toMatchObject({ userId: 'frank' }) // at the next read, within a second
  })

  it('lets a key created through this instance in at once, even after it was tried as unknown', async () => {
    const keys = new ApiKeys(clickhouse, { clock: new ManualClock(), cacheTtlMs: 5000 })
    const { key } = await keys.create('dave')
    expect(await keys.verify(key)).toMatchObject({ userId: 'dave' })
  })
})
