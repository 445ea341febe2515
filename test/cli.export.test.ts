import { randomUUID } from 'node:crypto'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { request } from 'node:http'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { startClickHouseServer } from './helpers/clickhouse-server.ts'
import { api, cleanup, createKey, drained, freshDataDir, runCli, startServe, withDeadline } from './helpers/process.ts'

// `burnrate export` as an operator runs it, beside a running server and without one: the
// same bytes as GET /export. Real processes, no mocks (this file never loads src/: the
// children hold the data path).

afterEach(() => cleanup())

const FORMATS = ['csv', 'ndjson', 'parquet'] as const

/** GET /export's whole body. */
function httpExport(url: string, key: string, query: string): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/export?${query}`, { headers: { 'x-api-key': key }, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks) }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

/** A few events of `key`'s user with metadata CSV must quote, and a fixed range that holds them. */
async function someEvents(url: string, key: string): Promise<void> {
  const bodies = [
    { agent_id: 'cli-agent', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, metadata: { note: 'a, "b"\nc', emoji: '日本🚀' } },
    { agent_id: 'cli-agent', event_type: 'tool_call', tool_name: 'search', metadata: { n: 1 } },
    { agent_id: 'other-agent', event_type: 'agent_start' },
  ]
  for (const body of bodies) expect((await api(url, 'POST', '/events', key, { ...body, event_id: randomUUID() })).status).toBe(200)
  await drained(url)
}

function rangeArgs(): { query: string; args: string[] } {
  const from = new Date(Date.now() - 3_600_000).toISOString()
  const to = new Date(Date.now() + 3_600_000).toISOString()
  return { query: `from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`, args: ['--from', from, '--to', to] }
}

/** `burnrate export …` with its stdout as bytes (runCli reads it as text, which Parquet is not). */
async function cliExport(env: Record<string, string>, args: string[], dir: string): Promise<{ code: number | null; bytes: Buffer; stdout: string; stderr: string }> {
  const out = join(dir, `export-${randomUUID()}`)
  const r = await runCli(['export', ...args, '--out', out], env, 30_000)
  return { code: r.code, bytes: existsSync(out) ? readFileSync(out) : Buffer.alloc(0), stdout: r.stdout, stderr: r.stderr }
}

describe('burnrate export, embedded', () => {
  it('writes what GET /export answers, through a running server and without one', async () => {
    const dataDir = freshDataDir()
    const outDir = freshDataDir()
    const server = await startServe(dataDir)
    const alice = await createKey(dataDir, 'alice')
    const bob = await createKey(dataDir, 'bob')
    await someEvents(server.url, alice.key)
    await someEvents(server.url, bob.key)
    const { query, args } = rangeArgs()
    const env = { DATA_DIR: dataDir }

    const http: Record<string, Buffer> = {}
    for (const format of FORMATS) {
      const res = await httpExport(server.url, alice.key, `${query}&format=${format}`)
      expect(res.status).toBe(200)
      http[format] = res.body
    }
    expect(http.csv!.toString('utf8').split('\n').filter(Boolean)).toHaveLength(4) // the header and three events
    expect(http.csv!.toString('utf8')).toContain('"{""note"":""a, \\""b\\""\\nc"",""emoji"":""日本🚀""}"')

    // Beside the server: through its admin socket.
    for (const format of FORMATS) {
      const r = await cliExport(env, ['--user', 'alice', ...args, '--format', format], outDir)
      expect(r.code, r.stderr).toBe(0)
      expect(r.bytes.equals(http[format]!), format).toBe(true)
      expect(r.stdout).toMatch(/^exported the events of user alice to /)
    }
    // To stdout, the default format: csv.
    const stdout = await runCli(['export', '--user', 'alice', ...args], env)
    expect(stdout).toMatchObject({ code: 0, stderr: '' })
    expect(stdout.stdout).toBe(http.csv!.toString('utf8'))

    server.kill('SIGTERM')
    expect(await withDeadline(server.exited, 15_000, 'no exit after SIGTERM')).toEqual({ code: 0, signal: null })

    // Without a server: on the data path itself.
    for (const format of FORMATS) {
      const r = await cliExport(env, ['--user', 'alice', ...args, '--format', format], outDir)
      expect(r.code, r.stderr).toBe(0)
      expect(r.bytes.equals(http[format]!), format).toBe(true)
    }
    // Bob's export holds his events only.
    const bobs = await runCli(['export', '--user', 'bob', ...args, '--format', 'ndjson'], env)
    expect(bobs.code).toBe(0)
    expect(bobs.stdout.trimEnd().split('\n')).toHaveLength(3)
    expect(bobs.stdout).not.toContain(http.ndjson!.toString('utf8').split('\n')[0])
    // --out files only, no .partial left behind.
    expect(readdirSync(outDir).filter((f) => f.endsWith('.partial'))).toEqual([])
  }, 120_000)
})

describe('burnrate export with CLICKHOUSE_URL', () => {
  it('reads ClickHouse itself, beside a running server, and fails whole when ClickHouse does not answer', async () => {
    const clickhouse = await startClickHouseServer()
    try {
      const dataDir = freshDataDir()
      const env = { DATA_DIR: dataDir, CLICKHOUSE_URL: clickhouse.url }
      const server = await startServe(dataDir, { CLICKHOUSE_URL: clickhouse.url })
      const { key } = await createKey(dataDir, 'carol', [], { CLICKHOUSE_URL: clickhouse.url })
      await someEvents(server.url, key)
      const { query, args } = rangeArgs()
      for (const format of ['csv', 'ndjson'] as const) {
        const res = await httpExport(server.url, key, `${query}&format=${format}`)
        expect(res.status).toBe(200)
        const r = await runCli(['export', '--user', 'carol', ...args, '--format', format], env)
        expect(r.code, r.stderr).toBe(0)
        expect(r.stdout).toBe(res.body.toString('utf8'))
      }
      server.kill('SIGTERM')
      await withDeadline(server.exited, 15_000, 'no exit after SIGTERM')
      await clickhouse.stop()
      const out = join(freshDataDir(), 'november.csv')
      const failed = await runCli(['export', '--user', 'carol', ...args, '--out', out], env)
      expect(failed.code).toBe(1)
      expect(failed.stdout).toBe('')
      expect(failed.stderr.trimEnd().split('\n')).toHaveLength(1)
      expect(failed.stderr).toMatch(/^burnrate: ClickHouse at http:\/\/127\.0\.0\.1:\d+/)
      expect(existsSync(out)).toBe(false)
      expect(existsSync(`${out}.partial`)).toBe(false)
    } finally {
      await clickhouse.stop()
    }
  }, 120_000)
})
