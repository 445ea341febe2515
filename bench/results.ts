/**
 * A bench run's figures: one file per run, bench/results/<timestamp>.json (the machine, the
 * options, every figure with its unit, and the details behind some of them), and one
 * markdown table.
 */
import { availableParallelism, cpus, totalmem } from 'node:os'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ROOT } from './processes.ts'

export interface Figure {
  figure: string
  value: number | null
  unit: string
  /** To the ceiling measured in the same run (or the empty store, for history), where one applies. */
  ratio?: number
}

/** `details`: what a figure was computed from, for a reader who wants all of it (every INFO commandstats line of a phase). */
export async function writeResults(options: object, figures: readonly Figure[], details: object = {}): Promise<string> {
  const at = new Date()
  const dir = join(ROOT, 'bench', 'results')
  await mkdir(dir, { recursive: true })
  const file = join(dir, `${at.toISOString().replace(/[:.]/g, '-')}.json`)
  const machine = { cores: availableParallelism(), cpu: cpus()[0]?.model ?? 'unknown', memoryBytes: totalmem(), node: process.versions.node, platform: process.platform }
  await writeFile(file, `${JSON.stringify({ at: at.toISOString(), machine, options, figures, details }, null, 2)}\n`)
  return file
}

export function markdown(figures: readonly Figure[]): string {
  const num = (n: number, digits: number) => n.toLocaleString('en-US', { maximumFractionDigits: digits })
  const rows = figures.map((f) => {
    const value = f.value === null ? 'n/a' : `${num(f.value, f.value >= 100 ? 0 : 2)}${f.unit === 'ratio' ? '' : ` ${f.unit}`}`
    return `| ${f.figure} | ${value} | ${f.ratio === undefined ? '' : num(f.ratio, 2)} |`
  })
  return ['| figure | value | ratio (to the ceiling; history: to the empty store) |', '|---|---:|---:|', ...rows].join('\n')
}
