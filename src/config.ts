import { resolve } from 'node:path'
import { z } from 'zod'
import { DEFAULT_PARTITIONS } from './storage/redis-keys.ts'
import { retentionProblems, type Retention } from './storage/retention.ts'

const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'])
  .transform((v) => v === 'true' || v === '1' || v === 'yes')

const port = z.coerce.number().int().min(0).max(65535)

const DURATION_UNITS_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const
const MAX_DURATION_MS = 366 * DURATION_UNITS_MS.d

/**
 * A duration as an operator writes it: a number of hours ("24", "1.5"), or a number with a
 * unit, m (minutes), h (hours) or d (days): "90m", "36h", "7d". At least a minute, at most
 * 366 days. In milliseconds.
 */
export const duration = z.string().transform((s, ctx) => {
  const m = /^(\d+(?:\.\d+)?)\s*([mhd]?)$/.exec(s.trim())
  const ms = m ? Math.round(Number(m[1]) * DURATION_UNITS_MS[(m[2] || 'h') as keyof typeof DURATION_UNITS_MS]) : Number.NaN
  if (!(ms >= DURATION_UNITS_MS.m && ms <= MAX_DURATION_MS)) {
    ctx.addIssue({ code: 'custom', message: 'must be hours ("24") or a number with a unit m, h or d ("90m", "36h", "7d"), from 1 minute to 366 days' })
    return z.NEVER
  }
  return ms
})
const positiveInt = z.coerce.number().int().positive()
// Days of a retention: a whole number, at most 100 years.
const days = z.coerce.number().int().min(1).max(36_500)

/** Every environment variable burnrate reads, parsed once at start-up; its keys are their names. */
export const envSchema = z.object({
  PORT: port.default(8080),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATA_DIR: z.string().min(1).default('./data'),
  CLICKHOUSE_URL: z.url({ protocol: /^https?$/ }).optional(),
  CLICKHOUSE_USER: z.string().optional(),
  CLICKHOUSE_PASSWORD: z.string().optional(),
  CLICKHOUSE_DATABASE: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).default('default'),
  REDIS_URL: z.url({ protocol: /^rediss?$/, error: 'must be a redis:// or rediss:// URL' }).optional(),
  // A Redis Cluster, by its seed nodes (host:port, or redis[s]://[user:password@]host:port).
  REDIS_CLUSTER_NODES: z
    .string()
    .transform((s, ctx) => {
      const seeds = s.split(',').map((seed) => seed.trim()).filter(Boolean)
      const parsed = seeds.map(parseSeed)
      const bad = seeds.filter((_, i) => parsed[i] === null)
      if (seeds.length === 0 || bad.length > 0) {
        ctx.addIssue({ code: 'custom', message: `must be host:port or redis[s]://[user:password@]host:port seeds, comma-separated${bad.length ? `: not ${bad.join(', ')}` : ''}` })
        return z.NEVER
      }
      const urls = parsed.filter((p) => p!.url)
      const auth = new Set(urls.map((p) => `${p!.tls}|${p!.username ?? ''}|${p!.password ?? ''}`))
      if (auth.size > 1) {
        ctx.addIssue({ code: 'custom', message: 'the seeds name different credentials or schemes: a cluster has one' })
        return z.NEVER
      }
      const first = urls[0] ?? null
      return { nodes: parsed.map((p) => ({ host: p!.host, port: p!.port })), username: first?.username, password: first?.password, tls: first?.tls ?? false }
    })
    .optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  PRICES_FILE: z.string().min(1).optional(),
  EVENTS_RATE_LIMIT: positiveInt.default(120),
  READS_RATE_LIMIT: positiveInt.default(600),
  CONFIG_RATE_LIMIT: positiveInt.default(60),
  EXPORT_CONCURRENCY: positiveInt.default(2),
  EXPORT_STALL_TIMEOUT_MS: positiveInt.default(60_000),
  WEBHOOK_ALLOW_PRIVATE: bool.default(false),
  WEBHOOK_TIMEOUT_MS: positiveInt.default(5000),
  JOURNAL_FSYNC: bool.default(false),
  JOURNAL_MAX_ROWS: positiveInt.default(1_000_000),
  JOURNAL_LEASE_MS: z.coerce.number().int().min(300).default(10_000),
  // Free space DATA_DIR's filesystem keeps (embedded): under it, events are refused (503 disk_full).
  DISK_MIN_FREE_MB: z.coerce.number().int().min(0).default(256),
  SHIP_INTERVAL_MS: positiveInt.default(1000),
  SHIP_MAX_ROWS: positiveInt.default(50_000),
  KEY_CACHE_TTL_MS: z.coerce.number().int().min(0).default(5000),
  AUTH_FAILURES_PER_MINUTE: positiveInt.default(30),
  PAUSE_GRACE_MS: z.coerce.number().int().min(0).default(60_000),
  // A run with no agent_end whose last event is older than this is shown as abandoned.
  RUN_ABANDONED_AFTER: duration.default(24 * DURATION_UNITS_MS.h),
  // The span or resource attribute that names an OTLP span's agent before the GenAI ones.
  OTLP_AGENT_ATTRIBUTE: z.string().min(1).max(256).default('burnrate.agent_id'),
  // How long ClickHouse keeps events, hourly totals and audit records (days); unset: forever.
  EVENTS_RETENTION_DAYS: days.optional(),
  HOURLY_RETENTION_DAYS: days.optional(),
  AUDIT_RETENTION_DAYS: days.optional(),
  TRUST_PROXY: bool.default(false),
  METRICS_PORT: port.optional(),
  // Replicas that must hold a write before it is answered (WAIT), and how long to wait.
  REDIS_WAIT_REPLICAS: z.coerce.number().int().min(0).max(16).default(0),
  REDIS_WAIT_TIMEOUT_MS: positiveInt.default(1000),
  // The partitions users are spread over (each a hash tag: a cluster slot); fixed per deployment.
  REDIS_PARTITIONS: z.coerce.number().int().min(1).max(16384).default(DEFAULT_PARTITIONS),
}).superRefine((e, ctx) => {
  if (e.REDIS_URL && e.REDIS_CLUSTER_NODES) ctx.addIssue({ code: 'custom', path: ['REDIS_CLUSTER_NODES'], message: 'set REDIS_URL (one Redis) or REDIS_CLUSTER_NODES (a cluster), not both' })
  for (const { setting, reason } of retentionProblems(retentionOf(e))) ctx.addIssue({ code: 'custom', path: [setting], message: reason })
})

function retentionOf(e: { EVENTS_RETENTION_DAYS?: number | undefined; HOURLY_RETENTION_DAYS?: number | undefined; AUDIT_RETENTION_DAYS?: number | undefined }): Retention {
  return { eventsDays: e.EVENTS_RETENTION_DAYS ?? null, hourlyDays: e.HOURLY_RETENTION_DAYS ?? null, auditDays: e.AUDIT_RETENTION_DAYS ?? null }
}

export type RedisTarget =
  | { readonly kind: 'single'; readonly url: string }
  | {
      readonly kind: 'cluster'
      readonly nodes: ReadonlyArray<{ host: string; port: number }>
      readonly username?: string | undefined
      readonly password?: string | undefined
      readonly tls: boolean
    }

/** One seed of REDIS_CLUSTER_NODES; null when it is neither host:port nor a redis[s]:// URL. */
function parseSeed(seed: string): { host: string; port: number; url: boolean; tls: boolean; username?: string; password?: string } | null {
  if (/^rediss?:\/\//.test(seed)) {
    let u: URL
    try {
      u = new URL(seed)
    } catch {
      return null
    }
    const port = Number(u.port || 6379)
    if (!u.hostname || u.pathname.length > 1) return null
    return {
      host: u.hostname,
      port,
      url: true,
      tls: u.protocol === 'rediss:',
      ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
      ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
    }
  }
  const m = /^([^:\s/]+):(\d{1,5})$/.exec(seed)
  if (!m || Number(m[2]) > 65535 || Number(m[2]) === 0) return null
  return { host: m[1]!, port: Number(m[2]), url: false, tls: false }
}

export interface Config {
  readonly port: number
  readonly host: string
  readonly dataDir: string
  readonly clickhouse:
    | { readonly kind: 'embedded'; readonly path: string }
    | { readonly kind: 'server'; readonly url: string; readonly username?: string; readonly password?: string }
  readonly clickhouseDatabase: string
  /** The shared hot state and journal: one Redis (REDIS_URL) or a cluster (REDIS_CLUSTER_NODES); none: in process. */
  readonly redis?: RedisTarget
  /** With `redis`: replicas to wait for (0: none), the partitions (slots) users are spread over. */
  readonly redisWait: { readonly replicas: number; readonly timeoutMs: number }
  readonly redisPartitions: number
  readonly logLevel: string
  readonly pricesFile?: string
  readonly rateLimits: { readonly events: number; readonly reads: number; readonly config: number }
  /** Exports (GET /export) one instance runs at once, and how long one may wait for its client to take bytes before it is cut off. */
  readonly exports: { readonly concurrency: number; readonly stallTimeoutMs: number }
  readonly webhook: { readonly allowPrivate: boolean; readonly timeoutMs: number }
  /**
   * The journal: fdatasync per group write (embedded), the backlog bound in rows,
   * and (REDIS_URL) how long an instance that stops renewing keeps its journal before
   * another instance takes it over and ships it.
   */
  readonly journal: { readonly fsync: boolean; readonly maxRows: number; readonly leaseMs: number }
  /** Free bytes DATA_DIR's filesystem keeps (embedded: the journal refuses events under it; 0: never). */
  readonly diskMinFreeBytes: number
  /** The shipper: a batch at most this often under load, and at most this many rows. */
  readonly ship: { readonly intervalMs: number; readonly maxRows: number }
  readonly keyCacheTtlMs: number
  /** How long after a pause an agent's llm_calls may still arrive (in flight) before it counts as ignoring it. */
  readonly pauseGraceMs: number
  /** How long a run without an agent_end may go without an event before it is shown as abandoned (RUN_ABANDONED_AFTER). */
  readonly runAbandonedAfterMs: number
  /** OTLP (POST /v1/traces): the attribute that names a span's agent first (OTLP_AGENT_ATTRIBUTE). */
  readonly otlp: { readonly agentAttribute: string }
  /** Failed authentications a client address may make per minute before 429 (per instance). */
  readonly authFailuresPerMinute: number
  readonly trustProxy: boolean
  /** Prometheus metrics listener; off when unset. */
  readonly metricsPort?: number
  /** How long ClickHouse keeps each kind of data (the TTLs set at start-up). */
  readonly retention: Retention
}

export class ConfigError extends Error {
  override name = 'ConfigError'
}

/** Parses the environment once; throws ConfigError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // An empty variable means "not set", as in most shells' `FOO= cmd`.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''))
  const parsed = envSchema.safeParse(present)
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`)
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`)
  }
  const e = parsed.data
  const dataDir = resolve(e.DATA_DIR)
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    dataDir,
    clickhouse: e.CLICKHOUSE_URL
      ? { kind: 'server' as const, url: e.CLICKHOUSE_URL, username: e.CLICKHOUSE_USER, password: e.CLICKHOUSE_PASSWORD }
      : { kind: 'embedded' as const, path: resolve(dataDir, 'clickhouse') },
    clickhouseDatabase: e.CLICKHOUSE_DATABASE,
    redisWait: { replicas: e.REDIS_WAIT_REPLICAS, timeoutMs: e.REDIS_WAIT_TIMEOUT_MS },
    redisPartitions: e.REDIS_PARTITIONS,
    redis: e.REDIS_URL ? { kind: 'single' as const, url: e.REDIS_URL } : e.REDIS_CLUSTER_NODES ? { kind: 'cluster' as const, ...e.REDIS_CLUSTER_NODES } : undefined,
    logLevel: e.LOG_LEVEL,
    pricesFile: e.PRICES_FILE,
    rateLimits: { events: e.EVENTS_RATE_LIMIT, reads: e.READS_RATE_LIMIT, config: e.CONFIG_RATE_LIMIT },
    exports: { concurrency: e.EXPORT_CONCURRENCY, stallTimeoutMs: e.EXPORT_STALL_TIMEOUT_MS },
    webhook: { allowPrivate: e.WEBHOOK_ALLOW_PRIVATE, timeoutMs: e.WEBHOOK_TIMEOUT_MS },
    journal: { fsync: e.JOURNAL_FSYNC, maxRows: e.JOURNAL_MAX_ROWS, leaseMs: e.JOURNAL_LEASE_MS },
    diskMinFreeBytes: e.DISK_MIN_FREE_MB * 1024 * 1024,
    ship: { intervalMs: e.SHIP_INTERVAL_MS, maxRows: e.SHIP_MAX_ROWS },
    keyCacheTtlMs: e.KEY_CACHE_TTL_MS,
    pauseGraceMs: e.PAUSE_GRACE_MS,
    runAbandonedAfterMs: e.RUN_ABANDONED_AFTER,
    otlp: { agentAttribute: e.OTLP_AGENT_ATTRIBUTE },
    authFailuresPerMinute: e.AUTH_FAILURES_PER_MINUTE,
    trustProxy: e.TRUST_PROXY,
    metricsPort: e.METRICS_PORT,
    retention: retentionOf(e),
  })
}
