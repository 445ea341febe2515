import { request, type IncomingMessage } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isoMicros, seedEvents } from './helpers/exports.ts'
import { eventually, startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * A client that stops reading an export is cut off after EXPORT_STALL_TIMEOUT_MS (2 s
 * here): its query stops and its slot is freed, so clients that hang cannot hold every slot.
 * One that reads slowly but goes on is not.
 */

let h: Harness
let base: string
beforeAll(async () => {
  h = await startHarness({ env: { EXPORT_STALL_TIMEOUT_MS: '2000', EXPORT_CONCURRENCY: '1' } })
  base = await h.listen()
})
afterAll(async () => {
  await h?.close()
})

function open(path: string, key: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, { headers: { 'x-api-key': key }, agent: false }, resolve)
    req.on('error', reject)
    req.end()
  })
}

describe('an export whose client stops reading', () => {
  it('is cut off, its slot freed; a slow reader that goes on is not', async () => {
    const user = unique('stalled')
    const key = await h.key(user)
    const start = Date.UTC(2026, 4, 1) * 1000
    // Far more than the sockets' buffers hold: the export waits on its client.
    await seedEvents(h.services.clickhouse, { user, n: 60_000, startUs: start, stepUs: 1000 })
    const range = `from=${isoMicros(start)}&to=${isoMicros(start + 60_000 * 1000)}&format=ndjson`

    const stalled = await open(`/export?${range}`, key)
    expect(stalled.statusCode).toBe(200)
    const ended = new Promise<string>((resolve) => {
      stalled.once('error', () => resolve('error'))
      stalled.once('close', () => resolve(stalled.complete ? 'complete' : 'cut'))
    })
    stalled.pause()
    expect(h.services.exports.running).toBe(1)
    expect((await h.app.inject({ method: 'GET', url: `/export?${range}`, headers: { 'x-api-key': key } })).statusCode).toBe(503)
    await eventually(() => (h.services.exports.running === 0 ? true : undefined), 15_000)
    stalled.resume()
    expect(await ended).not.toBe('complete')

    // A reader that waits a quarter of a second after each of its first chunks: longer than
    // the timeout in all, never idle for long (the server's writes wait on TCP's window too).
    const slow = await open(`/export?${range}`, key)
    let lines = 0
    let chunks = 0
    for await (const chunk of slow) {
      lines += (chunk as Buffer).toString('utf8').split('\n').length - 1
      if (++chunks <= 8) await new Promise((r) => setTimeout(r, 250))
    }
    expect(lines).toBe(60_000)
  }, 60_000)
})
