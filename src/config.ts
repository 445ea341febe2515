import { resolve } from 'node:path'
import { z } from 'zod'

const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'])
  .transform((v) => v === 'true' || v === '1' || v === 'yes')

const port = z.coerce.number().int().min(0).max(65535)
const positiveInt = z.coerce.number().int().positive()

/** Every environment variable burnrate reads, parsed once at start-up. */
const envSchema = z.object({
  PORT: port.default(8080),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATA_DIR: z.string().min(1).default('./data'),
  CLICKHOUSE_URL: z.url({ protocol: /^https?$/ }).optional(),
  CLICKHOUSE_USER: z.string().optional(),
  CLICKHOUSE_PASSWORD: z.string().optional(),
  CLICKHOUSE_DATABASE: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).default('default'),
  REDIS_URL: z.url({ protocol: /^rediss?$/, error: 'must be a redis:// or rediss:// URL' }).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  PRICES_FILE: z.string().min(1).optional(),
  EVENTS_RATE_LIMIT: positiveInt.default(120),
  READS_RATE_LIMIT: positiveInt.default(600),
  CONFIG_RATE_LIMIT: positiveInt.default(60),
  WEBHOOK_ALLOW_PRIVATE: bool.default(false),
  WEBHOOK_TIMEOUT_MS: positiveInt.default(5000),
  JOURNAL_FSYNC: bool.default(false),
  JOURNAL_MAX_ROWS: positiveInt.default(1_000_000),
  JOURNAL_LEASE_MS: z.coerce.number().int().min(300).default(10_000),
  SHIP_INTERVAL_MS: positiveInt.default(1000),
  SHIP_MAX_ROWS: positiveInt.default(50_000),
  KEY_CACHE_TTL_MS: z.coerce.number().int().min(0).default(5000),
  AUTH_FAILURES_PER_MINUTE: positiveInt.default(30),
  PAUSE_GRACE_MS: z.coerce.number().int().min(0).default(60_000),
  TRUST_PROXY: bool.default(false),
  METRICS_PORT: port.optional(),
})

export interface Config {
  readonly port: number
  readonly host: string
  readonly dataDir: string
  readonly clickhouse:
    | { readonly kind: 'embedded'; readonly path: string }
    | { readonly kind: 'server'; readonly url: string; readonly username?: string; readonly password?: string }
  readonly clickhouseDatabase: string
  readonly redisUrl?: string
  readonly logLevel: string
  readonly pricesFile?: string
  readonly rateLimits: { readonly events: number; readonly reads: number; readonly config: number }
  readonly webhook: { readonly allowPrivate: boolean; readonly timeoutMs: number }
  /**
   * The journal (issue 8): fdatasync per group write (embedded), the backlog bound in rows,
   * and (REDIS_URL) how long an instance that stops renewing keeps its journal before
   * another instance takes it over and ships it.
   */
  readonly journal: { readonly fsync: boolean; readonly maxRows: number; readonly leaseMs: number }
  /** The shipper: a batch at most this often under load, and at most this many rows. */
  readonly ship: { readonly intervalMs: number; readonly maxRows: number }
  readonly keyCacheTtlMs: number
  /** How long after a pause an agent's llm_calls may still arrive (in flight) before it counts as ignoring it (issue 13). */
  readonly pauseGraceMs: number
  /** Failed authentications a client address may make per minute before 429 (per instance). */
  readonly authFailuresPerMinute: number
  readonly trustProxy: boolean
  /** Prometheus metrics listener; off when unset. */
  readonly metricsPort?: number
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
    redisUrl: e.REDIS_URL,
    logLevel: e.LOG_LEVEL,
    pricesFile: e.PRICES_FILE,
    rateLimits: { events: e.EVENTS_RATE_LIMIT, reads: e.READS_RATE_LIMIT, config: e.CONFIG_RATE_LIMIT },
    webhook: { allowPrivate: e.WEBHOOK_ALLOW_PRIVATE, timeoutMs: e.WEBHOOK_TIMEOUT_MS },
    journal: { fsync: e.JOURNAL_FSYNC, maxRows: e.JOURNAL_MAX_ROWS, leaseMs: e.JOURNAL_LEASE_MS },
    ship: { intervalMs: e.SHIP_INTERVAL_MS, maxRows: e.SHIP_MAX_ROWS },
    keyCacheTtlMs: e.KEY_CACHE_TTL_MS,
    pauseGraceMs: e.PAUSE_GRACE_MS,
    authFailuresPerMinute: e.AUTH_FAILURES_PER_MINUTE,
    trustProxy: e.TRUST_PROXY,
    metricsPort: e.METRICS_PORT,
  })
}
