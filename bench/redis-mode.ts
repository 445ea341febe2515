/**
 * Ingest with the Redis hot state (issue 11, scenario 2), for a run whose main phases are
 * embedded: a redis-server of the run's own with AOF (appendfsync everysec, the production
 * shape; the project's test helper starts it), burnrate with REDIS_URL on a fresh DATA_DIR,
 * and the phases that matter for the mode: cold (every agent loaded from ClickHouse), warm
 * saturation, 50 % of it. Then what Redis holds per agent and per remembered event id, and
 * the stored = acknowledged check; last, POST /holds at saturation for the same agents
 * (issue 13), after the memory is measured so their keys do not count in it.
 */
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { startRedis } from '../test/helpers/redis.ts'
import type { LoadSummary } from './load.ts'
import { createKey, cutOff, halfOf, load, redisMemory, startBurnrate, stop, storedLlmCalls, withCpu, type LoadOptions } from './processes.ts'

export interface RedisModeResult {
  cold: LoadSummary
  warm: LoadSummary & { cpuUsPerRequest: number | null }
  half: LoadSummary
  holds: LoadSummary & { cpuUsPerRequest: number | null }
  memory: Awaited<ReturnType<typeof redisMemory>>
  /** Every acknowledged event stored once; up to `cutOff` more (requests cut off unanswered when a timed run stopped). */
  check: { stored: number; acked: number; cutOff: number; ok: boolean }
}

export async function redisMode(dir: string, opts: LoadOptions & { warmup: number }, agentPrefix: string): Promise<RedisModeResult> {
  await mkdir(join(dir, 'redis'), { recursive: true })
  await mkdir(join(dir, 'data'), { recursive: true })
  const redis = await startRedis({ dir: join(dir, 'redis') })
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: join(dir, 'data'), REDIS_URL: redis.url, PORT: '0', HOST: '127.0.0.1', METRICS_PORT: '0' }
    for (const name of ['CLICKHOUSE_URL', 'PRICES_FILE']) delete env[name]
    const burnrate = await startBurnrate(env, join(dir, 'burnrate.log'), null)
    try {
      const apiKey = await createKey(env, 'redis-mode')
      const cold = await load(burnrate.url, apiKey, opts, { agentPrefix, warmup: opts.warmup, load: 'once-per-agent' })
      const warm = await withCpu(burnrate.child.pid, load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation' }))
      const half = await load(burnrate.url, apiKey, opts, { agentPrefix, warmup: opts.warmup, load: { rate: halfOf(warm) } })
      const memory = await redisMemory(redis.url)
      const stored = await storedLlmCalls(burnrate.url, apiKey)
      const holds = await withCpu(burnrate.child.pid, load(burnrate.url, apiKey, opts, { agentPrefix, warmup: 0, load: 'saturation', holds: true }))
      const runs = [cold, warm, half]
      const acked = runs.reduce((n, s) => n + s.ok + (s.warmup?.ok ?? 0), 0)
      // Requests autocannon cut off at the end of a timed run may have been stored unseen.
      const cut = runs.reduce((n, s) => n + cutOff(s) + (s.warmup ? cutOff(s.warmup) : 0), 0)
      return { cold, warm, half, holds, memory, check: { stored, acked, cutOff: cut, ok: stored >= acked && stored <= acked + cut } }
    } finally {
      await stop(burnrate.child, 'burnrate')
    }
  } finally {
    await redis.stop()
  }
}
