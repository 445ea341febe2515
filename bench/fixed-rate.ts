/**
 * A fixed-rate (open-loop) HTTP/1.1 load, for the latency at a given offered rate; used by
 * bench/load.ts for --rate.
 *
 * Not autocannon's overallRate, which is not a fixed rate: it gives each connection a quota
 * per second that the connection sends back to back as soon as the second starts, so half
 * of saturation arrives as bursts at full speed followed by silence (on the ceiling, all of
 * a second's requests were sent in its first 250–400 ms, and its p99 came out higher than at
 * saturation). Its coordinated-omission correction in that mode also takes the expected
 * interval as 1 ms whatever the rate, which adds made-up samples.
 *
 * Here request k is issued at start + k/rate (checked every millisecond), whatever became of
 * the earlier ones: it goes to an idle keep-alive connection, or waits for one, and its
 * latency runs from its issue to the end of its response, the wait included. A server that
 * falls behind is charged for the requests queued behind it; a load generator that falls
 * behind (its timer late, so the requests are issued late) is reported as `lateMs`.
 *
 * Deliberately small: one request in flight per connection, connections opened only when all
 * the open ones are busy (at most `connections`), and responses must carry Content-Length
 * (Fastify's do). Every issued request is waited for (or fails), so none is cut off.
 */
import { connect, type Socket } from 'node:net'

export interface FixedRateOptions {
  url: URL
  headers: Record<string, string>
  /** The next request body (JSON). */
  body: () => string
  rate: number
  seconds: number
  connections: number
  timeoutMs: number
}

export interface FixedRateResult {
  ok: number
  non2xx: number
  /** Requests that got no response: connection errors and timeouts. */
  errors: number
  timeouts: number
  sent: number
  statusCodes: Record<string, number>
  /** Every response's latency, sorted. */
  latenciesMs: Float64Array
  /** From the first issue to the last response. */
  durationS: number
  /** The most a request was issued after its due time (timer granularity, a busy event loop). */
  lateMs: number
}

interface Connection {
  socket: Socket
  /** When the request in flight was issued; null when idle. */
  issuedAt: number | null
  /** Response bytes not yet parsed. */
  buffered: Buffer
  closed: boolean
}

const HEADER_END = Buffer.from('\r\n\r\n')

export function fixedRate(o: FixedRateOptions): Promise<FixedRateResult> {
  const port = Number(o.url.port)
  const head = `POST ${o.url.pathname} HTTP/1.1\r\nhost: ${o.url.host}\r\n${Object.entries(o.headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('')}`
  const total = Math.max(1, Math.round(o.rate * o.seconds))
  const latencies = new Float64Array(total)
  const statusCodes: Record<string, number> = {}
  // Issue times of the requests waiting for a connection, oldest first from `waitingHead`.
  const waiting: number[] = []
  let waitingHead = 0
  const idle: Connection[] = []
  let open = 0
  let issued = 0
  let sent = 0
  let answered = 0
  let ok = 0
  let non2xx = 0
  let errors = 0
  let timeouts = 0
  let lateMs = 0
  let lastAnswerAt = 0
  const start = performance.now()

  return new Promise((resolve) => {
    const finishIfDone = () => {
      if (issued < total || answered + errors < total) return
      // Marked closed first, so their 'close' events do not come back here.
      for (const c of idle) {
        c.closed = true
        c.socket.destroy()
      }
      idle.length = 0
      const sorted = latencies.subarray(0, answered).sort()
      resolve({ ok, non2xx, errors, timeouts, sent, statusCodes, latenciesMs: sorted, durationS: (lastAnswerAt - start) / 1000, lateMs })
    }

    const dispatch = () => {
      while (waitingHead < waiting.length) {
        let c = idle.pop()
        if (!c) {
          if (open >= o.connections) return
          c = connection()
        }
        send(c, waiting[waitingHead++]!)
      }
      waiting.length = 0
      waitingHead = 0
    }

    const send = (c: Connection, issuedAt: number) => {
      const body = o.body()
      c.issuedAt = issuedAt
      sent++
      c.socket.write(`${head}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
    }

    // The request in flight (if any) failed; the connection is not used again, and a new one
    // is opened only when a waiting request needs it (so a server that is gone is not
    // reconnected to in a loop).
    const fail = (c: Connection, timedOut: boolean) => {
      if (c.closed) return
      c.closed = true
      open--
      c.socket.destroy()
      const i = idle.indexOf(c)
      if (i >= 0) idle.splice(i, 1)
      if (c.issuedAt !== null) {
        c.issuedAt = null
        errors++
        if (timedOut) timeouts++
        lastAnswerAt = performance.now()
      }
      dispatch()
      finishIfDone()
    }

    const onData = (c: Connection, chunk: Buffer) => {
      c.buffered = c.buffered.length === 0 ? chunk : Buffer.concat([c.buffered, chunk])
      const end = c.buffered.indexOf(HEADER_END)
      if (end < 0) return
      const header = c.buffered.toString('latin1', 0, end)
      const length = /\r\ncontent-length:[ \t]*(\d+)/i.exec(header)?.[1]
      if (length === undefined || c.issuedAt === null) return fail(c, false)
      const size = end + HEADER_END.length + Number(length)
      if (c.buffered.length < size) return
      // One request in flight per connection: nothing follows its response.
      c.buffered = Buffer.alloc(0)
      const now = performance.now()
      latencies[answered++] = now - c.issuedAt
      c.issuedAt = null
      lastAnswerAt = now
      const status = header.slice(9, 12)
      statusCodes[status] = (statusCodes[status] ?? 0) + 1
      if (status.startsWith('2')) ok++
      else non2xx++
      idle.push(c)
      dispatch()
      finishIfDone()
    }

    const connection = (): Connection => {
      const c: Connection = { socket: connect(port, o.url.hostname), issuedAt: null, buffered: Buffer.alloc(0), closed: false }
      open++
      c.socket.setNoDelay(true)
      c.socket.setTimeout(o.timeoutMs, () => {
        if (c.issuedAt !== null) fail(c, true)
      })
      c.socket.on('data', (chunk: Buffer) => onData(c, chunk))
      c.socket.on('error', () => fail(c, false))
      c.socket.on('close', () => fail(c, false))
      return c
    }

    const tick = () => {
      const now = performance.now()
      const due = Math.min(total, Math.floor(((now - start) * o.rate) / 1000) + 1)
      if (due > issued) lateMs = Math.max(lateMs, now - (start + (issued * 1000) / o.rate))
      for (; issued < due; issued++) waiting.push(now)
      dispatch()
      if (issued < total) setTimeout(tick, 1)
      else finishIfDone()
    }
    tick()
  })
}
