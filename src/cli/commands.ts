import { parseArgs } from 'node:util'

/**
 * What `burnrate` understands, and its usage texts, in one table: the parser and the help
 * read the same entries, so a command cannot take an option its usage does not show.
 * No I/O and no heavy imports here: `--help` and a mistyped option answer without loading
 * the service.
 */

export interface OptionSpec {
  type: 'string' | 'boolean'
  short?: string
  /** Placeholder of a string option's value in the usage: `--user <user>`. */
  value?: string
  required?: boolean
  help: string
  /** Why a given value is refused, or undefined when it is fine. */
  check?: (value: string) => string | undefined
}

export interface CommandSpec {
  /** The words after `burnrate`: '' for burnrate itself, 'keys create', … */
  name: string
  /** One line: what it does. */
  summary: string
  /** Positional arguments, all required, in order: ['key-id'] shows as <key-id>. */
  positionals: readonly string[]
  options: Readonly<Record<string, OptionSpec>>
  /** The subcommands of a group (`burnrate`, `burnrate keys`). */
  subcommands?: readonly string[]
  /** Paragraphs after the synopsis. */
  details?: string
}

const help: OptionSpec = { type: 'boolean', short: 'h', help: 'show this help and exit' }

const USER = /^[^\s\p{Cc}]{1,128}$/u

/** The required --user of a command, checked as a user id. */
function userOption(help: string) {
  return {
    type: 'string',
    value: '<user>',
    required: true,
    help,
    check: (v: string) => (USER.test(v) ? undefined : '--user must be 1 to 128 characters, without spaces or control characters'),
  } as const
}

// The formats of GET /export (storage/exports.ts), named here so that --help loads nothing.
const EXPORT_FORMAT_NAMES = ['csv', 'ndjson', 'parquet']

const KEY_COMMANDS_NOTE =
  'Works whether or not a server runs on DATA_DIR: with one running, the command goes\n' +
  'through its admin socket (DATA_DIR/burnrate.sock) and takes effect there at once.'

export const COMMANDS: Readonly<Record<string, CommandSpec>> = {
  '': {
    name: '',
    summary: 'meters what AI agents spend on LLM calls and pauses the ones over budget',
    positionals: [],
    options: { help, version: { type: 'boolean', short: 'v', help: 'print the version and exit' } },
    subcommands: ['serve', 'migrate', 'keys create', 'keys list', 'keys revoke', 'export', 'users erase', 'backup', 'restore'],
    details:
      'Configured by the environment: PORT, HOST, DATA_DIR, CLICKHOUSE_URL, REDIS_URL, LOG_LEVEL,\n' +
      'PRICES_FILE and the others docs/configuration.md lists. `burnrate help <command>` or\n' +
      '`burnrate <command> --help` shows what a command takes.',
  },
  serve: {
    name: 'serve',
    summary: 'run the service until SIGTERM or SIGINT',
    positionals: [],
    options: { help },
    details:
      'Listens on HOST:PORT (default 127.0.0.1:8080) and applies the ClickHouse schema when it starts.\n' +
      'Without CLICKHOUSE_URL, ClickHouse runs in process on DATA_DIR (default ./data), which one\n' +
      'process opens at a time; without REDIS_URL, the hot state is kept in process. On SIGTERM or\n' +
      'SIGINT it finishes in-flight requests, stores what is pending and exits 0.',
  },
  migrate: {
    name: 'migrate',
    summary: 'apply the ClickHouse schema and exit',
    positionals: [],
    options: {
      'dry-run': { type: 'boolean', help: 'print the migrations that would run and their statements; change nothing' },
      help,
    },
    details:
      'Applies the migrations ClickHouse has not seen yet (CLICKHOUSE_URL, or the embedded one on\n' +
      'DATA_DIR) and prints their names. `burnrate serve` does this itself when it starts: run it\n' +
      'to prepare a database before a deploy. While a server runs on an embedded DATA_DIR, that\n' +
      'server holds the data (and applied the schema when it started): migrate refuses, exit 1,\n' +
      'with --dry-run too. Migrations are forward-only: when ClickHouse records one this release\n' +
      'does not ship (a newer release applied it), migrate refuses, exit 1, and so does serve.',
  },
  keys: {
    name: 'keys',
    summary: 'create, list and revoke API keys',
    positionals: [],
    options: { help },
    subcommands: ['keys create', 'keys list', 'keys revoke'],
  },
  'keys create': {
    name: 'keys create',
    summary: 'create an API key; the key is the last line of output, shown once',
    positionals: [],
    options: {
      user: userOption('the user the key acts for: 1 to 128 characters, no spaces (required)'),
      name: { type: 'string', value: '<label>', help: 'a label, shown by `burnrate keys list`' },
      'rate-limit': {
        type: 'string',
        value: '<per minute>',
        help: 'POST /events requests per minute for this key (default: EVENTS_RATE_LIMIT, 120)',
        check: (v) => (/^[1-9][0-9]{0,8}$/.test(v) ? undefined : '--rate-limit must be a whole number of requests per minute, 1 to 999999999'),
      },
      help,
    },
    details: 'Only the key\'s hash is stored: it cannot be shown again.\n' + KEY_COMMANDS_NOTE,
  },
  'keys list': {
    name: 'keys list',
    summary: 'list keys, tab-separated, never their secrets',
    positionals: [],
    options: { help },
    details: 'Columns: KEY ID, USER, NAME, RATE LIMIT, CREATED, REVOKED (- while the key works).\n' + KEY_COMMANDS_NOTE,
  },
  'keys revoke': {
    name: 'keys revoke',
    summary: 'revoke a key; it stops working at once',
    positionals: ['key-id'],
    options: { help },
    details:
      '<key-id> is the KEY ID column of `burnrate keys list` (the 12 characters after br_ in the key).\n' +
      'Exits 1 when no key has that id or the key was already revoked.\n' +
      KEY_COMMANDS_NOTE,
  },
  export: {
    name: 'export',
    summary: "write a user's events of a time range as CSV, NDJSON or Parquet",
    positionals: [],
    options: {
      user: userOption('the user whose events are exported (required)'),
      from: { type: 'string', value: '<time>', help: 'the first instant, ISO 8601 (2026-11-01 or 2026-11-01T00:00:00Z; default: a day before --to)' },
      to: { type: 'string', value: '<time>', help: 'the instant after the last, ISO 8601 (default: now)' },
      format: {
        type: 'string',
        value: '<format>',
        help: 'csv (with a header row), ndjson or parquet (default: csv)',
        check: (v) => (EXPORT_FORMAT_NAMES.includes(v) ? undefined : `--format must be one of ${EXPORT_FORMAT_NAMES.join(', ')}`),
      },
      out: { type: 'string', value: '<file>', help: 'write to this file (default: stdout); it appears once the export is whole' },
      help,
    },
    details:
      'The events whose timestamp is in [--from, --to), oldest first, every stored field: the same\n' +
      'bytes as GET /export. A range is at most 366 days. Works whether or not a server runs on\n' +
      'DATA_DIR: with one running on an embedded ClickHouse, the export goes through its admin socket\n' +
      '(DATA_DIR/burnrate.sock) and takes one of its export slots; with CLICKHOUSE_URL, the command\n' +
      'reads ClickHouse itself. Exits 1 when the export fails (a partial --out file is removed).',
  },
  users: {
    name: 'users',
    summary: "erase a user's data",
    positionals: [],
    options: { help },
    subcommands: ['users erase'],
  },
  'users erase': {
    name: 'users erase',
    summary: 'delete every event, config, key, hold and journal entry of a user, and print what went',
    positionals: [],
    options: {
      user: userOption('the user to erase (required)'),
      help,
    },
    details:
      'Revokes the user\'s API keys first (their requests are refused from then on), then deletes the\n' +
      "user's rows from every ClickHouse table, the hot state's entries and the journal's, and waits\n" +
      'until no file of ClickHouse, the journal or Redis keeps them. Prints the count removed of each\n' +
      'kind. The audit log keeps one record of it, under sha256:<hex of the user id>, never the id.\n' +
      'With a server running on DATA_DIR, the server erases (through its admin socket), while it goes\n' +
      'on serving the other users; otherwise the command does it itself (with REDIS_URL, beside\n' +
      'running instances). docs/erasure.md says what is removed, what is kept and how to show it.',
  },
  // The embedded store only: docs/backups.md says how to back up a ClickHouse server and Redis.
  backup: {
    name: 'backup',
    summary: 'copy the embedded store (ClickHouse and the journal) of one moment into a directory',
    positionals: [],
    options: {
      to: { type: 'string', value: '<dir>', required: true, help: 'the directory to write: absent or empty (required)' },
      help,
    },
    details:
      "ClickHouse's BACKUP of the database plus the journal's rows not yet shipped, of one moment:\n" +
      'every event acknowledged before it is in the backup, once. With a server running on DATA_DIR,\n' +
      'the server takes it through its admin socket (DATA_DIR/burnrate.sock) and goes on serving;\n' +
      'shipping to ClickHouse waits while it copies. Without one, the command opens DATA_DIR itself.\n' +
      '<dir>/manifest.json, written last, says what it holds. The embedded store only: with\n' +
      'CLICKHOUSE_URL or REDIS_URL, see docs/backups.md. Exits 1 when <dir> is not empty.',
  },
  restore: {
    name: 'restore',
    summary: 'restore a backup into an empty DATA_DIR',
    positionals: [],
    options: {
      from: { type: 'string', value: '<dir>', required: true, help: 'a directory `burnrate backup` wrote (required)' },
      help,
    },
    details:
      'DATA_DIR must be absent or empty. A server started on it then has the totals, configs, pauses,\n' +
      'keys and events of the backup, each event once; open budget holds are not kept (as by a\n' +
      'restart). Exits 1 for a DATA_DIR that is not empty, a backup that did not finish, or one made\n' +
      'by a newer schema than this burnrate knows.',
  },
}

export type ParsedCommandLine =
  | { kind: 'help'; command: CommandSpec }
  | { kind: 'version' }
  | { kind: 'usage-error'; command: CommandSpec; reason: string }
  | { kind: 'run'; command: CommandSpec; values: Record<string, string | undefined>; positionals: string[] }

/** What `argv` (the words after `burnrate`) asks for. Never throws. */
export function parseCommandLine(argv: readonly string[]): ParsedCommandLine {
  let command = COMMANDS['']!
  let rest = [...argv]
  let helpRequested = false
  if (rest[0] === 'help') {
    helpRequested = true
    rest = rest.slice(1)
  }
  // Descend into groups: `burnrate keys create …`.
  while (command.subcommands) {
    const word = rest[0]
    if (word === undefined || word.startsWith('-')) break
    const next = COMMANDS[command.name ? `${command.name} ${word}` : word]
    if (!next) {
      const what = command.name ? 'subcommand' : 'command'
      return { kind: 'usage-error', command, reason: `unknown ${what} '${word}'` }
    }
    command = next
    rest = rest.slice(1)
  }
  if (helpRequested) {
    return rest.length === 0 ? { kind: 'help', command } : { kind: 'usage-error', command, reason: `unexpected argument '${rest[0]}'` }
  }

  const parsed = parseOptions(command, rest)
  if (parsed.help) return { kind: 'help', command }
  if (parsed.reason) return { kind: 'usage-error', command, reason: parsed.reason }
  if (parsed.values.version) return { kind: 'version' }
  if (command.subcommands) {
    const depth = command.name ? command.name.split(' ').length : 0
    const choices = [...new Set(command.subcommands.map((s) => s.split(' ')[depth]!))]
    const what = command.name ? 'subcommand' : 'command'
    return { kind: 'usage-error', command, reason: `a ${what} is required (${listOr(choices)})` }
  }
  const values: Record<string, string | undefined> = {}
  // A flag given (a boolean option: `migrate --dry-run`) is the value 'true'.
  for (const [name, value] of Object.entries(parsed.values)) if (value !== false) values[name] = value === true ? 'true' : value
  return { kind: 'run', command, values, positionals: parsed.positionals }
}

interface ParsedOptions {
  help: boolean
  reason?: string
  values: Record<string, string | boolean>
  positionals: string[]
}

/**
 * util.parseArgs in its lenient mode, for its tokens: the strict mode throws on the first
 * problem with a message meant for programmers. Here each problem becomes one line of
 * reason, and `--help` anywhere wins over every problem.
 */
function parseOptions(command: CommandSpec, args: string[]): ParsedOptions {
  const options = Object.fromEntries(
    Object.entries(command.options).map(([name, o]) => [name, o.short ? { type: o.type, short: o.short } : { type: o.type }]),
  )
  const { tokens } = parseArgs({ args, options, strict: false, allowPositionals: true, tokens: true })
  const values: Record<string, string | boolean> = {}
  const positionals: string[] = []
  let reason: string | undefined
  const fail = (why: string) => (reason ??= why)
  for (const token of tokens) {
    if (token.kind === 'option-terminator') continue
    if (token.kind === 'positional') {
      if (positionals.length < command.positionals.length) positionals.push(token.value)
      else fail(`unexpected argument '${token.value}'`)
      continue
    }
    const spec = Object.hasOwn(command.options, token.name) ? command.options[token.name] : undefined
    if (!spec) {
      fail(`unknown option ${token.rawName}`)
      continue
    }
    if (token.name === 'help') return { help: true, values, positionals }
    if (Object.hasOwn(values, token.name)) fail(`${token.rawName} is given more than once`)
    if (spec.type === 'boolean') {
      if (token.inlineValue) fail(`${token.rawName} does not take a value`)
      values[token.name] = true
    } else if (token.value === undefined) {
      fail(`${token.rawName} needs a value`)
    } else if (!token.inlineValue && token.value.startsWith('-')) {
      // `--user --name x`: the next word is an option, not the value (strict parseArgs refuses it too).
      if (token.value === '--help' || token.value === '-h') return { help: true, values, positionals }
      fail(`${token.rawName} needs a value (for a value that starts with '-', write ${token.rawName}=${token.value})`)
    } else {
      const bad = spec.check?.(token.value)
      if (bad) fail(bad)
      values[token.name] = token.value
    }
  }
  for (const [name, spec] of Object.entries(command.options)) {
    if (spec.required && values[name] === undefined) fail(`--${name} is required`)
  }
  const missing = command.positionals[positionals.length]
  if (missing !== undefined) fail(`<${missing}> is required`)
  return reason === undefined ? { help: false, values, positionals } : { help: false, reason, values, positionals }
}

function listOr(words: readonly string[]): string {
  return words.length < 2 ? words.join('') : `${words.slice(0, -1).join(', ')} or ${words.at(-1)}`
}

/** `burnrate keys create --user <user> [--name <label>] …`: a command and what it takes. */
export function synopsis(command: CommandSpec): string {
  const parts = ['burnrate', ...(command.name ? [command.name] : [])]
  if (command.subcommands) parts.push(command.name ? '<subcommand>' : '<command>')
  for (const [name, o] of Object.entries(command.options)) {
    if (name === 'help' || name === 'version') continue
    const option = o.value ? `--${name} ${o.value}` : `--${name}`
    parts.push(o.required ? option : `[${option}]`)
  }
  parts.push(...command.positionals.map((p) => `<${p}>`))
  return parts.join(' ')
}

/** Rows of two columns, the first padded to the widest (a wide first cell gets a line of its own). */
function table(rows: readonly (readonly [string, string])[], indent = '  ', max = 44): string {
  const width = Math.max(0, ...rows.map(([left]) => left.length).filter((n) => n <= max))
  return rows
    .map(([left, right]) =>
      left.length > width ? `${indent}${left}\n${indent}${' '.repeat(width + 2)}${right}` : `${indent}${left.padEnd(width + 2)}${right}`,
    )
    .join('\n')
}

/**
 * The help of a command, as `burnrate <command> --help` prints it; `brief` (after a usage
 * error) leaves out the summary and the notes, which --help shows.
 */
export function usage(command: CommandSpec, opts: { brief?: boolean } = {}): string {
  const sections = [`usage: ${synopsis(command)}`]
  if (!opts.brief) sections.unshift(command.name ? `burnrate ${command.name}: ${command.summary}` : `burnrate: ${command.summary}`)
  if (command.subcommands) {
    const rows = command.subcommands.map((name): [string, string] => [synopsis(COMMANDS[name]!).slice('burnrate '.length), COMMANDS[name]!.summary])
    sections.push(`${command.name ? 'subcommands' : 'commands'}:\n${table(rows)}`)
  }
  const options = Object.entries(command.options).map(([name, o]): [string, string] => {
    const long = o.value ? `--${name} ${o.value}` : `--${name}`
    return [o.short ? `-${o.short}, ${long}` : `    ${long}`, o.help]
  })
  sections.push(`options:\n${table(options)}`)
  if (opts.brief) sections.push(`\`burnrate ${command.name ? `${command.name} ` : ''}--help\` says more.`)
  else if (command.details) sections.push(command.details)
  return sections.join('\n\n')
}
