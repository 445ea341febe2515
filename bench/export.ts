/**
 * Exports: what GET /export costs one embedded burnrate.
 *
 *   node bench/export.ts [--events 1000000] [--agents 1000] [--metadata-bytes 0] [--formats csv,ndjson,parquet]
 *
 * Seeds `events` llm_calls (bench/seed.ts, INSERT … SELECT) spread over a day that ended two
 * days ago, outside the rolling window (the start-up loads none of them), starts burnrate on
 * them, exports an hour once (what any first export costs: the engine's read machinery), then
 * exports the whole day in each format, one after the other, reading as fast as it comes.
 * For each: events/s and MB/s, the peak RSS (VmHWM) of the server before and after, and the
 * latency of a read (GET /agents/events, one at a time) while the export runs, against the
 * same read with nothing else running. Prints a table and a JSON line (the last line).
 * Not part of `npm run bench`: a million events take it past a minute.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { ROOT, STORE_ENV, children, createKey, fmt, run, startBurnrate, stop, table } from './processes.ts'

const USER = 'bench-export'
const FORMATS = ['csv', 'ndjson', 'parquet'] as const
type Format = (typeof FORMATS)[number]

export interface ExportResult {
  events: number
  metadataBytes: number
  seedSeconds: number
  idleRead: Latency
  formats: Array<{ format: Format; seconds: number; bytes: number; eventsPerSec: number; peakRssBefore: number | null; peakRssAfter: number | null; read: Latency }>
}

interface Latency {
  requests: number
  p50: number
  max: number
}

/** Peak resident set of `pid` (VmHWM), Linux only. */
function peakRss(pid: number | undefined): number | null {
  try {
    const kb = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
    return kb === undefined ? null : Number(kb) * 1024
  } catch {
    return null
  }
}

/** A whole export read as it comes, holding none of it: its bytes and lines. */
async function drain(url: string, key: string, query: string): Promise<{ bytes: number; lines: number }> {
  const res = await fetch(new URL(`/export?${query}`, url), { headers: { 'x-api-key': key } })
  if (!res.ok || !res.body) throw new Error(`GET /export answered ${res.status}: ${await res.text()}`)
  let bytes = 0
  let lines = 0
  for await (const chunk of res.body) {
    bytes += chunk.length
    for (let i = chunk.indexOf(0x0a); i !== -1; i = chunk.indexOf(0x0a, i + 1)) lines++
  }
  return { bytes, lines }
}

/** GET /agents/events one at a time until `until` resolves (at least once). */
async function reads(url: string, key: string, until: Promise<unknown>): Promise<Latency> {
  let done = false
  void until.finally(() => (done = true)).catch(() => {})
  const latencies: number[] = []
  do {
    const t = performance.now()
    const res = await fetch(new URL('/agents/events?limit=50', url), { headers: { 'x-api-key': key } })
    await res.arrayBuffer()
    if (!res.ok) throw new Error(`GET /agents/events answered ${res.status}`)
    latencies.push(performance.now() - t)
  } while (!done)
  latencies.sort((a, b) => a - b)
  return { requests: latencies.length, p50: latencies[Math.floor(latencies.length / 2)]!, max: latencies.at(-1)! }
}

export async function exportBench(o: { events: number; agents: number; metadataBytes: number; formats: readonly Format[] }): Promise<ExportResult> {
  const dir = await mkdtemp(join(tmpdir(), 'burnrate-bench-export-'))
  try {
    const end = new Date(Date.now() - 2 * 86_400_000)
    const seedOut = await run(
      [join(ROOT, 'bench', 'seed.ts'), '--data-dir', dir, '--events', String(o.events), '--agents', String(o.agents), '--user', USER, '--end', end.toISOString(), '--metadata-bytes', String(o.metadataBytes)],
      process.env,
      'seed',
      1_800_000,
    )
    const { seconds: seedSeconds } = JSON.parse(seedOut.trim().split('\n').at(-1)!) as { seconds: number }
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dir, PORT: '0', HOST: '127.0.0.1', METRICS_PORT: '0', LOG_LEVEL: 'info', READS_RATE_LIMIT: '100000000' }
    for (const name of STORE_ENV) delete env[name]
    const burnrate = await startBurnrate(env, join(dir, 'burnrate.log'), null)
    try {
      const key = await createKey(env, 'export', USER)
      const pid = burnrate.child.pid
      const day = `from=${encodeURIComponent(new Date(end.getTime() - 86_400_000).toISOString())}&to=${encodeURIComponent(end.toISOString())}`
      const hour = `from=${encodeURIComponent(new Date(end.getTime() - 3_600_000).toISOString())}&to=${encodeURIComponent(end.toISOString())}`
      await drain(burnrate.url, key, `${hour}&format=ndjson`)
      const idleRead = await reads(burnrate.url, key, new Promise((r) => setTimeout(r, 3000)))
      const formats: ExportResult['formats'] = []
      for (const format of o.formats) {
        const peakRssBefore = peakRss(pid)
        const started = performance.now()
        const exported = drain(burnrate.url, key, `${day}&format=${format}`)
        const read = await reads(burnrate.url, key, exported)
        const { bytes, lines } = await exported
        const seconds = (performance.now() - started) / 1000
        if (format !== 'parquet' && lines !== o.events + (format === 'csv' ? 1 : 0)) throw new Error(`the ${format} export had ${lines} lines for ${o.events} events`)
        formats.push({ format, seconds, bytes, eventsPerSec: o.events / seconds, peakRssBefore, peakRssAfter: peakRss(pid), read })
      }
      return { events: o.events, metadataBytes: o.metadataBytes, seedSeconds, idleRead, formats }
    } finally {
      await stop(burnrate.child, 'burnrate')
    }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

export function exportTable(r: ExportResult): string {
  const mb = (n: number | null) => (n === null ? 'n/a' : fmt(n / 2 ** 20))
  const rows = [
    ['format', 'events/s', 'MB', 'MB/s', 'peak RSS before, MiB', 'after', 'growth', 'read p50 ms', 'read max ms'],
    ...r.formats.map((f) => [
      f.format,
      fmt(f.eventsPerSec),
      mb(f.bytes),
      fmt(f.bytes / 2 ** 20 / f.seconds, 1),
      mb(f.peakRssBefore),
      mb(f.peakRssAfter),
      f.peakRssBefore === null || f.peakRssAfter === null ? 'n/a' : mb(f.peakRssAfter - f.peakRssBefore),
      fmt(f.read.p50, 1),
      fmt(f.read.max, 1),
    ]),
    ['(no export)', '-', '-', '-', '-', '-', '-', fmt(r.idleRead.p50, 1), fmt(r.idleRead.max, 1)],
  ]
  return table(rows)
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { events: { type: 'string' }, agents: { type: 'string' }, 'metadata-bytes': { type: 'string' }, formats: { type: 'string' } },
    strict: true,
  })
  const o = {
    events: Number(values.events ?? 1_000_000),
    agents: Number(values.agents ?? 1000),
    metadataBytes: Number(values['metadata-bytes'] ?? 0),
    formats: (values.formats ?? FORMATS.join(',')).split(',') as Format[],
  }
  if (!Number.isSafeInteger(o.events) || o.events < 1) throw new Error('--events must be a whole number of at least 1')
  if (!Number.isSafeInteger(o.agents) || o.agents < 1) throw new Error('--agents must be a whole number of at least 1')
  if (o.formats.some((f) => !FORMATS.includes(f))) throw new Error(`--formats takes ${FORMATS.join(', ')}`)
  const stopAll = () => {
    for (const child of children) child.kill('SIGKILL')
  }
  process.once('SIGINT', () => (stopAll(), process.exit(130)))
  console.log(`exports of ${fmt(o.events)} events (${o.metadataBytes} bytes of metadata each) from one embedded burnrate…`)
  const result = await exportBench(o)
  console.log(`seeded in ${fmt(result.seedSeconds, 1)} s\n`)
  console.log(exportTable(result))
  console.log(JSON.stringify(result))
}

if (import.meta.main) await main()
