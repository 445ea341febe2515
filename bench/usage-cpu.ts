/**
 * burnrate's CPU per request for an llm_call reported with the token fields against the same
 * call reported as the OpenAI SDK's usage object, in one run: `burnrate serve` embedded on a
 * fresh temporary DATA_DIR, loaded at saturation (bench/load.ts) with the token fields, then
 * the usage objects, alternately for `rounds` rounds of `duration` seconds each, so a drift of
 * the machine or of the server counts against neither. Each usage phase is compared with the
 * mean of the token phases around it (or the one before it, for the last).
 *
 *   node bench/usage-cpu.ts [--duration 8] [--rounds 2] [--connections 50]
 *   node bench/usage-cpu.ts --profile usage|token [--duration 10]   (one kind, under --cpu-prof)
 *
 * With --profile, burnrate runs under `node --cpu-prof` on one kind of request only, and the
 * profile is summarised as bench/cpu-profile.ts does; it is kept in the directory printed.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { summarizeProfile, type CpuProfile } from './cpu-profile.ts'
import { STORE_ENV, children, createKey, fmt, load, startBurnrate, stop, table, withCpu, type LoadOptions } from './processes.ts'

const { values } = parseArgs({
  options: { duration: { type: 'string' }, rounds: { type: 'string' }, connections: { type: 'string' }, profile: { type: 'string' } },
  strict: true,
})
const profile = values.profile
if (profile !== undefined && profile !== 'usage' && profile !== 'token') throw new Error('--profile is usage or token')
const opts: LoadOptions = { connections: Number(values.connections ?? 50), duration: Number(values.duration ?? (profile ? 10 : 8)), agents: 1000 }
const rounds = profile ? 1 : Number(values.rounds ?? 2)

const dir = await mkdtemp(join(tmpdir(), 'burnrate-usage-cpu-'))
const profDir = profile ? join(dir, 'profile') : null
try {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: join(dir, 'data'), PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', METRICS_PORT: '0' }
  for (const name of STORE_ENV) delete env[name]
  const burnrate = await startBurnrate(env, join(dir, 'burnrate.log'), profDir)
  const apiKey = await createKey(env, 'bench')
  const pid = burnrate.child.pid
  const agentPrefix = 'usage-cpu-'
  // Every agent made known, and both paths run hot, before anything is measured.
  const kinds = profile ? [profile === 'usage'] : [false, true]
  let served = 0
  for (const usageObjects of kinds) served += (await load(burnrate.url, apiKey, { ...opts, duration: 4 }, { agentPrefix, warmup: 0, load: 'saturation', usageObjects })).ok

  const rows: { kind: string; rps: number; cpu: number | null }[] = []
  for (let r = 0; r < rounds; r++) {
    for (const usageObjects of kinds) {
      const s = await withCpu(pid, load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', usageObjects }))
      if (s.non2xx + s.errors > 0) throw new Error(`${usageObjects ? 'usage' : 'token'} phase: ${s.non2xx} non-2xx, ${s.errors} errors`)
      served += s.ok
      rows.push({ kind: usageObjects ? 'usage' : 'token', rps: s.requestsPerSec, cpu: s.cpuUsPerRequest })
    }
  }
  await stop(burnrate.child, 'burnrate')

  type Row = (typeof rows)[number]
  // A usage phase against the mean of the token phases around it.
  const around = (i: number, f: (t: Row) => number | null): number | null => {
    const tokens = [rows[i - 1], rows[i + 1]].flatMap((t) => (t?.kind === 'token' && f(t) !== null ? [f(t)!] : []))
    return tokens.length ? tokens.reduce((sum, x) => sum + x, 0) / tokens.length : null
  }
  const cells = rows.map((row, i) => {
    const rps = row.kind === 'usage' ? around(i, (t) => t.rps) : null
    const cpu = row.kind === 'usage' ? around(i, (t) => t.cpu) : null
    const share = rps === null ? '' : `${fmt(row.rps / rps, 2)} / ${row.cpu === null || cpu === null ? 'n/a' : fmt(row.cpu / cpu, 2)}`
    return [row.kind, fmt(row.rps), row.cpu === null ? 'n/a' : fmt(row.cpu, 1), share]
  })
  console.log(table([['phase', 'req/s', 'CPU µs/req', 'usage ÷ tokens around: req/s / CPU'], ...cells]))
  // The machine is shared: a median over the rounds is steadier than any one of them.
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN
  const cpu = (kind: string) => median(rows.filter((r) => r.kind === kind && r.cpu !== null).map((r) => r.cpu!))
  const shares = rows.flatMap((row, i) => {
    const cpu = row.kind === 'usage' ? around(i, (t) => t.cpu) : null
    return row.cpu !== null && cpu !== null ? [row.cpu / cpu] : []
  })
  if (!profile) console.log(`medians: token ${fmt(cpu('token'), 1)} µs/req, usage ${fmt(cpu('usage'), 1)} µs/req, usage ÷ tokens around ${fmt(median(shares), 2)}`)

  if (profDir) {
    const file = (await readdir(profDir)).find((f) => f.endsWith('.cpuprofile'))
    if (file) {
      console.log(`\nburnrate CPU profile ${join(profDir, file)} (${profile} only, ${served} requests answered in all):`)
      console.log(summarizeProfile(JSON.parse(await readFile(join(profDir, file), 'utf8')) as CpuProfile, 30))
    }
  }
} finally {
  await Promise.all([...children].map((child) => stop(child, `pid ${child.pid}`)))
  // A profile is kept for a closer look; the rest goes.
  await rm(join(dir, 'data'), { recursive: true, force: true })
  if (!profDir) await rm(dir, { recursive: true, force: true })
}
