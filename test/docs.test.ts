// The manual is README.md and docs/, and it must not drift from the code: every route of the
// OpenAPI document has its section in docs/api.md, every environment variable the config schema
// reads is in docs/configuration.md, every problem code is in the API's table, and every link
// between the repository's Markdown files leads to a file that exists and, with a #fragment,
// to a heading it has; the example patch of a new budget kind still applies. External links
// are not fetched.
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { envSchema } from '../src/config.ts'
import { PROBLEMS } from '../src/errors.ts'
import { OPENAPI_DOCUMENT } from '../src/openapi.ts'

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)))
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8')

/** Where the client packages' pages (npmjs.com, PyPI) send readers: links must be absolute there. */
const REPOSITORY_FILES = 'https://github.com/burnrate/burnrate/'

/** Every Markdown file that is part of the manual. */
function manualFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)
  const clients = readdirSync(join(ROOT, 'clients')).flatMap((c) =>
    ['README.md', 'CHANGELOG.md'].map((f) => `clients/${c}/${f}`).filter((f) => existsSync(join(ROOT, f))),
  )
  return ['README.md', 'bench/README.md', ...docs, ...clients]
}

/** The text Markdown renders as prose: fenced code blocks and inline code spans become blank. */
function prose(markdown: string): string {
  const lines = markdown.split('\n')
  let fence: string | null = null
  const kept = lines.map((line) => {
    const open = /^ {0,3}(`{3,}|~{3,})/.exec(line)
    if (fence === null && open) {
      fence = open[1]!
      return ''
    }
    if (fence !== null) {
      if (line.trim().startsWith(fence[0]!.repeat(fence.length))) fence = null
      return ''
    }
    return line
  })
  return kept.join('\n').replace(/(`+)(?!`)[\s\S]*?[^`]\1(?!`)/g, (span) => span.replace(/[^\n]/g, ' '))
}

/** The headings of a Markdown file, as written (code blocks are not searched). */
function headings(markdown: string): string[] {
  const code = markdown.split('\n')
  const plain = prose(markdown).split('\n')
  // Headings come from the prose lines, but keep their inline code (`GET /x` is part of the text).
  return plain.flatMap((line, i) => (/^ {0,3}#{1,6}\s/.test(line) ? [code[i]!.replace(/^ {0,3}#{1,6}\s+/, '').replace(/\s+#*\s*$/, '')] : []))
}

/**
 * GitHub's anchor for a heading: its text (a link's text, no HTML tags), lower-cased, every
 * character that is not a letter, a digit, a space, '-' or '_' dropped, each space made '-'.
 * A heading's second use gets '-1', its third '-2'.
 */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  for (const heading of headings(markdown)) {
    const text = heading.replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/<[^>]+>/g, '')
    const base = text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-')
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    out.add(n === 0 ? base : `${base}-${n}`)
  }
  return out
}

interface Link {
  file: string
  line: number
  target: string
}

/** Inline links and images, `[text](target)`, and reference definitions, `[label]: target`. */
function links(file: string): Link[] {
  const text = prose(read(file))
  const lineOf = (index: number) => text.slice(0, index).split('\n').length
  const out: Link[] = []
  for (const m of text.matchAll(/!?\[(?:[^[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    out.push({ file, line: lineOf(m.index), target: m[1]! })
  }
  for (const m of text.matchAll(/^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm)) out.push({ file, line: lineOf(m.index), target: m[1]! })
  return out
}

/** Why a link does not resolve, or null when it does. */
function broken(link: Link): string | null {
  const { file, target } = link
  const [path, fragment] = target.split('#', 2) as [string, string | undefined]
  let resolved: string
  if (target.startsWith(REPOSITORY_FILES)) {
    const m = /^(?:blob|tree)\/main\/([^#?]+)$/.exec(path.slice(REPOSITORY_FILES.length))
    if (!m) return path === REPOSITORY_FILES.slice(0, -1) || path.slice(REPOSITORY_FILES.length) === 'issues' ? null : 'not a file of the repository on main'
    resolved = join(ROOT, decodeURIComponent(m[1]!))
  } else if (/^[a-z][a-z0-9+.-]*:/i.test(target)) {
    return null // another site, or mailto: not fetched
  } else if (path === '') {
    resolved = join(ROOT, file)
  } else {
    resolved = resolve(ROOT, dirname(file), decodeURIComponent(path))
    const home = file.startsWith('clients/') ? join(ROOT, ...file.split('/').slice(0, 2)) : ROOT
    // A client's README and changelog are shown on npmjs.com and PyPI, where only its own
    // directory is there to link to: anything else takes an absolute link to the repository.
    if (resolved !== home && !resolved.startsWith(home + sep)) return `leaves ${relative(ROOT, home) || 'the repository'}: link to ${REPOSITORY_FILES}blob/main/… instead`
  }
  if (!existsSync(resolved)) return `no file ${relative(ROOT, resolved)}`
  if (fragment === undefined) return null
  if (statSync(resolved).isDirectory() || !resolved.endsWith('.md')) return `#${fragment} on a file that is not Markdown`
  return anchors(readFileSync(resolved, 'utf8')).has(decodeURIComponent(fragment)) ? null : `no heading #${fragment} in ${relative(ROOT, resolved)}`
}

describe('docs/api.md', () => {
  // The rule: each path and method of the OpenAPI document is the whole text of one heading,
  // `METHOD /path`, the method upper-case and the path as the document writes it ({agent_id}).
  const api = read('docs/api.md')
  const routeHeadings = headings(api).filter((h) => /^[A-Z]+ \//.test(h))

  it('has a heading `METHOD /path` for every route of the OpenAPI document', () => {
    const documented = Object.entries(OPENAPI_DOCUMENT.paths).flatMap(([path, methods]) => Object.keys(methods as object).map((m) => `${m.toUpperCase()} ${path}`))
    expect(documented.length).toBeGreaterThan(10)
    expect(documented.filter((route) => !routeHeadings.includes(route))).toEqual([])
  })

  it('has no route heading for a route the document does not have', () => {
    const paths = OPENAPI_DOCUMENT.paths as Record<string, Record<string, unknown>>
    expect(routeHeadings.filter((h) => {
      const [method, path] = h.split(' ') as [string, string]
      return paths[path]?.[method.toLowerCase()] === undefined
    })).toEqual([])
  })

  it('names every problem code of the catalogue', () => {
    expect(Object.keys(PROBLEMS).filter((code) => !api.includes(`\`${code}\``))).toEqual([])
  })
})

describe('docs/configuration.md', () => {
  it('names, in backticks, every environment variable the config schema reads', () => {
    const configuration = read('docs/configuration.md')
    const variables = Object.keys(envSchema.shape)
    expect(variables).toContain('REDIS_CLUSTER_NODES')
    expect(variables.filter((name) => !configuration.includes(`\`${name}\``))).toEqual([])
  })
})

describe('links in the manual', () => {
  const files = manualFiles()

  it('covers the README, docs/, bench/ and both clients', () => {
    expect(files).toEqual(expect.arrayContaining(['README.md', 'docs/api.md', 'docs/configuration.md', 'bench/README.md', 'clients/typescript/README.md', 'clients/python/README.md']))
  })

  it.each(files)('%s: every relative link resolves, to a heading where it names one', (file) => {
    const bad = links(file).map((l) => ({ at: `${l.file}:${l.line}`, target: l.target, why: broken(l) })).filter((l) => l.why !== null)
    expect(bad).toEqual([])
  })

  it('reads anchors as GitHub makes them', () => {
    const md = '# GET /agents/{agent_id}/hourly\n## The write path: a journal, then ClickHouse\n## `REDIS_URL` — one Redis\n## Notes\n## Notes\n```\n# not a heading\n```\n'
    expect([...anchors(md)]).toEqual(['get-agentsagent_idhourly', 'the-write-path-a-journal-then-clickhouse', 'redis_url--one-redis', 'notes', 'notes-1'])
  })

  it('finds a link that leaves a client for the repository, and one to a missing heading', () => {
    expect(broken({ file: 'clients/python/README.md', line: 1, target: '../../README.md' })).toMatch(/^leaves clients\/python/)
    expect(broken({ file: 'clients/python/README.md', line: 1, target: `${REPOSITORY_FILES}blob/main/README.md` })).toBeNull()
    expect(broken({ file: 'clients/python/README.md', line: 1, target: `${REPOSITORY_FILES}blob/main/no-such-file.md` })).toMatch(/^no file/)
    expect(broken({ file: 'README.md', line: 1, target: 'docs/api.md#no-such-heading' })).toMatch(/^no heading/)
    expect(broken({ file: 'README.md', line: 1, target: 'docs/api.md#post-events' })).toBeNull()
  })
})

describe('the example of a new kind of budget', () => {
  // docs/architecture.md shows what a new meter kind touches with a patch a reader applies to
  // this tree: it must still apply, or the example has drifted from the code it describes.
  it('applies to the tree as it is (git apply --check)', () => {
    const run = spawnSync('git', ['apply', '--check', 'docs/examples/rolling-2h-meter.patch'], { cwd: ROOT, encoding: 'utf8' })
    expect(run.stderr).toBe('')
    expect(run.status).toBe(0)
  })
})
