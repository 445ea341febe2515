/**
 * WebhookNotifier against a real HTTP receiver on 127.0.0.1 (real sockets, no HTTP mocks).
 * The receiver is on loopback, so delivery tests allow private targets; the SSRF tests do not.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Registry } from 'prom-client'
import { afterEach, describe, expect, it } from 'vitest'
import { WebhookNotifier } from '../../src/notify/webhook.ts'
import type { NotifierOptions, PauseNotice } from '../../src/notify/webhook.ts'

interface Received {
  body: string
  contentType: string | undefined
  id: string | undefined
  at: number
}

type Responder = (n: number, res: http.ServerResponse) => void

interface Receiver {
  url: string
  port: number
  received: Received[]
}

const servers: http.Server[] = []

afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
})

/** A chat-webhook receiver; `respond` gets the 1-based request number. */
async function startReceiver(respond: Responder): Promise<Receiver> {
  const received: Received[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      received.push({ body: Buffer.concat(chunks).toString('utf8'), contentType: req.headers['content-type'], id: req.headers['idempotency-key'] as string | undefined, at: Date.now() })
      respond(received.length, res)
    })
  })
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}/services/T000/B000/secret`, port, received }
}

const reply = (status: number, headers: Record<string, string> = {}) => (res: http.ServerResponse) => {
  res.writeHead(status, headers).end(status === 200 ? 'ok' : 'error')
}

interface Logged {
  obj: Record<string, unknown>
  msg: string
}

function notifier(opts: Partial<NotifierOptions> = {}) {
  const warnings: Logged[] = []
  const n = new WebhookNotifier({
    allowPrivate: true,
    backoffMs: 10,
    logger: { warn: (obj, msg) => warnings.push({ obj: obj as Record<string, unknown>, msg }), info: () => {} },
    ...opts,
  })
  return { n, warnings }
}

const notice: PauseNotice = {
  id: 'pause-7f3a',
  userId: 'user-1',
  agentId: 'research-agent-7',
  totalUsd: 12.5,
  thresholdUsd: 10,
  at: new Date('2026-01-01T12:00:00.000Z'),
}

describe('delivery', () => {
  it('posts one JSON message naming the agent, its 24 h total and its threshold, in the background', async () => {
    const rx = await startReceiver((_, res) => reply(200)(res))
    const { n } = notifier()

    n.notify(rx.url, notice)
    // Fire and forget: notify returned before anything reached the receiver.
    expect(n.stats.inFlight).toBe(1)
    expect(rx.received).toHaveLength(0)
    await n.drain()

    expect(rx.received).toHaveLength(1)
    expect(rx.received[0]?.contentType).toBe('application/json')
    expect(JSON.parse(rx.received[0]?.body ?? '')).toEqual({
      text: 'burnrate paused agent `research-agent-7`: its 24 h spend $12.50 exceeded its daily budget of $10.00 (2026-01-01T12:00:00Z).',
    })
    expect(rx.received[0]?.id).toBe('pause-7f3a')
    expect(n.stats).toEqual({ sent: 1, failed: 0, unconfirmed: 0, retried: 0, refused: 0, inFlight: 0 })
  })

  it('retries the answers that say the message was not taken (502, 503), with the same body and id', async () => {
    for (const status of [502, 503]) {
      const rx = await startReceiver((i, res) => reply(i === 1 ? status : 200)(res))
      const { n } = notifier()

      n.notify(rx.url, notice)
      await n.drain()

      expect(rx.received).toHaveLength(2)
      expect(rx.received[1]?.body).toBe(rx.received[0]?.body)
      expect(rx.received.map((r) => r.id)).toEqual(['pause-7f3a', 'pause-7f3a'])
      expect(n.stats).toMatchObject({ sent: 1, failed: 0, retried: 1, inFlight: 0 })
    }
  })

  it('does not repeat a message after an answer that may follow its delivery (500, 504)', async () => {
    for (const status of [500, 504]) {
      const rx = await startReceiver((_, res) => reply(status)(res))
      const { n } = notifier()
      n.notify(rx.url, notice)
      await n.drain()
      expect(rx.received).toHaveLength(1)
      expect(n.stats).toMatchObject({ sent: 0, failed: 1, retried: 0 })
    }
  })

  it('sends a slow receiver its message once: 200 after the deadline is not a reason to send it again', async () => {
    // Answers each request after 3 deadlines (a receiver taking 7 s against a 5 s timeout,
    // scaled down).
    const rx = await startReceiver((_, res) => setTimeout(() => reply(200)(res), 600))
    const { n, warnings } = notifier({ timeoutMs: 200 })

    n.notify(rx.url, notice)
    n.notify(rx.url, { ...notice, id: 'pause-other', agentId: 'other' })
    // Settled: no attempt is left to come, whatever the receiver does later.
    await n.drain()

    expect(rx.received.map((r) => r.id).sort()).toEqual(['pause-7f3a', 'pause-other'])
    expect(n.stats).toMatchObject({ sent: 0, failed: 0, unconfirmed: 2, retried: 0, inFlight: 0 })
    expect(warnings[0]?.obj).toMatchObject({ outcome: 'unconfirmed', error: 'timeout', sent: true, attempt: 1 })
  })

  it('does not retry a 400', async () => {
    const rx = await startReceiver((_, res) => reply(400)(res))
    const { n, warnings } = notifier()

    n.notify(rx.url, notice)
    await n.drain()

    expect(rx.received).toHaveLength(1)
    expect(n.stats).toMatchObject({ sent: 0, failed: 1, retried: 0 })
    expect(warnings[0]?.obj).toMatchObject({ outcome: 'failed', status: 400, attempt: 1 })
  })

  it('waits as long as Retry-After says on a 429', async () => {
    const rx = await startReceiver((i, res) => (i === 1 ? reply(429, { 'retry-after': '1' }) : reply(200))(res))
    const { n } = notifier()

    n.notify(rx.url, notice)
    await n.drain()

    expect(rx.received).toHaveLength(2)
    const gap = (rx.received[1]?.at ?? 0) - (rx.received[0]?.at ?? 0)
    expect(gap).toBeGreaterThanOrEqual(900)
    expect(n.stats).toMatchObject({ sent: 1, retried: 1, failed: 0 })
  })

  it('retries a refused connection, then gives up after maxAttempts', async () => {
    // A port that was just free: nothing listens on it.
    const rx = await startReceiver(() => {})
    const server = servers.pop()
    await new Promise((resolve) => server?.close(resolve))
    const { n, warnings } = notifier({ maxAttempts: 3 })

    n.notify(rx.url, notice)
    await n.drain()

    expect(n.stats).toMatchObject({ sent: 0, failed: 1, retried: 2, inFlight: 0 })
    expect(warnings[0]?.obj).toMatchObject({ outcome: 'failed', error: 'ECONNREFUSED', attempt: 3 })
  })

  it('never logs the secret path of the URL', async () => {
    const rx = await startReceiver((_, res) => reply(400)(res))
    const { n, warnings } = notifier()

    n.notify(rx.url, notice)
    await n.drain()

    expect(warnings[0]?.obj).toMatchObject({ host: `127.0.0.1:${rx.port}` })
    expect(JSON.stringify(warnings)).not.toContain('secret')
  })
})

describe('SSRF guard (WEBHOOK_ALLOW_PRIVATE=false)', () => {
  it('refuses a loopback IP literal and a host name resolving to loopback; the receiver gets nothing', async () => {
    const rx = await startReceiver((_, res) => reply(200)(res))
    const { n, warnings } = notifier({ allowPrivate: false })

    n.notify(`http://127.0.0.1:${rx.port}/hook`, notice)
    n.notify(`http://localhost:${rx.port}/hook`, notice)
    await n.drain()

    expect(rx.received).toHaveLength(0)
    expect(n.stats).toEqual({ sent: 0, failed: 0, unconfirmed: 0, retried: 0, refused: 2, inFlight: 0 })
    expect(warnings.map((w) => w.obj.outcome)).toEqual(['refused', 'refused'])
    // The name was refused by the lookup Node connects with, on the address DNS returned.
    const byName = warnings.find((w) => w.obj.error === 'blocked_address')
    expect(['127.0.0.1', '::1']).toContain(byName?.obj.address)
    expect(byName?.obj.attempt).toBe(1)
  })
})

describe('robustness', () => {
  it('never throws from notify(): an invalid URL is refused and a bad notice fails', async () => {
    const { n } = notifier()

    expect(() => n.notify('not a url', notice)).not.toThrow()
    expect(() => n.notify('ftp://example.com/x', notice)).not.toThrow()
    expect(() => n.notify('http://127.0.0.1:9/x', { ...notice, at: new Date(Number.NaN) })).not.toThrow()
    await n.drain()

    expect(n.stats).toMatchObject({ refused: 2, failed: 1, sent: 0, inFlight: 0 })
  })

  it('survives a logger that throws', async () => {
    const n = new WebhookNotifier({
      allowPrivate: false,
      logger: {
        warn: () => {
          throw new Error('logger down')
        },
      },
    })

    expect(() => n.notify('http://10.0.0.1/x', notice)).not.toThrow()
    await n.drain()
    expect(n.stats.refused).toBe(1)
  })
})

describe('Prometheus counters', () => {
  it('counts deliveries by outcome and retries in the registry passed in', async () => {
    const rx = await startReceiver((i, res) => reply(i === 1 ? 503 : 200)(res))
    const registry = new Registry()
    const { n } = notifier({ registry })

    n.notify(rx.url, notice)
    n.notify('ftp://example.com/hook', { ...notice, agentId: 'other' })
    await n.drain()

    const text = await registry.metrics()
    expect(text).toContain('burnrate_webhook_deliveries_total{outcome="sent"} 1')
    expect(text).toContain('burnrate_webhook_deliveries_total{outcome="refused"} 1')
    expect(text).toContain('burnrate_webhook_deliveries_total{outcome="failed"} 0')
    expect(text).toContain('burnrate_webhook_deliveries_total{outcome="unconfirmed"} 0')
    expect(text).toContain('burnrate_webhook_retries_total 1')
    // A second notifier on the same registry shares the counters instead of failing to register.
    expect(() => notifier({ registry })).not.toThrow()
  })
})
