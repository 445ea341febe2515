import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiKeys, generateKey } from '../../src/auth/api-keys.ts'
import { ManualClock } from '../../src/clock.ts'
import { llmCall, startHarness, unique, type Harness } from '../helpers/harness.ts'

// An address that keeps presenting keys that fail is answered 429 for the rest of the
// minute; a valid key is never refused because of its address (an office behind one NAT).
const clock = new ManualClock(Date.now())
let h: Harness
beforeAll(async () => {
  h = await startHarness({ clock, env: { AUTH_FAILURES_PER_MINUTE: '30' } })
})
afterAll(() => h?.close())

const post = (key: string | null, remoteAddress = '203.0.113.7') =>
  h.app.inject({
    method: 'POST',
    url: '/events',
    remoteAddress,
    headers: { 'content-type': 'application/json', ...(key === null ? {} : { 'x-api-key': key }) },
    payload: JSON.stringify(llmCall('a')),
  })

describe('failed authentications per client address', () => {
  it('answers 429 with Retry-After past 30 failures a minute, spares verified keys and other addresses, and forgets after the minute', async () => {
    const valid = await h.key(unique('u'))
    expect((await post(valid)).statusCode).toBe(200) // verified before the flood
    const statuses: number[] = []
    // Missing, malformed and (fewer: each waits for a read of the key ids) made-up keys.
    for (let i = 0; i < 40; i++) statuses.push((await post(i % 3 === 0 ? null : i % 10 === 1 ? generateKey().key : `br_${i}`)).statusCode)
    expect(statuses.slice(0, 30)).toEqual(Array(30).fill(401))
    expect(statuses.slice(30)).toEqual(Array(10).fill(429))

    const limited = await post(generateKey().key)
    expect(limited.json()).toMatchObject({ code: 'rate_limited' })
    const retryAfter = Number(limited.headers['retry-after'])
    expect(retryAfter).toBeGreaterThan(0)
    expect(retryAfter).toBeLessThanOrEqual(60)
    // The flood's address, with a key that works: served, whether verified before or not
    // (its verification read again after KEY_CACHE_TTL_MS, or never verified at all).
    expect((await post(valid)).statusCode).toBe(200)
    clock.advance(6000)
    expect((await post(valid)).statusCode).toBe(200)
    // A key this instance has never seen (made through another instance or the CLI).
    const elsewhere = new ApiKeys(h.services.clickhouse, { clock, cacheTtlMs: 5000 })
    expect((await post((await elsewhere.create(unique('u'))).key)).statusCode).toBe(200)
    expect((await post(generateKey().key)).statusCode).toBe(429)
    // Another address: its own count.
    expect((await post(generateKey().key, '198.51.100.1')).statusCode).toBe(401)

    clock.advance(60_001)
    expect((await post(generateKey().key)).statusCode).toBe(401)
  })
})
