/**
 * Where a V8 CPU profile (`node --cpu-prof`) spent its time: self time by area (burnrate's
 * src/, each node_modules package, Node internals, GC, idle), the top functions by self
 * time, and the top burnrate functions by inclusive time.
 *
 *   node bench/cpu-profile.ts <file.cpuprofile> [top N]
 */
import { readFileSync } from 'node:fs'

interface CallFrame {
  functionName: string
  url: string
  lineNumber: number
}

interface ProfileNode {
  id: number
  callFrame: CallFrame
  children?: number[]
}

export interface CpuProfile {
  nodes: ProfileNode[]
  startTime: number
  endTime: number
  samples: number[]
  timeDeltas: number[]
}

/** burnrate's own code, node_modules/<package>, node:internal, or V8's pseudo-frames. */
function area(frame: CallFrame): string {
  const { url, functionName } = frame
  if (!url) return functionName.startsWith('(') ? functionName : '(native)'
  if (url.startsWith('node:')) return 'node:internal'
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (pkg) return pkg[1]!
  const src = /\/(src|bench|bin)\/(.*)$/.exec(url)
  if (src) return `${src[1]}/`
  return url
}

function label(frame: CallFrame): string {
  const where = frame.url ? `${frame.url.replace(/^.*\/(node_modules|src|bench)\//, '$1/').replace(/^file:\/\//, '')}:${frame.lineNumber + 1}` : ''
  return `${frame.functionName || '(anonymous)'}${where ? ` ${where}` : ''}`
}

function top(map: Map<string, number>, n: number): [string, number][] {
  return [...map].sort((a, b) => b[1] - a[1]).slice(0, n)
}

export function summarizeProfile(profile: CpuProfile, n = 25): string {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const parent = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id)

  const self = new Map<string, number>()
  const areas = new Map<string, number>()
  const inclusive = new Map<string, number>()
  let total = 0
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0
    const node = byId.get(id)
    if (!node) return
    total += us
    const key = label(node.callFrame)
    self.set(key, (self.get(key) ?? 0) + us)
    const a = area(node.callFrame)
    areas.set(a, (areas.get(a) ?? 0) + us)
    // Inclusive time of burnrate's functions: each function once per sample, recursion or not.
    const seen = new Set<string>()
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const frame = byId.get(cur)!.callFrame
      if (!/\/src\//.test(frame.url)) continue
      const k = label(frame)
      if (seen.has(k)) continue
      seen.add(k)
      inclusive.set(k, (inclusive.get(k) ?? 0) + us)
    }
  })

  const busy = total - (areas.get('(idle)') ?? 0)
  const pct = (us: number, of: number) => `${((100 * us) / Math.max(of, 1)).toFixed(1).padStart(5)}%`
  const ms = (us: number) => `${(us / 1000).toFixed(0).padStart(7)} ms`
  const lines: string[] = [`  ${(total / 1e6).toFixed(1)} s profiled, ${(busy / 1e6).toFixed(1)} s not idle; shares below are of the non-idle time`]
  lines.push('  self time by area:')
  for (const [k, us] of top(areas, 15)) if (k !== '(idle)') lines.push(`    ${ms(us)} ${pct(us, busy)}  ${k}`)
  lines.push(`  top ${n} functions by self time:`)
  for (const [k, us] of top(self, n + 1)) if (!k.startsWith('(idle)')) lines.push(`    ${ms(us)} ${pct(us, busy)}  ${k}`)
  lines.push('  burnrate (src/) functions by inclusive time:')
  for (const [k, us] of top(inclusive, 15)) lines.push(`    ${ms(us)} ${pct(us, busy)}  ${k}`)
  return lines.join('\n')
}

if (import.meta.main) {
  const [file, count] = process.argv.slice(2)
  if (!file) {
    console.error('usage: node bench/cpu-profile.ts <file.cpuprofile> [top N]')
    process.exitCode = 2
  } else {
    console.log(summarizeProfile(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile, count ? Number(count) : 25))
  }
}
