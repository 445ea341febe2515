/** How the CLI talks: results on stdout, problems on stderr, one line each unless asked for more. */

export function say(text: string): void {
  process.stdout.write(`${text}\n`)
}

export function complain(text: string): void {
  process.stderr.write(`${text}\n`)
}

/** LOG_LEVEL=debug or trace: a failure shows its stack and the libraries' own logs. Read raw, as the configuration may be what failed. */
export function debugLogging(): boolean {
  const level = process.env.LOG_LEVEL
  return level === 'debug' || level === 'trace'
}

/** A message of several lines (ConfigError lists each bad variable) as one: `invalid configuration: PORT: …; HOST: …`. */
export function oneLine(message: string): string {
  const [first = '', ...rest] = message
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.length > 0)
  return rest.length === 0 ? first : `${first}${first.endsWith(':') ? ' ' : '; '}${rest.join('; ')}`
}

const CONSOLE_METHODS = ['error', 'warn', 'info', 'debug'] as const

/**
 * Holds back what libraries print to the console until `release` says whether to print it.
 * The ClickHouse client logs each failed request there itself (its arguments and the error's
 * stack) before the error reaches the CLI, which reports it in one line instead: a command
 * that fails drops them (release(false)), one that goes on prints them (release(true)).
 * With LOG_LEVEL=debug or trace nothing is held.
 */
export function holdConsole(): (print: boolean) => void {
  if (debugLogging()) return () => {}
  const original = CONSOLE_METHODS.map((name) => [name, console[name]] as const)
  const held: (() => void)[] = []
  for (const [name, method] of original) console[name] = (...args: unknown[]) => void held.push(() => method.apply(console, args))
  return (print) => {
    for (const [name, method] of original) console[name] = method
    if (print) for (const line of held.splice(0)) line()
  }
}
