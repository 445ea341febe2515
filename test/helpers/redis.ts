import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { withDeadline } from './process.ts'

const REDIS_SERVER = '/usr/bin/redis-server'
const READY_MS = 10_000

/**
 * A redis-server of the test file's own (one per file, in beforeAll), on a free port of
 * 127.0.0.1, with the persistence production needs (AOF, appendfsync
 * everysec) in a directory of its own: tests never share Redis state, and a test that
 * restarts it on the same `dir` finds what it held.
 */
export async function startRedis(
  opts: { port?: number; dir?: string; args?: string[] } = {},
): Promise<{ url: string; port: number; dir: string; redis: Redis; stop(): Promise<void>; kill(): Promise<void> }> {
  const port = opts.port ?? (await freePort())
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'burnrate-redis-'))
  const child = spawn(
    REDIS_SERVER,
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec', '--dir', dir, '--daemonize', 'no', ...(opts.args ?? [])],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  )
  const exited = once(child, 'exit')
  let output = ''
  child.stdout.setEncoding('utf8')
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk: string) => (output += chunk))
  try {
    // Redis logs this line once it accepts connections: wait for it, within a deadline.
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis-server not ready within ${READY_MS} ms:\n${output}`)), READY_MS)
      child.stdout.on('data', (chunk: string) => {
        output += chunk
        if (output.includes('Ready to accept connections')) {
          clearTimeout(timer)
          resolve()
        }
      })
      exited.then(
        ([code]) => {
          clearTimeout(timer)
          reject(new Error(`redis-server exited with ${code} before it was ready:\n${output}`))
        },
        (err: unknown) => {
          clearTimeout(timer)
          reject(err)
        },
      )
    })
  } catch (err) {
    child.kill('SIGKILL')
    throw err
  }
  const url = `redis://127.0.0.1:${port}`
  const redis = new Redis(url, { maxRetriesPerRequest: 1 })
  await redis.ping()
  return {
    url,
    port,
    dir,
    redis,
    async stop() {
      await withDeadline(redis.quit(), 2000, 'QUIT').catch(() => {})
      redis.disconnect()
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM')
        // A master waits for its replicas on SIGTERM (shutdown-timeout); one whose replica is
        // stopping beside it may not get there: it has had its chance to write its AOF.
        const late = setTimeout(() => child.kill('SIGKILL'), 15_000)
        await exited
        clearTimeout(late)
      }
    },
    /** kill -9: Redis gets no chance to write anything more; a restart on `dir` replays its AOF. */
    async kill() {
      redis.disconnect()
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL')
        await exited
      }
    },
  }
}

/** A port the OS had free a moment ago (listen on 0, read it, close). */
export async function freePort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  server.close()
  await once(server, 'close')
  if (address === null || typeof address === 'string') throw new Error('no TCP port')
  return address.port
}

/**
 * The two deployments a test file runs its cases in: embedded, and REDIS_URL on a
 * redis-server of the file's own, started on first use. `stop()` goes in afterAll.
 */
export function deploymentModes(): { modes: Array<[string, () => Promise<Record<string, string>>]>; stop(): Promise<void> } {
  let server: ReturnType<typeof startRedis> | null = null
  return {
    modes: [
      ['embedded', async () => ({})],
      ['REDIS_URL', async () => ({ REDIS_URL: (await (server ??= startRedis())).url })],
    ],
    async stop() {
      await (await server)?.stop()
    },
  }
}

/**
 * A few numbers of a hot state as Redis holds them, from the doubles packed at the start of
 * its field n (src/hot-state/lua/state.lua pack_state): its llm calls in the window, the sum
 * of its open holds, and its flags (8: it has open holds). Null when it is not loaded.
 */
export async function packedState(redis: Redis, key: string): Promise<{ calls: number; held: number; flags: number } | null> {
  const n = await redis.hgetBuffer(key, 'n')
  return n ? { calls: n.readDoubleLE(16), held: n.readDoubleLE(56), flags: n.readDoubleLE(64) } : null
}
