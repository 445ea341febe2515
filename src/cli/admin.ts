import { existsSync, unlinkSync } from 'node:fs'
import { createServer, request, type IncomingMessage, type Server } from 'node:http'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import type { ApiKeys } from '../auth/api-keys.ts'
import { BackupBusyError } from '../backup/backup.ts'
import type { BackupManifest } from '../backup/manifest.ts'
import { Problem } from '../errors.ts'
import type { Erasure } from '../erasure/service.ts'
import type { ExportService } from '../exports/service.ts'
import { exportRange, type ExportRange } from '../schemas/export.ts'

/**
 * The admin socket: a Unix socket under DATA_DIR through which `burnrate keys …` (and
 * `export`, `users erase`) reaches
 * a running server. chDB lets one process open a data path, so while the server holds it
 * the CLI asks the server; a key created or revoked this way takes effect at once.
 * The socket file is only reachable by users who can reach DATA_DIR.
 */
export function adminSocketPath(dataDir: string): string {
  return join(dataDir, 'burnrate.sock')
}

/** Refuses to start beside a running server, and clears a socket a killed one left behind. */
export async function claimAdminSocket(path: string): Promise<void> {
  if (!existsSync(path)) return
  if (await isListening(path)) throw new Error(`another burnrate server is running on this DATA_DIR (${path} answers)`)
  unlinkSync(path)
}

export async function startAdminSocket(
  path: string,
  keys: ApiKeys,
  exports: ExportService,
  eraseUser: (userId: string, actor: string) => Promise<Erasure>,
  backup?: (dir: string) => Promise<BackupManifest>,
): Promise<Server> {
  await claimAdminSocket(path)
  const server = createServer((req, res) => {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
    }
    if (req.method === 'GET' && req.url?.startsWith('/export?')) {
      // `burnrate export`: the CLI has checked the range; the export takes one of the server's slots.
      const run = async () => {
        const { user, range } = exportRequest(req)
        const { stream, contentType } = await exports.open(user, range)
        res.writeHead(200, { 'content-type': contentType })
        // The CLI going away closes the response, and pipeline destroys the stream: the query stops.
        await pipeline(stream, res)
      }
      run().catch((err: unknown) => {
        if (res.headersSent) return void res.destroy()
        const status = err instanceof Problem ? err.status : 500
        send(status, { error: err instanceof Error ? err.message : String(err) })
      })
      return
    }
    let text = ''
    req.setEncoding('utf8')
    req.on('data', (chunk: string) => (text += chunk))
    req.on('end', () => {
      const run = async () => {
        const body = text ? (JSON.parse(text) as Record<string, unknown>) : {}
        if (req.method === 'GET' && req.url === '/keys') return send(200, await keys.list())
        if (req.method === 'POST' && req.url === '/keys') {
          const created = await keys.create(String(body.user), {
            name: typeof body.name === 'string' ? body.name : undefined,
            rateLimit: typeof body.rate_limit === 'number' ? body.rate_limit : null,
          })
          return send(200, created)
        }
        // `burnrate users erase`: the server erases, as it holds the data path and the hot state.
        if (req.method === 'POST' && req.url === '/users/erase') {
          if (typeof body.user !== 'string' || body.user === '' || typeof body.actor !== 'string') return send(400, { error: 'an erasure needs user and actor' })
          return send(200, await eraseUser(body.user, body.actor))
        }
        if (req.method === 'POST' && req.url === '/backup') {
          // `burnrate backup`: the server writes it, whether or not the CLI waits for the end.
          if (!backup) return send(404, { error: 'this server keeps no journal of its own (REDIS_URL): see docs/backups.md' })
          return send(200, await backup(String(body.to)))
        }
        const revoke = req.method === 'POST' ? /^\/keys\/([^/]+)\/revoke$/.exec(req.url ?? '') : null
        if (revoke) {
          const record = await keys.revoke(decodeURIComponent(revoke[1]!))
          return record ? send(200, record) : send(404, { error: 'no such key' })
        }
        send(404, { error: 'no such admin route' })
      }
      run().catch((err: unknown) => send(err instanceof BackupBusyError ? 409 : 500, { error: err instanceof Error ? err.message : String(err) }))
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(path, () => resolve())
  })
  return server
}

/** Takes the admin socket and answers every request 503 with `why`: a command that holds DATA_DIR itself keeps a server from starting on it meanwhile. */
export async function refuseAdminRequests(path: string, why: string): Promise<Server> {
  const server = createServer((_req, res) => res.writeHead(503, { 'content-type': 'application/json' }).end(JSON.stringify({ error: why })))
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(path, () => resolve())
  })
  return server
}

/** The admin socket's export request: the user, and the range the CLI resolved (microseconds). */
function exportRequest(req: IncomingMessage): { user: string; range: ExportRange } {
  const q = new URL(req.url ?? '/', 'http://admin').searchParams
  const fromUs = Number(q.get('from_us'))
  const toUs = Number(q.get('to_us'))
  const format = q.get('format')
  const user = q.get('user') ?? ''
  if (!user || !Number.isSafeInteger(fromUs) || !Number.isSafeInteger(toUs) || (format !== 'csv' && format !== 'ndjson' && format !== 'parquet')) {
    throw new Problem('invalid_query', 'an export needs user, from_us, to_us and format')
  }
  // The same bounds as GET /export's.
  return { user, range: exportRange({ from: fromUs, to: toUs, format }, Date.now()) }
}

export class AdminError extends Error {
  readonly status: number
  constructor(status: number, message: string) {
    super(message)
    this.name = 'AdminError'
    this.status = status
  }
}

/** One request to a running server's admin socket. */
export function adminRequest<T>(path: string, method: 'GET' | 'POST', url: string, body?: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath: path, method, path: url, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (text += c))
      res.on('end', () => {
        const parsed = JSON.parse(text) as T & { error?: string }
        if (res.statusCode === 200) resolve(parsed)
        else reject(new AdminError(res.statusCode ?? 500, parsed.error ?? `admin socket answered ${res.statusCode}`))
      })
    })
    req.on('error', reject)
    req.end(body === undefined ? undefined : JSON.stringify(body))
  })
}

/** A running server's export of one user's range: its bytes as they come (a failure rejects with the server's message). */
export function adminExport(path: string, user: string, range: ExportRange): Promise<IncomingMessage> {
  const query = new URLSearchParams({ user, from_us: String(range.fromUs), to_us: String(range.toUs), format: range.format })
  return new Promise((resolve, reject) => {
    const req = request({ socketPath: path, method: 'GET', path: `/export?${query}` }, (res) => {
      if (res.statusCode === 200) return resolve(res)
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (text += c))
      res.on('end', () => {
        let message = `admin socket answered ${res.statusCode}`
        try {
          message = (JSON.parse(text) as { error?: string }).error ?? message
        } catch {
          // not JSON: the status says it
        }
        reject(new AdminError(res.statusCode ?? 500, message))
      })
    })
    req.on('error', reject)
    req.end()
  })
}

export function isListening(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ socketPath: path, method: 'GET', path: '/ping' }, (res) => {
      res.resume()
      resolve(true)
    })
    req.on('error', () => resolve(false))
    req.end()
  })
}
