import { randomUUID } from 'node:crypto'
import { existsSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { startRedis } from './helpers/redis.ts'
import { api, createKey, drained, freshDataDir, cleanup, nano, startServe, waitFor, withDeadline, type ServerProcess } from './helpers/process.ts'

// An acknowledged event is never lost: not by a crash of the service (kill -9), not by a
// restart. Real `burnrate serve` processes on chDB, real sockets.

const sockets: Socket[] = []
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy()
  await cleanup()
})

interface Planned {
  event_id: string
  agent_id: string
  input_tokens: number
}

interface Ack {
  agentId: string
  costNano: number
  paused: boolean
  totalNano: number
}

interface LoadResult {
  acked: Map<string, Ack>
  /** Sent, and no HTTP answer came (the connection failed or was cut). */
  unanswered: Set<string>
  /** Answered with a status other than 200. */
  refused: Map<string, number>
  /** Requests the client had sent and not yet had answered when the signal went out. */
  inFlightAtSignal: number
}

/** `count` llm_calls over `agents` agents, each with its own event_id and a slightly different cost. */
function plan(count: number, agents: string[]): Planned[] {
  return Array.from({ length: count }, (_, i) => ({ event_id: randomUUID(), agent_id: agents[i % agents.length]!, input_tokens: 1000 + i }))
}

/**
 * Sends `events` with `concurrency` requests at a time; once `signalAfter` of them are
 * acknowledged, sends `signal` to the server while the others are still in flight. A
 * worker stops at its first failure after the signal, so the run ends soon after it.
 */
async function load(server: ServerProcess, key: string, events: Planned[], opts: { concurrency: number; signalAfter: number; signal: NodeJS.Signals }): Promise<LoadResult> {
  const result: LoadResult = { acked: new Map(), unanswered: new Set(), refused: new Map(), inFlightAtSignal: -1 }
  let next = 0
  let inFlight = 0
  let signalled = false
  const worker = async () => {
    while (next < events.length) {
      const e = events[next++]!
      inFlight++
      try {
        const res = await api(server.url, 'POST', '/events', key, { ...e, event_type: 'llm_call', model: 'gpt-4o', output_tokens: 500 })
        // (A 200 with an unexpected body counts as refused: the tests expect none.)
        if (res.status === 200 && res.body?.ok === true && res.body.event_id === e.event_id) {
          result.acked.set(e.event_id, { agentId: e.agent_id, costNano: nano(res.body.cost_usd), paused: res.body.paused, totalNano: nano(res.body.total_cost_24h) })
          if (!signalled && result.acked.size >= opts.signalAfter) {
            signalled = true
            result.inFlightAtSignal = inFlight - 1 // the others, sent and not answered
            server.kill(opts.signal)
          }
        } else {
          result.refused.set(e.event_id, res.status)
          if (signalled) return
        }
      } catch {
        result.unanswered.add(e.event_id)
        if (signalled) return
      } finally {
        inFlight--
      }
    }
  }
  await withDeadline(Promise.all(Array.from({ length: opts.concurrency }, worker)), 30_000, 'load did not finish')
  return result
}

interface StoredEvent {
  event_id: string
  agent_id: string
  cost_usd: number
  event_type: string
}

/**
 * Every event ClickHouse holds for the key's user, once this instance's journal has shipped
 * what it holds and ClickHouse holds every event of `expected` (with Redis, a dead
 * instance's journal is shipped by the one that takes it over).
 */
async function storedEvents(url: string, key: string, expected: Iterable<string> = []): Promise<StoredEvent[]> {
  await drained(url)
  const wanted = [...expected]
  return waitFor(
    async () => {
      const res = await api(url, 'GET', '/agents/events?limit=1000', key)
      expect(res.status).toBe(200)
      const ids = new Set((res.body.events as StoredEvent[]).map((e) => e.event_id))
      return wanted.every((id) => ids.has(id)) ? (res.body.events as StoredEvent[]) : undefined
    },
    20_000,
    `${wanted.length} acknowledged events in ClickHouse`,
  )
}

async function agentsById(url: string, key: string): Promise<Map<string, { total_cost_usd: number; llm_calls: number; is_paused: boolean; cost_threshold_usd?: number }>> {
  const res = await api(url, 'GET', '/agents', key)
  expect(res.status).toBe(200)
  return new Map(res.body.agents.map((a: { agent_id: string }) => [a.agent_id, a]))
}

function sumBy<T>(items: Iterable<T>, agentOf: (t: T) => string, costOf: (t: T) => number): Map<string, number> {
  const sums = new Map<string, number>()
  for (const t of items) sums.set(agentOf(t), (sums.get(agentOf(t)) ?? 0) + costOf(t))
  return sums
}

/** Every acknowledged event is stored exactly once; nothing is stored that was never sent. */
function expectAllAckedStoredOnce(stored: StoredEvent[], planned: Planned[], acked: Map<string, Ack>): void {
  const ids = stored.map((e) => e.event_id)
  expect(new Set(ids).size).toBe(ids.length) // no event twice
  const sent = new Set(planned.map((p) => p.event_id))
  expect(ids.filter((id) => !sent.has(id))).toEqual([])
  const storedIds = new Set(ids)
  expect([...acked.keys()].filter((id) => !storedIds.has(id))).toEqual([]) // none acknowledged is missing
  const byId = new Map(stored.map((e) => [e.event_id, e]))
  for (const [id, ack] of acked) {
    expect(byId.get(id)).toMatchObject({ agent_id: ack.agentId, event_type: 'llm_call' })
    expect(nano(byId.get(id)!.cost_usd)).toBe(ack.costNano)
  }
}

// The same crash, with the hot state in process (rebuilt from ClickHouse at start) and in a
// Redis that outlives the process (the restarted instance finds its state there).
let redis: Awaited<ReturnType<typeof startRedis>> | null = null
afterAll(async () => {
  await redis?.stop()
})
const hotStates: Array<[string, () => Promise<Record<string, string>>]> = [
  ['in process', async () => ({})],
  // A short lease: the restarted instance takes the dead one's journal over within a second.
  ['in Redis', async () => ({ REDIS_URL: (redis ??= await startRedis()).url, JOURNAL_LEASE_MS: '1000' })],
]

describe.each(hotStates)('kill -9 under load, hot state %s', (_name, hotStateEnv) => {
  it('loses no acknowledged event, keeps the budget pause, and dedups retries after restart', async () => {
    const dataDir = freshDataDir()
    const env = await hotStateEnv()
    let server = await startServe(dataDir, env)
    // The CLI reaches the running server through the admin socket under DATA_DIR.
    const { key } = await createKey(dataDir, 'ops', ['--rate-limit', '100000'])

    // a0 has a budget its events cross early; a1 and a2 keep the 10 USD default.
    const cfg = await api(server.url, 'POST', '/config', key, { agent_id: 'a0', cost_threshold_usd: 0.1 })
    expect(cfg).toEqual({ status: 200, body: { ok: true } })

    const events = plan(300, ['a0', 'a1', 'a2'])
    const run = await load(server, key, events, { concurrency: 20, signalAfter: 150, signal: 'SIGKILL' })
    expect(await withDeadline(server.exited, 10_000, 'server did not die')).toEqual({ code: null, signal: 'SIGKILL' })

    expect(run.inFlightAtSignal).toBeGreaterThan(0) // the kill hit requests in flight
    expect(run.acked.size).toBeGreaterThanOrEqual(150)
    expect(run.refused).toEqual(new Map()) // every answer before the kill was a 200
    const a0Acks = [...run.acked.values()].filter((a) => a.agentId === 'a0')
    expect(a0Acks.some((a) => a.paused)).toBe(true) // the crossing was acknowledged before the kill
    // A kill -9 leaves the admin socket file behind: the restart must not trip on it.
    expect(existsSync(join(dataDir, 'burnrate.sock'))).toBe(true)

    server = await startServe(dataDir, env)

    // The clients of the requests the crash cut off retry them with the same event_id, as
    // the client libraries do, until they are answered (a claim the dead instance left is
    // busy for a few seconds, then taken over).
    for (const id of run.unanswered) {
      const e = events.find((p) => p.event_id === id)!
      const retry = await waitFor(async () => {
        const res = await api(server.url, 'POST', '/events', key, { ...e, event_type: 'llm_call', model: 'gpt-4o', output_tokens: 500 })
        return res.status === 200 ? res : undefined
      }, 15_000, `the retry of ${id} to be answered`)
      run.acked.set(id, { agentId: e.agent_id, costNano: nano(retry.body.cost_usd), paused: retry.body.paused, totalNano: nano(retry.body.total_cost_24h) })
    }

    const stored = await storedEvents(server.url, key, run.acked.keys())
    expectAllAckedStoredOnce(stored, events, run.acked)
    // An event without an answer may or may not be stored; nothing else can be.
    const answeredOrInFlight = new Set([...run.acked.keys(), ...run.unanswered])
    expect(stored.filter((e) => !answeredOrInFlight.has(e.event_id))).toEqual([])

    const storedSums = sumBy(stored, (e) => e.agent_id, (e) => nano(e.cost_usd))
    const ackedSums = sumBy(run.acked.values(), (a) => a.agentId, (a) => a.costNano)
    const agents = await agentsById(server.url, key)
    expect([...agents.keys()].sort()).toEqual(['a0', 'a1', 'a2'])
    for (const [agentId, a] of agents) {
      expect(nano(a.total_cost_usd)).toBe(storedSums.get(agentId))
      expect(nano(a.total_cost_usd)).toBeGreaterThanOrEqual(ackedSums.get(agentId)!)
      expect(a.llm_calls).toBe(stored.filter((e) => e.agent_id === agentId).length)
    }
    expect(agents.get('a0')).toMatchObject({ is_paused: true, cost_threshold_usd: 0.1 })
    expect(agents.get('a1')!.is_paused).toBe(false)
    expect(agents.get('a2')!.is_paused).toBe(false)

    const detail = await api(server.url, 'GET', '/agents/a0?limit=1000', key)
    expect(detail.status).toBe(200)
    expect(detail.body).toMatchObject({ agent_id: 'a0', is_paused: true, paused_reason: 'budget', llm_calls: stored.filter((e) => e.agent_id === 'a0').length })
    expect(new Set(detail.body.events.map((e: StoredEvent) => e.event_id))).toEqual(new Set(stored.filter((e) => e.agent_id === 'a0').map((e) => e.event_id)))

    // The rebuilt hot state agrees with the store: the next event of a0 is told to stop,
    // and its running total is the stored total plus its own cost.
    const more = await api(server.url, 'POST', '/events', key, { agent_id: 'a0', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, event_id: randomUUID() })
    expect(more.status).toBe(200)
    expect(more.body).toMatchObject({ ok: true, paused: true, cost_usd: 0.0075 })
    expect(nano(more.body.total_cost_24h)).toBe(storedSums.get('a0')! + nano(0.0075))

    // A retry of an acknowledged event is acknowledged as a duplicate, at its first cost, and not counted again.
    const [retryId, retried] = [...run.acked].find(([, a]) => a.agentId === 'a1')!
    const original = events.find((e) => e.event_id === retryId)!
    const again = await api(server.url, 'POST', '/events', key, { ...original, event_type: 'llm_call', model: 'gpt-4o', output_tokens: 500 })
    expect(again.status).toBe(200)
    expect(again.body).toMatchObject({ ok: true, event_id: retryId, duplicate: true, paused: false })
    expect(nano(again.body.cost_usd)).toBe(retried.costNano)
    expect(nano(again.body.total_cost_24h)).toBe(storedSums.get('a1'))
    const after = await agentsById(server.url, key)
    expect(nano(after.get('a1')!.total_cost_usd)).toBe(storedSums.get('a1'))
    expect(after.get('a1')!.llm_calls).toBe(agents.get('a1')!.llm_calls)
    expect((await storedEvents(server.url, key, [retryId])).filter((e) => e.event_id === retryId)).toHaveLength(1)

    // So is a retry of an event the kill left unanswered: stored at most once, whichever way it went.
    const lost = [...run.unanswered][0]
    if (lost !== undefined) {
      const e = events.find((p) => p.event_id === lost)!
      const retry = await api(server.url, 'POST', '/events', key, { ...e, event_type: 'llm_call', model: 'gpt-4o', output_tokens: 500 })
      expect(retry.status).toBe(200)
      expect((await storedEvents(server.url, key, [lost])).filter((s) => s.event_id === lost)).toHaveLength(1)
    }
  }, 60_000)
})

describe('manual pause across restarts', () => {
  it('keeps a manual pause through a graceful restart, and a resume through the next', async () => {
    const dataDir = freshDataDir()
    let server = await startServe(dataDir)
    const { key } = await createKey(dataDir, 'ops')
    const event = () => ({ agent_id: 'm', event_type: 'tool_call', tool_name: 'search', event_id: randomUUID() })

    expect((await api(server.url, 'POST', '/events', key, event())).body).toMatchObject({ ok: true, paused: false })
    const pause = await api(server.url, 'POST', '/config/pause', key, { agent_id: 'm', is_paused: true })
    expect(pause).toEqual({ status: 200, body: { ok: true, agent_id: 'm', is_paused: true } })

    const restart = async () => {
      server.kill('SIGTERM')
      expect(await withDeadline(server.exited, 15_000, 'no exit after SIGTERM')).toEqual({ code: 0, signal: null })
      server = await startServe(dataDir)
    }

    await restart()
    expect((await agentsById(server.url, key)).get('m')).toMatchObject({ is_paused: true })
    expect((await api(server.url, 'GET', '/agents/m', key)).body).toMatchObject({ is_paused: true, paused_reason: 'manual' })
    expect((await api(server.url, 'POST', '/events', key, event())).body).toMatchObject({ ok: true, paused: true })

    const resume = await api(server.url, 'POST', '/config/pause', key, { agent_id: 'm', is_paused: false })
    expect(resume).toEqual({ status: 200, body: { ok: true, agent_id: 'm', is_paused: false } })

    await restart()
    expect((await agentsById(server.url, key)).get('m')).toMatchObject({ is_paused: false, llm_calls: 0, total_cost_usd: 0 })
    expect((await api(server.url, 'GET', '/agents/m', key)).body).toMatchObject({ is_paused: false, paused_reason: null })
    expect((await api(server.url, 'POST', '/events', key, event())).body).toMatchObject({ ok: true, paused: false })
    expect(await storedEvents(server.url, key)).toHaveLength(3)
  }, 60_000)
})

describe('graceful SIGTERM', () => {
  it('answers or refuses what is in flight, stores every 200, and exits 0', async () => {
    const dataDir = freshDataDir()
    let server = await startServe(dataDir)
    const { key } = await createKey(dataDir, 'ops', ['--rate-limit', '100000'])

    const events = plan(200, ['g0', 'g1'])
    const run = await load(server, key, events, { concurrency: 20, signalAfter: 80, signal: 'SIGTERM' })
    const exit = await withDeadline(server.exited, 15_000, 'no exit within 15 s of SIGTERM')
    expect(exit).toEqual({ code: 0, signal: null })
    await server.waitForLog((l) => l.msg === 'draining: finishing in-flight batches' && l.signal === 'SIGTERM', 1000)

    expect(run.inFlightAtSignal).toBeGreaterThan(0)
    expect(run.acked.size).toBeGreaterThanOrEqual(80)
    // While draining, a request is answered (200) or refused as unavailable, never failed otherwise.
    expect([...run.refused.values()].filter((s) => s !== 503)).toEqual([])

    server = await startServe(dataDir)
    const stored = await storedEvents(server.url, key, run.acked.keys())
    expectAllAckedStoredOnce(stored, events, run.acked)
    const agents = await agentsById(server.url, key)
    const storedSums = sumBy(stored, (e) => e.agent_id, (e) => nano(e.cost_usd))
    for (const [agentId, a] of agents) expect(nano(a.total_cost_usd)).toBe(storedSums.get(agentId))
  }, 60_000)
})

/** Resolves true once a new TCP connection to `url` is refused (the server stopped listening). */
function refusesConnections(url: string): Promise<boolean | undefined> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const probe = connect({ host: hostname, port: Number(port) })
    probe.once('connect', () => {
      probe.destroy()
      resolve(undefined)
    })
    probe.once('error', () => resolve(true))
  })
}

describe('graceful SIGTERM with a keep-alive client', () => {
  // The drain answers the in-flight request with `connection: close`; before that fix,
  // `burnrate serve` waited for the client (or Fastify's 72 s keepAliveTimeout) to exit.
  it('answers a request in flight at SIGTERM and exits 0 without waiting for the client to hang up', async () => {
    const dataDir = freshDataDir()
    let server = await startServe(dataDir, { LOG_LEVEL: 'debug' })
    const { key } = await createKey(dataDir, 'ops')
    const eventId = randomUUID()
    const body = JSON.stringify({ agent_id: 'k', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, event_id: eventId })

    // An HTTP/1.1 (keep-alive) request whose body is still arriving when SIGTERM comes.
    const { hostname, port } = new URL(server.url)
    const socket = connect({ host: hostname, port: Number(port) })
    sockets.push(socket)
    let received = ''
    socket.setEncoding('utf8')
    socket.on('data', (c: string) => (received += c))
    socket.on('error', () => {})
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject))
    socket.write(
      `POST /events HTTP/1.1\r\nhost: ${hostname}:${port}\r\nx-api-key: ${key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n`,
    )
    socket.write(body.slice(0, 10))
    const localPort = socket.localPort
    await server.waitForLog((l) => l.msg === 'incoming request' && (l.req as { remotePort?: number } | undefined)?.remotePort === localPort)

    server.kill('SIGTERM')
    await server.waitForLog((l) => l.msg === 'draining: finishing in-flight batches')
    await waitFor(() => refusesConnections(server.url), 5000, 'the server to stop listening')

    socket.write(body.slice(10))
    await waitFor(() => (/\r\n\r\n[\s\S]*"ok":true[\s\S]*\}$/.test(received) ? true : undefined), 5000, 'the answer')
    expect(received).toMatch(/^HTTP\/1\.1 200 /)
    expect(received).toContain(`"event_id":"${eventId}"`)

    // The answer is sent; nothing is left to drain. The client keeps its idle connection.
    expect(await withDeadline(server.exited, 8000, 'no exit within 8 s of answering the last request')).toEqual({ code: 0, signal: null })

    server = await startServe(dataDir)
    const stored = await storedEvents(server.url, key)
    expect(stored.map((e) => e.event_id)).toEqual([eventId])
  }, 60_000)
})
