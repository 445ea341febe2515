import { existsSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { pino } from 'pino'
import type { ApiKeyRecord } from '../storage/keys.ts'
import type { CreatedKey } from '../auth/api-keys.ts'
import { ApiKeys } from '../auth/api-keys.ts'
import { systemClock } from '../clock.ts'
import { ConfigError, loadConfig, type Config } from '../config.ts'
import { startServer } from '../server.ts'
import { createClickHouse } from '../storage/clickhouse.ts'
import { migrate } from '../storage/migrations.ts'
import { AdminError, adminRequest, adminSocketPath, isListening } from './admin.ts'

const USAGE = `usage:
  burnrate serve                                         run the service (PORT, HOST, DATA_DIR, … from the environment)
  burnrate migrate                                       apply the ClickHouse schema and exit
  burnrate keys create --user <user> [--name <label>] [--rate-limit <per minute>]
                                                         create an API key; the key is the last line of output, shown once
  burnrate keys list                                     list keys (never their secrets)
  burnrate keys revoke <key-id>                          revoke a key; it stops working at once`

async function main(argv: string[]): Promise<number> {
  const [command, sub, ...rest] = argv
  if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
    console.log(USAGE)
    return command === undefined ? 2 : 0
  }
  const config = loadConfig()
  if (command === 'serve') return serve(config)
  if (command === 'migrate') return withKeys(config, async () => 0)
  if (command === 'keys' && sub === 'create') return createKey(config, rest)
  if (command === 'keys' && sub === 'list') return listKeys(config)
  if (command === 'keys' && sub === 'revoke') return revokeKey(config, rest)
  console.error(`unknown command: ${argv.join(' ')}\n\n${USAGE}`)
  return 2
}

async function serve(config: Config): Promise<number> {
  const server = await startServer(config)
  server.app.log.info(
    { address: server.address, metrics: server.metricsAddress, clickhouse: config.clickhouse.kind, journal: server.services.journal ? 'segment log' : 'none (REDIS_URL)', dataDir: config.dataDir },
    'burnrate is serving',
  )
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      server.app.log.info({ signal }, 'draining: finishing in-flight batches')
      server.close().then(resolve, (err: unknown) => {
        server.app.log.error({ err }, 'error while shutting down')
        resolve()
      })
    }
    process.once('SIGTERM', () => stop('SIGTERM'))
    process.once('SIGINT', () => stop('SIGINT'))
  })
  return 0
}

/**
 * Runs a key command against a running server's admin socket when there is one (it holds
 * the embedded data path), else directly against ClickHouse.
 */
async function viaServer<T>(config: Config, remote: (socket: string) => Promise<T>, local: (keys: ApiKeys) => Promise<T>): Promise<T> {
  const socket = adminSocketPath(config.dataDir)
  if (existsSync(socket) && (await isListening(socket))) return remote(socket)
  return withKeys(config, local)
}

async function withKeys<T>(config: Config, fn: (keys: ApiKeys) => Promise<T>): Promise<T> {
  const clickhouse = createClickHouse(config)
  try {
    await migrate(clickhouse)
    return await fn(new ApiKeys(clickhouse, { clock: systemClock, cacheTtlMs: 0 }))
  } finally {
    await clickhouse.close()
  }
}

async function createKey(config: Config, args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { user: { type: 'string' }, name: { type: 'string' }, 'rate-limit': { type: 'string' } },
    strict: true,
  })
  if (!values.user || !/^[^\s\p{Cc}]{1,128}$/u.test(values.user)) {
    console.error(`keys create: --user <user> is required (1 to 128 characters, no spaces)\n\n${USAGE}`)
    return 2
  }
  const rateLimit = values['rate-limit'] === undefined ? null : Number(values['rate-limit'])
  if (rateLimit !== null && !(Number.isInteger(rateLimit) && rateLimit > 0)) {
    console.error('keys create: --rate-limit must be a positive integer (requests per minute)')
    return 2
  }
  const body = { user: values.user, name: values.name ?? '', rate_limit: rateLimit }
  const created = await viaServer<CreatedKey>(
    config,
    (socket) => adminRequest(socket, 'POST', '/keys', body),
    (keys) => keys.create(body.user, { name: body.name, rateLimit }),
  )
  console.log(`created key ${created.record.keyId} for user ${created.record.userId}; it is shown once:`)
  console.log(created.key)
  return 0
}

async function listKeys(config: Config): Promise<number> {
  const keys = await viaServer<ApiKeyRecord[]>(
    config,
    (socket) => adminRequest(socket, 'GET', '/keys'),
    (k) => k.list(),
  )
  console.log(['KEY ID', 'USER', 'NAME', 'RATE LIMIT', 'CREATED', 'REVOKED'].join('\t'))
  for (const k of keys) {
    console.log([k.keyId, k.userId, k.name || '-', k.rateLimit ?? 'default', k.createdAt, k.revokedAt ?? '-'].join('\t'))
  }
  return 0
}

async function revokeKey(config: Config, args: string[]): Promise<number> {
  const keyId = args[0]
  if (!keyId) {
    console.error('keys revoke: a key id is required (see burnrate keys list)')
    return 2
  }
  const revoked = await viaServer<ApiKeyRecord | null>(
    config,
    (socket) =>
      adminRequest<ApiKeyRecord>(socket, 'POST', `/keys/${encodeURIComponent(keyId)}/revoke`).catch((err: unknown) => {
        if (err instanceof AdminError && err.status === 404) return null
        throw err
      }),
    (k) => k.revoke(keyId),
  )
  if (!revoked) {
    console.error(`keys revoke: no key ${keyId}`)
    return 1
  }
  console.log(`revoked key ${revoked.keyId} of user ${revoked.userId}`)
  return 0
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (err: unknown) => {
    if (err instanceof ConfigError) console.error(err.message)
    else pino(pino.destination(2)).fatal({ err }, 'burnrate failed')
    process.exitCode = 1
  },
)
