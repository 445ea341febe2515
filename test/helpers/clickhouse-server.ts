import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const SCRIPT = fileURLToPath(new URL('./clickhouse-http.ts', import.meta.url))

/**
 * A ClickHouse reachable over HTTP by several processes: the real engine (chDB) in a child
 * process of its own, serving ClickHouse's HTTP interface (clickhouse-http.ts). Started
 * again with the `path` and `port` of a stopped one, it is that server back from an outage.
 */
export async function startClickHouseServer(
  opts: { path?: string; port?: number; ms?: number } = {},
): Promise<{ url: string; path: string; port: number; stop(): Promise<void> }> {
  const ms = opts.ms ?? 20_000
  const path = opts.path ?? join(mkdtempSync(join(tmpdir(), 'burnrate-ch-')), 'db')
  const child: ChildProcess = spawn(process.execPath, [SCRIPT, path, String(opts.port ?? 0)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`ClickHouse HTTP test server not ready in ${ms} ms:\n${output}`)), ms)
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk
      const m = /listening (\d+)/.exec(output)
      if (m) {
        clearTimeout(timer)
        resolve(Number(m[1]))
      }
    })
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`ClickHouse HTTP test server exited (${code}):\n${output}`))
    })
  })
  return {
    url: `http://127.0.0.1:${port}`,
    path,
    port,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = new Promise((r) => child.once('exit', r))
      child.kill('SIGTERM')
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))])
      child.kill('SIGKILL')
    },
  }
}
