import { readFileSync } from 'node:fs'
import { inspect } from 'node:util'
import { loadConfig } from '../config.ts'
import { parseCommandLine, usage } from './commands.ts'
import { complain, debugLogging, oneLine, say } from './output.ts'

/*
 * `burnrate …`. Exit status: 0 done (help and --version included), 1 the command failed
 * (a bad environment, a store that does not answer, an unknown or already revoked key,
 * migrate beside a running server), 2 the command line is wrong (usage on stderr).
 */

async function main(argv: string[]): Promise<number> {
  const parsed = parseCommandLine(argv)
  switch (parsed.kind) {
    case 'help':
      say(usage(parsed.command))
      return 0
    case 'version':
      say(`burnrate ${version()}`)
      return 0
    case 'usage-error':
      complain(`burnrate${parsed.command.name ? ` ${parsed.command.name}` : ''}: ${parsed.reason}\n\n${usage(parsed.command, { brief: true })}`)
      return 2
  }
  const config = loadConfig()
  // Loaded only to run a command: the service's modules (chDB among them) are not needed to
  // answer --help or refuse a mistyped option.
  const { run } = await import('./run.ts')
  return run(parsed.command.name, config, parsed.values, parsed.positionals)
}

/** The version of the package this file belongs to, read when asked. */
function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown }
  return String(pkg.version)
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (err: unknown) => {
    complain(`burnrate: ${oneLine(err instanceof Error ? err.message : String(err))}`)
    if (debugLogging()) complain(inspect(err, { depth: 6 }))
    // What failed may leave handles open (a Redis client reconnecting forever): exit now.
    // (stderr is written synchronously to files, pipes and terminals on POSIX.)
    process.exit(1)
  },
)
