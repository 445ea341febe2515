import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdirSync, mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { api, cleanup, createKey, drained, runCli, startServe, waitFor } from './helpers/process.ts'

// The embedded mode on a filesystem that fills up: a real tmpfs of its own (mounting one
// needs root; .ci/run runs as root, and with CI set the test fails rather than skips), a real
// `burnrate serve`. POST /events answers 503 disk_full before anything it did not acknowledge
// is counted, nothing it acknowledged is lost, and it takes events again by itself once space
// returns.

const MIB = 1024 * 1024
const mountPoint = mkdtempSync(join(tmpdir(), 'burnrate-small-disk-'))
const mounted = (() => {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=160m', 'tmpfs', mountPoint], { stdio: 'pipe' })
    return true
  } catch (err) {
    if (process.env.CI) throw new Error(`could not mount a tmpfs (CI runs as root): ${String(err)}`, { cause: err })
    return false
  }
})()

afterAll(async () => {
  await cleanup()
  if (mounted) execFileSync('umount', ['-l', mountPoint])
  rmSync(mountPoint, { recursive: true, force: true })
})

const freeBytes = () => {
  const s = statfsSync(mountPoint)
  return s.bavail * s.bsize
}

describe.skipIf(!mounted)('a DATA_DIR whose filesystem fills up (embedded)', () => {
  it('refuses events with 503 disk_full naming the filesystem, loses nothing it acknowledged, and takes events again when space returns', { timeout: 180_000 }, async () => {
    const dataDir = join(mountPoint, 'data')
    mkdirSync(dataDir)
    const env = { DISK_MIN_FREE_MB: '16', EVENTS_RATE_LIMIT: '1000000' }
    let server = await startServe(dataDir, env)
    const { key } = await createKey(dataDir, 'disk-user', [], env)
    // About 4 KiB of journal a event: the headroom left below fills in a few hundred requests.
    const event = () => ({ event_id: randomUUID(), agent_id: 'filler', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 0, metadata: { note: 'x'.repeat(4000) } })
    const acked = new Set<string>()
    const refused: Array<ReturnType<typeof event>> = []

    // Another program takes the space, leaving 24 MiB: 8 above the bound.
    const filler = join(mountPoint, 'filler')
    writeFileSync(filler, Buffer.alloc(Math.max(0, freeBytes() - 24 * MIB)))

    // Events go on being taken until the journal and ClickHouse's parts reach the bound.
    await waitFor(
      async () => {
        for (let i = 0; i < 50; i++) {
          const e = event()
          const r = await api(server.url, 'POST', '/events', key, e)
          if (r.status === 200) {
            acked.add(e.event_id)
            continue
          }
          expect(r.status).toBe(503)
          expect(r.body.code).toBe('disk_full')
          expect(r.body.detail).toContain(dataDir)
          expect(r.body.detail).toMatch(/under DISK_MIN_FREE_MB \(16\)/)
          refused.push(e)
          return true
        }
        return undefined
      },
      90_000,
      'a 503 disk_full',
    )
    expect(acked.size).toBeGreaterThan(100)
    const ready = await api(server.url, 'GET', '/readyz', null)
    expect(ready.status).toBe(503)
    expect(ready.body.journal.disk_full).toBe(true)
    // Every refusal counts nothing: a few more, all refused while the disk stays full.
    for (let i = 0; i < 5; i++) {
      const e = event()
      const r = await api(server.url, 'POST', '/events', key, e)
      expect(r.status).toBe(503)
      refused.push(e)
    }

    // Space returns: within seconds, without a restart, events are taken again, the refused
    // ones too (their retries are new events, not duplicates).
    rmSync(filler)
    await waitFor(async () => ((await api(server.url, 'GET', '/readyz', null)).status === 200 ? true : undefined), 10_000, '/readyz 200 again')
    for (const e of refused) {
      const r = await api(server.url, 'POST', '/events', key, e)
      expect(r.status, JSON.stringify(r.body)).toBe(200)
      expect(r.body.duplicate).toBeUndefined()
      acked.add(e.event_id)
    }

    // Every acknowledged event is stored once, after a kill -9 and a restart too.
    await drained(server.url, 30_000)
    server.kill('SIGKILL')
    await server.exited
    server = await startServe(dataDir, env)
    const exported = await runCli(['export', '--user', 'disk-user', '--format', 'ndjson', '--from', new Date(Date.now() - 3_600_000).toISOString()], { DATA_DIR: dataDir })
    expect(exported.code, exported.stderr).toBe(0)
    const ids = exported.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { event_id: string }).event_id)
    expect(ids.length).toBe(acked.size)
    expect(new Set(ids)).toEqual(acked)
    const agent = await api(server.url, 'GET', '/agents/filler', key)
    expect(agent.body.total_cost_usd).toBeCloseTo(acked.size * 0.0025, 9)
  })
})
