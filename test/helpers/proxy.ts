import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * A real HTTP proxy between the client and a real burnrate: it records every request that
 * reaches it, forwards by default, and can be told to misbehave for chosen requests the way
 * a network or a loaded server does. Nothing of burnrate is mocked: a forwarded request is
 * answered by the server.
 */

/** What the proxy does with one request. */
export type Action =
  /** forward, pass the answer back */
  | { kind: 'forward' }
  /** forward, wait for the server's answer, then cut the client's connection (the server did store it) */
  | { kind: 'cut' }
  /** forward, wait for the server's answer, then hold it `ms` before passing it back */
  | { kind: 'delay'; ms: number }
  /** answer by itself; the server never sees the request */
  | { kind: 'reply'; status: number; headers?: Record<string, string>; body?: unknown }

export interface Seen {
  method: string
  path: string
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies, asserted field by field
  body: any
  /** Date.now() when the request had arrived whole. */
  at: number
  action: Action['kind']
  /** the status the client was sent (undefined: none, the connection was cut) */
  status?: number
  /** the server's answer (JSON), forwarded or not */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies, asserted field by field
  answer?: any
  /** the server's answer's headers */
  headers?: Record<string, string>
}

export interface Proxy {
  url: string
  seen: Seen[]
  /** The next `times` requests matching `route` ("POST /events", or "GET /agents/a1"; a prefix) get `action`. */
  on(route: string, action: Action, times?: number): void
  /** The requests seen for `route` (same matching as on()). */
  count(route: string): number
  close(): Promise<void>
}

function matches(route: string, method: string, path: string): boolean {
  const [m, p = ''] = route.split(' ')
  return m === method && path.startsWith(p)
}

export async function startProxy(upstream: string): Promise<Proxy> {
  const seen: Seen[] = []
  const rules: Array<{ route: string; action: Action; times: number }> = []
  const target = new URL(upstream)

  const forward = (req: IncomingMessage, body: Buffer): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string> = {}
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'connection' && k !== 'keep-alive') headers[k] = v
      headers.host = target.host
      const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers, agent: false, signal: AbortSignal.timeout(10_000) }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const out: Record<string, string> = {}
          for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string' && k !== 'connection' && k !== 'keep-alive' && k !== 'transfer-encoding') out[k] = v
          resolve({ status: res.statusCode!, headers: out, body: Buffer.concat(chunks) })
        })
      })
      up.on('error', reject)
      up.end(body)
    })

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    for await (const c of req) chunks.push(c as Buffer)
    const raw = Buffer.concat(chunks)
    const method = req.method ?? 'GET'
    const path = req.url ?? '/'
    let body: unknown
    try {
      body = raw.length ? JSON.parse(raw.toString('utf8')) : undefined
    } catch {
      body = raw.toString('utf8')
    }
    const rule = rules.find((r) => r.times > 0 && matches(r.route, method, path))
    if (rule) rule.times--
    const action: Action = rule?.action ?? { kind: 'forward' }
    const record: Seen = { method, path, body, at: Date.now(), action: action.kind }
    seen.push(record)

    if (action.kind === 'reply') {
      const text = action.body === undefined ? '' : JSON.stringify(action.body)
      res.writeHead(action.status, { 'content-type': 'application/problem+json', ...action.headers })
      record.status = action.status
      res.end(text)
      return
    }
    const answer = await forward(req, raw)
    record.headers = answer.headers
    try {
      record.answer = answer.body.length ? JSON.parse(answer.body.toString('utf8')) : undefined
    } catch {
      record.answer = answer.body.toString('utf8')
    }
    if (action.kind === 'cut') {
      req.socket.destroy()
      return
    }
    if (action.kind === 'delay') await new Promise((r) => setTimeout(r, action.ms))
    if (res.destroyed || req.socket.destroyed) return
    record.status = answer.status
    res.writeHead(answer.status, answer.headers)
    res.end(answer.body)
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent && !res.destroyed) res.writeHead(502).end()
      else res.destroy()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    on(route, action, times = 1) {
      rules.push({ route, action, times })
    },
    count(route) {
      return seen.filter((s) => matches(route, s.method, s.path)).length
    },
    close() {
      server.closeAllConnections()
      return new Promise((resolve) => server.close(() => resolve()))
    },
  }
}

/** A port nothing listens on: bound, then closed. */
export async function deadPort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}
