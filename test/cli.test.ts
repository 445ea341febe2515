import { spawnSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import { afterEach, describe, expect, it } from 'vitest'
import { api, BIN, cleanup, createKey, drained, freshDataDir, lastLine, runCli, startServe, withDeadline, type CliResult } from './helpers/process.ts'

// `burnrate` as an operator runs it: real processes on their own DATA_DIR, no mocks.

afterEach(() => cleanup())

const KEY_FORMAT = /^br_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/
const exportSynopsis = 'burnrate export --user <user> [--from <time>] [--to <time>] [--format <format>] [--out <file>]'

/** The rows of `burnrate keys list` (tab-separated, one header line), by key id. */
function parseList(stdout: string): Map<string, { user: string; name: string; rateLimit: string; created: string; revoked: string }> {
  const [header, ...rows] = stdout.trimEnd().split('\n')
  expect(header!.split('\t')).toEqual(['KEY ID', 'USER', 'NAME', 'RATE LIMIT', 'CREATED', 'REVOKED'])
  return new Map(
    rows.map((row) => {
      const [id, user, name, rateLimit, created, revoked] = row.split('\t')
      return [id!, { user: user!, name: name!, rateLimit: rateLimit!, created: created!, revoked: revoked! }]
    }),
  )
}

/** stderr that is one line, without a stack trace or a JSON log line: that line. */
function oneLineOf(stderr: string): string {
  expect(stderr).not.toMatch(/^\s+at /m)
  expect(stderr).not.toContain('{"')
  const lines = stderr.trimEnd().split('\n')
  expect(lines, stderr).toHaveLength(1)
  return lines[0]!
}

const event = () => ({ agent_id: 'cli-agent', event_type: 'agent_start', event_id: randomUUID() })

describe('burnrate keys, no server running', () => {
  it('creates, lists and revokes keys, never showing a secret again', async () => {
    const env = { DATA_DIR: freshDataDir() }

    const created = await runCli(['keys', 'create', '--user', 'alice', '--name', 'ci'], env)
    expect(created.code).toBe(0)
    const key = lastLine(created.stdout)
    expect(key).toMatch(KEY_FORMAT)
    const keyId = key.slice(3, 15)

    const listed = await runCli(['keys', 'list'], env)
    expect(listed.code).toBe(0)
    const rows = parseList(listed.stdout)
    expect([...rows.keys()]).toEqual([keyId])
    expect(rows.get(keyId)).toMatchObject({ user: 'alice', name: 'ci', rateLimit: 'default', revoked: '-' })
    expect(Date.parse(rows.get(keyId)!.created)).not.toBeNaN()
    expect(listed.stdout).not.toContain(key)
    expect(listed.stdout).not.toContain(key.slice(16)) // the secret part

    const revoked = await runCli(['keys', 'revoke', keyId], env)
    expect(revoked.code).toBe(0)
    expect(revoked.stdout).toContain(keyId)
    const after = parseList((await runCli(['keys', 'list'], env)).stdout)
    expect(after.get(keyId)).toMatchObject({ user: 'alice', name: 'ci' })
    expect(Date.parse(after.get(keyId)!.revoked)).toBeGreaterThanOrEqual(Date.parse(rows.get(keyId)!.created))

    // Revoking it again is no success: it says when it was revoked.
    const again = await runCli(['keys', 'revoke', keyId], env)
    expect(again).toMatchObject({ code: 1, stdout: '' })
    expect(again.stderr).toBe(`burnrate keys revoke: key ${keyId} was already revoked at ${after.get(keyId)!.revoked}\n`)

    const unknown = await runCli(['keys', 'revoke', '0123456789ab'], env)
    expect(unknown).toMatchObject({ code: 1, stdout: '' })
    expect(oneLineOf(unknown.stderr)).toMatch(/^burnrate keys revoke: no key has the id 0123456789ab\b/)

    const limited = await createKey(env.DATA_DIR, 'bob', ['--rate-limit', '30'])
    expect(parseList((await runCli(['keys', 'list'], env)).stdout).get(limited.keyId)).toMatchObject({ user: 'bob', name: '-', rateLimit: '30', revoked: '-' })

    const noUser = await runCli(['keys', 'create'], env)
    expect(noUser.code).toBe(2)
    expect(noUser.stderr).toMatch(/^burnrate keys create: --user is required\n/)
    expect(noUser.stderr).toMatch(/--user <user>/)
    expect(noUser.stdout).toBe('')
  }, 60_000)
})

describe('burnrate keys with a server running on the same DATA_DIR', () => {
  it('makes a new key work at once and a revoked key fail at once', async () => {
    const dataDir = freshDataDir()
    // A key created and one revoked while no server runs are seen by the server it starts.
    const early = await createKey(dataDir, 'bob')
    const gone = await createKey(dataDir, 'bob')
    expect((await runCli(['keys', 'revoke', gone.keyId], { DATA_DIR: dataDir })).code).toBe(0)

    const server = await startServe(dataDir)
    expect((await api(server.url, 'POST', '/events', early.key, event())).status).toBe(200)
    expect((await api(server.url, 'POST', '/events', gone.key, event())).status).toBe(401)

    // Through the admin socket: no restart, no cache TTL to wait out.
    const { key, keyId } = await createKey(dataDir, 'carol')
    const ok = await api(server.url, 'POST', '/events', key, event())
    expect(ok.status).toBe(200)
    expect(ok.body).toMatchObject({ ok: true, cost_usd: 0, paused: false })
    expect(parseList((await runCli(['keys', 'list'], { DATA_DIR: dataDir })).stdout).get(keyId)).toMatchObject({ user: 'carol', revoked: '-' })

    const revoked = await runCli(['keys', 'revoke', keyId], { DATA_DIR: dataDir })
    expect(revoked.code).toBe(0)
    const again = await runCli(['keys', 'revoke', keyId], { DATA_DIR: dataDir })
    expect(again).toMatchObject({ code: 1, stdout: '' })
    expect(oneLineOf(again.stderr)).toMatch(new RegExp(`^burnrate keys revoke: key ${keyId} was already revoked at \\d{4}-\\d\\d-\\d\\dT`))
    const refused = await api(server.url, 'POST', '/events', key, event())
    expect(refused.status).toBe(401)
    expect(refused.body).toMatchObject({ status: 401, code: 'unauthorized' })
    expect((await api(server.url, 'GET', '/agents', key)).status).toBe(401)
    // The other user's key is untouched.
    expect((await api(server.url, 'POST', '/events', early.key, event())).status).toBe(200)

    const unknown = await runCli(['keys', 'revoke', 'ffffffffffff'], { DATA_DIR: dataDir })
    expect(unknown).toMatchObject({ code: 1, stdout: '' })
    expect(oneLineOf(unknown.stderr)).toMatch(/^burnrate keys revoke: no key has the id ffffffffffff\b/)
  }, 60_000)
})

describe('burnrate serve refuses a bad start', () => {
  it.each([
    ['PORT', { PORT: 'abc' }],
    ['CLICKHOUSE_URL', { CLICKHOUSE_URL: 'not-a-url' }],
  ])('exits non-zero at once when %s is invalid, naming it on stderr', async (name, bad) => {
    const started = Date.now()
    const r = await runCli(['serve'], { DATA_DIR: freshDataDir(), PORT: '0', HOST: '127.0.0.1', ...bad }, 10_000)
    expect(r.code).toBe(1)
    expect(oneLineOf(r.stderr)).toMatch(new RegExp(`^burnrate: invalid configuration: .*${name}`))
    expect(r.stdout).not.toContain('burnrate is serving')
    expect(Date.now() - started).toBeLessThan(5000)
  })

  it('exits non-zero when another server runs on the DATA_DIR, and the first keeps serving', async () => {
    const dataDir = freshDataDir()
    const first = await startServe(dataDir)
    const { key } = await createKey(dataDir, 'dave')

    const second = await runCli(['serve'], { DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1' }, 15_000)
    expect(second.code).toBe(1)
    expect(second.stdout).not.toContain('burnrate is serving')
    expect(oneLineOf(second.stderr)).toMatch(/^burnrate: another burnrate server is running on this DATA_DIR/)

    expect(first.child.exitCode).toBeNull()
    expect((await api(first.url, 'GET', '/healthz', null)).status).toBe(200)
    expect((await api(first.url, 'GET', '/readyz', null)).status).toBe(200)
    const ok = await api(first.url, 'POST', '/events', key, event())
    expect(ok.status).toBe(200)
    await drained(first.url)
    expect((await api(first.url, 'GET', '/agents/events', key)).body.events.map((e: { event_id: string }) => e.event_id)).toEqual([ok.body.event_id])
    // The key commands still reach the first server through its admin socket.
    expect((await runCli(['keys', 'list'], { DATA_DIR: dataDir })).code).toBe(0)

    first.kill('SIGTERM')
    expect(await withDeadline(first.exited, 15_000, 'no exit after SIGTERM')).toEqual({ code: 0, signal: null })
  }, 60_000)
})

// A CLI people can guess. Exit status: 0 done (help, --version), 1 the command
// failed, 2 the command line is wrong (a one-line reason, then the usage, on stderr).

const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version

/** A DATA_DIR that does not exist yet: a command that must not open the stores leaves it so. */
function untouchedDataDir(): string {
  return join(freshDataDir(), 'data')
}

/** A usage error: exit 2, nothing on stdout, `reason` first on stderr, then the usage, no stack and no JSON. */
function expectUsageError(r: CliResult, reason: RegExp, usageLine: string): void {
  expect(r.code, r.stderr).toBe(2)
  expect(r.stdout).toBe('')
  const [first, blank, usage] = r.stderr.split('\n')
  expect(first).toMatch(reason)
  expect(blank).toBe('')
  expect(usage).toBe(`usage: ${usageLine}`)
  expect(r.stderr).toContain('options:\n')
  expect(r.stderr).not.toMatch(/^\s+at /m)
  expect(r.stderr).not.toContain('{')
}

describe('burnrate help and --version', () => {
  it.each([['--help'], ['help'], ['-h']])('burnrate %s lists every command on stdout and exits 0', async (arg) => {
    const dataDir = untouchedDataDir()
    const r = await runCli([arg], { DATA_DIR: dataDir })
    expect(r).toMatchObject({ code: 0, stderr: '' })
    expect(r.stdout).toMatch(/^burnrate: .+\n\nusage: burnrate <command>\n/)
    for (const line of ['  serve ', '  migrate ', '  keys create --user <user> [--name <label>] [--rate-limit <per minute>]', '  keys list ', '  keys revoke <key-id> ', `  ${exportSynopsis.slice('burnrate '.length)}\n`, '  users erase --user <user> ', '-h, --help', '-v, --version']) {
      expect(r.stdout).toContain(line)
    }
    expect(existsSync(dataDir)).toBe(false)
  })

  it.each([
    ['serve', 'burnrate serve', []],
    ['migrate', 'burnrate migrate [--dry-run]', ['--dry-run']],
    ['keys', 'burnrate keys <subcommand>', ['keys create', 'keys list', 'keys revoke']],
    ['keys create', 'burnrate keys create --user <user> [--name <label>] [--rate-limit <per minute>]', ['--user <user>', '--name <label>', '--rate-limit <per minute>']],
    ['keys list', 'burnrate keys list', ['KEY ID']],
    ['keys revoke', 'burnrate keys revoke <key-id>', ['<key-id> is the KEY ID column']],
    ['export', exportSynopsis, ['--format <format>', 'csv (with a header row), ndjson or parquet', '[--from, --to)', 'admin socket']],
    ['users', 'burnrate users <subcommand>', ['users erase']],
    ['users erase', 'burnrate users erase --user <user>', ['sha256:<hex of the user id>', 'admin socket', 'docs/erasure.md']],
  ])('burnrate %s: --help, -h and burnrate help <command> show what it does and takes', async (command, synopsis, mentions) => {
    const words = command.split(' ')
    const dataDir = untouchedDataDir()
    const runs = await Promise.all([
      runCli([...words, '--help'], { DATA_DIR: dataDir }),
      runCli([...words, '-h'], { DATA_DIR: dataDir }),
      runCli(['help', ...words], { DATA_DIR: dataDir }),
    ])
    for (const r of runs) {
      expect(r).toMatchObject({ code: 0, stderr: '' })
      expect(r.stdout).toBe(runs[0]!.stdout)
    }
    const help = runs[0]!.stdout
    expect(help).toMatch(new RegExp(`^burnrate ${command}: \\S.*\\n\\nusage: ${synopsis.replace(/[[\]]/g, '\\$&')}\\n\\n`))
    expect(help).toMatch(/\n {2}-h, --help +show this help and exit\n/)
    for (const m of mentions) expect(help).toContain(m)
    expect(existsSync(dataDir)).toBe(false)
  })

  it('--help wins over a mistake beside it', async () => {
    const r = await runCli(['keys', 'create', '--bogus', '--help'], { DATA_DIR: untouchedDataDir() })
    expect(r).toMatchObject({ code: 0, stderr: '' })
    expect(r.stdout).toMatch(/^burnrate keys create: /)
  })

  it.each([['--version'], ['-v']])('burnrate %s prints the version of package.json', async (arg) => {
    const r = await runCli([arg], { DATA_DIR: untouchedDataDir() })
    expect(r).toEqual({ code: 0, stdout: `burnrate ${VERSION}\n`, stderr: '' })
  })
})

describe('burnrate refuses a wrong command line: exit 2, the reason, the usage', () => {
  const top = 'burnrate <command>'
  const create = 'burnrate keys create --user <user> [--name <label>] [--rate-limit <per minute>]'
  it.each<[string[], RegExp, string]>([
    [[], /^burnrate: a command is required \(serve, migrate, keys, export, users, backup or restore\)$/, top],
    [['frobnicate'], /^burnrate: unknown command 'frobnicate'$/, top],
    [['--bogus'], /^burnrate: unknown option --bogus$/, top],
    [['--version', 'now'], /^burnrate: unexpected argument 'now'$/, top],
    [['--version=1'], /^burnrate: --version does not take a value$/, top],
    [['help', 'frobnicate'], /^burnrate: unknown command 'frobnicate'$/, top],
    [['keys'], /^burnrate keys: a subcommand is required \(create, list or revoke\)$/, 'burnrate keys <subcommand>'],
    [['keys', 'delete', 'abc'], /^burnrate keys: unknown subcommand 'delete'$/, 'burnrate keys <subcommand>'],
    [['keys', '--all'], /^burnrate keys: unknown option --all$/, 'burnrate keys <subcommand>'],
    [['serve', '--port', '8080'], /^burnrate serve: unknown option --port$/, 'burnrate serve'],
    [['serve', 'now'], /^burnrate serve: unexpected argument 'now'$/, 'burnrate serve'],
    [['migrate', '--dry-run=yes'], /^burnrate migrate: --dry-run does not take a value$/, 'burnrate migrate [--dry-run]'],
    [['migrate', 'now'], /^burnrate migrate: unexpected argument 'now'$/, 'burnrate migrate [--dry-run]'],
    [['keys', 'create'], /^burnrate keys create: --user is required$/, create],
    [['keys', 'create', '--name', 'ci'], /^burnrate keys create: --user is required$/, create],
    [['keys', 'create', '--user'], /^burnrate keys create: --user needs a value$/, create],
    [['keys', 'create', '--user', '--name', 'ci'], /^burnrate keys create: --user needs a value\b/, create],
    [['keys', 'create', '--user', 'alice', '--name'], /^burnrate keys create: --name needs a value$/, create],
    [['keys', 'create', '--user', 'alice', '--user', 'bob'], /^burnrate keys create: --user is given more than once$/, create],
    [['keys', 'create', '--user', 'alice bob'], /^burnrate keys create: --user must be 1 to 128 characters/, create],
    [['keys', 'create', '--user', 'alice', '--rate-limit', 'lots'], /^burnrate keys create: --rate-limit must be a whole number of requests per minute, 1 to 999999999$/, create],
    [['keys', 'create', '--user', 'alice', '--rate-limit', '0'], /^burnrate keys create: --rate-limit must be a whole number of requests per minute, 1 to 999999999$/, create],
    [['keys', 'create', '--user', 'alice', 'extra'], /^burnrate keys create: unexpected argument 'extra'$/, create],
    [['keys', 'create', '-u', 'alice'], /^burnrate keys create: unknown option -u$/, create],
    [['keys', 'list', '--json'], /^burnrate keys list: unknown option --json$/, 'burnrate keys list'],
    [['keys', 'list', 'all'], /^burnrate keys list: unexpected argument 'all'$/, 'burnrate keys list'],
    [['keys', 'revoke'], /^burnrate keys revoke: <key-id> is required$/, 'burnrate keys revoke <key-id>'],
    [['keys', 'revoke', 'abc', 'def'], /^burnrate keys revoke: unexpected argument 'def'$/, 'burnrate keys revoke <key-id>'],
    [['keys', 'revoke', '--force', 'abc'], /^burnrate keys revoke: unknown option --force$/, 'burnrate keys revoke <key-id>'],
    [['users', 'erase'], /^burnrate users erase: --user is required$/, 'burnrate users erase --user <user>'],
    [['users', 'erase', '--user', 'alice bob'], /^burnrate users erase: --user must be 1 to 128 characters/, 'burnrate users erase --user <user>'],
    [['export'], /^burnrate export: --user is required$/, exportSynopsis],
    [['export', '--user', 'alice', '--format', 'xml'], /^burnrate export: --format must be one of csv, ndjson, parquet$/, exportSynopsis],
    [['export', '--user', 'alice', 'november'], /^burnrate export: unexpected argument 'november'$/, exportSynopsis],
    [['export', '--user', 'alice', '--from', 'yesterday'], /^burnrate export: --from: must be an ISO 8601 date/, exportSynopsis],
    [['export', '--user', 'alice', '--to', '2026-11-01T00:00:00'], /^burnrate export: --to: must be an ISO 8601 date/, exportSynopsis],
    [['export', '--user', 'alice', '--from', '2026-12-01', '--to', '2026-11-01'], /^burnrate export: --from: must be before to/, exportSynopsis],
    [['export', '--user', 'alice', '--from', '2025-01-01', '--to', '2026-01-03'], /^burnrate export: --from: must be at most 366 days before to$/, exportSynopsis],
  ])('burnrate %j', async (args, reason, usage) => {
    const dataDir = untouchedDataDir()
    expectUsageError(await runCli(args, { DATA_DIR: dataDir }), reason, usage)
    expect(existsSync(dataDir)).toBe(false) // refused before anything was opened
  })

  it('whatever junk is added to a command line, the answer is exit 2 and the usage, never a stack trace', async () => {
    const known = new Set(['--help', '-h', '--version', '-v', '--user', '--name', '--rate-limit', '--from', '--to', '--format', '--out', '--dry-run', 'help', 'serve', 'migrate', 'keys', 'create', 'list', 'revoke', 'export'])
    const junk = fc.oneof(
      fc.stringMatching(/^--[a-z][a-z0-9-]{0,11}$/), // an unknown option
      fc.stringMatching(/^--[a-z][a-z-]{0,8}=[a-z0-9_.:/-]{0,6}$/), // one with a value
      fc.constantFrom('-x', '-q', '-Z', '-9', '-xq'), // unknown short options
      fc.stringMatching(/^[a-z0-9][a-z0-9_.]{0,9}$/), // a stray word
    ).filter((word) => !known.has(word.split('=')[0]!))
    const commands = [['serve'], ['migrate'], ['keys'], ['keys', 'create', '--user', 'alice'], ['keys', 'list'], ['keys', 'revoke', '0123456789ab'], ['export', '--user', 'alice']]
    const dataDir = untouchedDataDir()
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...commands), fc.array(fc.tuple(junk, fc.nat()), { minLength: 1, maxLength: 3 }), async (command, additions) => {
        const args = [...command]
        for (const [word, at] of additions) args.splice(at % (args.length + 1), 0, word)
        const r = await runCli(args, { DATA_DIR: dataDir })
        expect(r.code, `burnrate ${args.join(' ')}\n${r.stderr}`).toBe(2)
        expect(r.stdout).toBe('')
        expect(r.stderr).toMatch(/^burnrate[a-z ]*: .+\n\nusage: burnrate /)
        expect(r.stderr).not.toMatch(/^\s+at /m)
        expect(r.stderr).not.toContain('{"')
      }),
      { numRuns: 30 },
    )
    expect(existsSync(dataDir)).toBe(false)
  }, 120_000)
})

describe('burnrate migrate', () => {
  it('applies the schema once, then says it is up to date', async () => {
    const env = { DATA_DIR: freshDataDir() }
    const first = await runCli(['migrate'], env)
    expect(first).toMatchObject({ code: 0, stderr: '' })
    expect(first.stdout).toMatch(/^applied 0001_events, 0002_/)
    expect(await runCli(['migrate'], env)).toEqual({ code: 0, stdout: 'the schema is up to date\n', stderr: '' })
  }, 60_000)

  it('says in one line, exit 1, that a server running on DATA_DIR holds it and applied the migrations', async () => {
    const dataDir = freshDataDir()
    const server = await startServe(dataDir)
    const r = await runCli(['migrate'], { DATA_DIR: dataDir })
    expect(r).toMatchObject({ code: 1, stdout: '' })
    expect(oneLineOf(r.stderr)).toBe(
      `burnrate migrate: a burnrate server is running on DATA_DIR ${dataDir} and holds its ClickHouse; it applied the migrations when it started`,
    )
    expect((await api(server.url, 'GET', '/readyz', null)).status).toBe(200)
  }, 60_000)
})

describe('burnrate reports a failure of the service in one line, exit 1', () => {
  // Port 1 on loopback: nothing listens there, the connection is refused at once.
  it.each([
    [['keys', 'list']],
    [['keys', 'create', '--user', 'alice']],
    [['keys', 'revoke', '0123456789ab']],
    [['migrate']],
  ])('ClickHouse unreachable: burnrate %j names it, without its password', async (args) => {
    const r = await runCli(args, { DATA_DIR: freshDataDir(), CLICKHOUSE_URL: 'http://burnrate:s3cret@127.0.0.1:1' })
    expect(r).toMatchObject({ code: 1, stdout: '' })
    expect(oneLineOf(r.stderr)).toMatch(/^burnrate: ClickHouse at http:\/\/127\.0\.0\.1:1: .*ECONNREFUSED/)
    expect(r.stderr).not.toContain('s3cret')
  })

  it('a bad environment variable is named, every one on the one line', async () => {
    const r = await runCli(['keys', 'list'], { DATA_DIR: freshDataDir(), PORT: 'abc', EVENTS_RATE_LIMIT: '-1' })
    expect(r).toMatchObject({ code: 1, stdout: '' })
    expect(oneLineOf(r.stderr)).toMatch(/^burnrate: invalid configuration: PORT: .+; EVENTS_RATE_LIMIT: .+$/)
  })

  it('LOG_LEVEL=debug adds the stack after that line', async () => {
    const r = await runCli(['keys', 'list'], { DATA_DIR: freshDataDir(), CLICKHOUSE_URL: 'http://127.0.0.1:1', LOG_LEVEL: 'debug' })
    expect(r.code).toBe(1)
    // The client's own log of the failed request comes first (held back unless debug), then ours.
    expect(r.stderr).toMatch(/^burnrate: ClickHouse at http:\/\/127\.0\.0\.1:1: .*ECONNREFUSED.*\n/m)
    expect(r.stderr).toMatch(/^\s+at /m)
  })
})

/** The machine's own Node when it is older than burnrate needs (CI's is 20), or why there is none. */
function oldNode(): { path: string; version: string } | string {
  const path = '/usr/bin/node'
  if (!existsSync(path)) return `${path} does not exist`
  const version = spawnSync(path, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim()
  const [major = 0, minor = 0] = version.split('.').map(Number)
  if (major > 22 || (major === 22 && minor >= 18)) return `${path} is ${version}, new enough to run burnrate`
  return { path, version }
}

describe('bin/burnrate.js on a Node.js too old to strip types', () => {
  const old = oldNode()
  if (typeof old === 'string') {
    it.skip(`says which version it needs and exits 1 (not tried: ${old})`, () => {})
  } else {
    it(`says which version it needs and how to get it, exit 1 (Node ${old.version})`, () => {
      const r = spawnSync(old.path, [BIN, 'keys', 'list'], { encoding: 'utf8', env: { PATH: process.env.PATH ?? '', DATA_DIR: untouchedDataDir() }, timeout: 10_000 })
      expect(r.status).toBe(1)
      expect(r.stdout).toBe('')
      expect(r.stderr).toBe(
        `burnrate needs Node.js >= 22.18 (this is ${old.version}): install Node.js 24 LTS, or run \`npx burnrate\` in the burnrate repository, which uses its node@24 devDependency\n`,
      )
    })
  }
})
