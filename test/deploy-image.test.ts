// The image has what the server needs at run time, and nothing it does not. No Docker
// engine runs here, so the test builds the image's file list itself: the Dockerfile's COPY
// instructions expanded against the repository with .dockerignore's rules applied, compared with
// what the server loads: every module reachable from the ENTRYPOINT, every file it reads next to
// its sources (new URL(…, import.meta.url)), package.json; and the packages it imports are
// production dependencies (the image installs only those).
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { basename, join, posix } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8')
const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string> }

// ---- Dockerfile ------------------------------------------------------------------------------

interface Instruction {
  keyword: string
  args: string
}
interface Stage {
  image: string
  name: string | null
  instructions: Instruction[]
}

/** Stages and their instructions: `\` continues a line, `#` lines are comments (also inside a continuation). */
function parseDockerfile(text: string): Stage[] {
  const logical: string[] = []
  let current = ''
  for (const line of text.split('\n')) {
    if (/^\s*#/.test(line)) continue
    if (/\\\s*$/.test(line)) {
      current += line.replace(/\\\s*$/, ' ')
      continue
    }
    current += line
    if (current.trim()) logical.push(current.trim())
    current = ''
  }
  const stages: Stage[] = []
  for (const l of logical) {
    const [, keyword = '', args = ''] = /^(\S+)\s*([\s\S]*)$/.exec(l) ?? []
    const kw = keyword.toUpperCase()
    if (kw === 'FROM') {
      const [, image = '', name = null] = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args) ?? []
      stages.push({ image, name, instructions: [] })
    } else if (stages.length > 0) {
      stages.at(-1)!.instructions.push({ keyword: kw, args })
    }
  }
  return stages
}

/** An instruction's arguments: the JSON (exec) form or whitespace-separated words, `--flags` apart. */
function words(args: string): { flags: Record<string, string>; rest: string[] } {
  const flags: Record<string, string> = {}
  let text = args
  for (let m = /^--([\w-]+)(?:=(\S*))?\s+/.exec(text); m; m = /^--([\w-]+)(?:=(\S*))?\s+/.exec(text)) {
    flags[m[1]!] = m[2] ?? 'true'
    text = text.slice(m[0].length)
  }
  const rest = text.trim().startsWith('[') ? (JSON.parse(text) as string[]) : text.trim().split(/\s+/)
  return { flags, rest }
}

const stages = parseDockerfile(read('Dockerfile'))
const runtime = stages.at(-1)!
const ofRuntime = (keyword: string) => runtime.instructions.filter((i) => i.keyword === keyword)
const indexOf = (pred: (i: Instruction) => boolean) => runtime.instructions.findIndex(pred)

// ---- .dockerignore (Docker's rules, the subset this repository uses) --------------------------

interface Rule {
  negate: boolean
  pattern: string
  regex: RegExp
}

/**
 * Patterns are relative to the context root (a pattern without a slash does not match in
 * subdirectories, unlike .gitignore); `*` and `?` stay within one path segment, `**` spans any
 * number of them; the last rule that matches a path or one of its parents decides.
 */
function parseDockerignore(text: string): Rule[] {
  const rules: Rule[] = []
  for (const raw of text.split('\n')) {
    let line = raw.trim()
    if (!line || line.startsWith('#')) continue
    const negate = line.startsWith('!')
    if (negate) line = line.slice(1).trim()
    const pattern = posix.normalize(line).replace(/^(\.\/|\/)+/, '').replace(/\/+$/, '')
    if (pattern === '.' || pattern === '') continue
    rules.push({ negate, pattern, regex: globRegex(pattern) })
  }
  return rules
}

function globRegex(pattern: string): RegExp {
  let re = ''
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!
    if (pattern.startsWith('**', i)) {
      const slash = pattern[i + 2] === '/'
      re += slash ? '(?:.*/)?' : '.*'
      i += slash ? 2 : 1
    } else if (c === '*') re += '[^/]*'
    else if (c === '?') re += '[^/]'
    else if (c === '[' || c === '\\') throw new Error(`.dockerignore: "${pattern}" uses syntax this test does not implement`)
    else re += c.replace(/[.+^${}()|\]]/g, '\\$&')
  }
  return new RegExp(`^${re}$`)
}

/** The path and each of its parent directories: a/b/c → a, a/b, a/b/c. */
const withParents = (path: string) => path.split('/').map((_, i, parts) => parts.slice(0, i + 1).join('/'))

function ignored(rules: Rule[], path: string): boolean {
  let out = false
  for (const rule of rules) if (withParents(path).some((p) => rule.regex.test(p))) out = !rule.negate
  return out
}

/** Whether a negation could take back a path under `dir` (then the walk has to look inside it). */
function negationReaches(rules: Rule[], dir: string): boolean {
  const parts = dir.split('/')
  return rules.some((rule) => {
    if (!rule.negate) return false
    const segs = rule.pattern.split('/')
    for (let i = 0; i < parts.length; i++) {
      const seg = segs[i]
      if (seg === undefined) return true // the rule names a parent of dir: it takes dir back whole
      if (seg.includes('**')) return true
      if (!globRegex(seg).test(parts[i]!)) return false
    }
    return true
  })
}

/** Every file `docker build .` sends: the repository with .dockerignore applied. */
function buildContext(rules: Rule[]): string[] {
  const files: string[] = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
      const path = dir ? `${dir}/${entry.name}` : entry.name
      if (entry.isDirectory()) {
        if (!ignored(rules, path) || negationReaches(rules, path)) walk(path)
      } else if (!ignored(rules, path)) files.push(path)
    }
  }
  walk('')
  return files.sort()
}

const rules = parseDockerignore(read('.dockerignore'))
const context = buildContext(rules)

// ---- the image's files -----------------------------------------------------------------------

const WORKDIR = ofRuntime('WORKDIR').at(-1)?.args ?? '/'

/** Whether a context file is the COPY source or under it (`.` is the whole context). */
const inSource = (src: string, file: string) => src === '.' || file === src || file.startsWith(`${src}/`)

/** In-image path (relative to WORKDIR) → the context file it comes from, for every COPY from the context. */
function imageFiles(): Map<string, string> {
  const out = new Map<string, string>()
  for (const copy of ofRuntime('COPY').concat(ofRuntime('ADD'))) {
    const { flags, rest } = words(copy.args)
    if (flags.from) continue
    const dest = posix.resolve(WORKDIR, rest.at(-1)!)
    for (const source of rest.slice(0, -1)) {
      const src = posix.normalize(source).replace(/\/+$/, '')
      if (/[*?[]/.test(src)) throw new Error(`COPY ${source}: wildcards are not expanded by this test`)
      const under = context.filter((f) => inSource(src, f))
      for (const f of under) {
        const target = f === src ? (rest.at(-1)!.endsWith('/') ? posix.join(dest, basename(f)) : dest) : posix.join(dest, src === '.' ? f : f.slice(src.length + 1))
        out.set(posix.relative(WORKDIR, target), f)
      }
    }
  }
  return out
}

// ---- what the server needs at run time -------------------------------------------------------

const isImportMetaUrl = (n: ts.Node) =>
  ts.isPropertyAccessExpression(n) && n.name.text === 'url' && ts.isMetaProperty(n.expression) && n.expression.keywordToken === ts.SyntaxKind.ImportKeyword

/** A string argument, or a template with substitutions as `*`: `./lua/${name}.lua` → ./lua/*.lua. */
function literal(n: ts.Node | undefined): string | null {
  if (!n) return null
  if (ts.isStringLiteral(n) || ts.isNoSubstitutionTemplateLiteral(n)) return n.text
  if (ts.isTemplateExpression(n)) return n.head.text + n.templateSpans.map((s) => `*${s.literal.text}`).join('')
  return null
}

const isCreateRequire = (n: ts.Node) => ts.isCallExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === 'createRequire'

interface Needs {
  /** Repository files the process loads or reads. */
  files: Set<string>
  /** Packages it imports or requires at run time (type-only imports are erased by Node). */
  packages: Map<string, string>
  problems: string[]
}

/** From the entry point: static and dynamic imports of relative paths, files read next to a module, packages. */
function runtimeNeeds(entry: string): Needs {
  const needs: Needs = { files: new Set(['package.json']), packages: new Map(), problems: [] }
  const queue = [entry]
  const filesUnder = (dir: string) => {
    const out: string[] = []
    for (const e of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
      const p = `${dir}/${e.name}`
      if (e.isDirectory()) out.push(...filesUnder(p))
      else out.push(p)
    }
    return out
  }
  const module = (from: string, spec: string) => {
    if (spec.startsWith('.')) {
      const path = posix.join(posix.dirname(from), spec)
      if (!existsSync(join(ROOT, path))) needs.problems.push(`${from} imports ${spec}, which does not exist`)
      else if (!needs.files.has(path)) {
        needs.files.add(path)
        if (/\.[cm]?[jt]s$/.test(path)) queue.push(path)
      }
      return
    }
    if (spec.startsWith('node:') || builtinModules.includes(spec)) return
    const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!
    needs.packages.set(name, from)
  }
  const fileRead = (from: string, spec: string) => {
    const path = posix.join(posix.dirname(from), spec)
    const matches = spec.endsWith('/')
      ? existsSync(join(ROOT, path)) ? filesUnder(path.replace(/\/$/, '')) : []
      : spec.includes('*')
        ? existsSync(join(ROOT, posix.dirname(path)))
          ? readdirSync(join(ROOT, posix.dirname(path))).filter((n) => globRegex(posix.basename(path)).test(n)).map((n) => posix.join(posix.dirname(path), n))
          : []
        : existsSync(join(ROOT, path)) ? [path] : []
    if (matches.length === 0) needs.problems.push(`${from} reads ${spec}, which matches no file`)
    for (const m of matches) needs.files.add(m)
  }
  needs.files.add(entry)
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    const from = file
    const source = ts.createSourceFile(from, read(from), ts.ScriptTarget.Latest, true)
    const visit = (n: ts.Node): void => {
      if (ts.isImportDeclaration(n) && ts.isStringLiteral(n.moduleSpecifier) && !n.importClause?.isTypeOnly) module(from, n.moduleSpecifier.text)
      else if (ts.isExportDeclaration(n) && n.moduleSpecifier && ts.isStringLiteral(n.moduleSpecifier) && !n.isTypeOnly) module(from, n.moduleSpecifier.text)
      else if (ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.ImportKeyword) {
        const spec = literal(n.arguments[0])
        if (spec === null) needs.problems.push(`${from}: import() of a computed path`)
        else module(from, spec)
      } else if (ts.isNewExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === 'URL' && n.arguments?.[1] && isImportMetaUrl(n.arguments[1])) {
        const spec = literal(n.arguments[0])
        if (spec === null) needs.problems.push(`${from}: new URL() of a computed path`)
        else fileRead(from, spec)
      } else if (ts.isCallExpression(n) && (isCreateRequire(n.expression) || (ts.isPropertyAccessExpression(n.expression) && isCreateRequire(n.expression.expression)))) {
        const spec = literal(n.arguments[0])
        if (spec !== null) module(from, spec)
      }
      ts.forEachChild(n, visit)
    }
    visit(source)
  }
  return needs
}

const ENTRY = (() => {
  const [cmd, script] = words(ofRuntime('ENTRYPOINT').at(-1)?.args ?? '[]').rest
  return cmd === 'node' && script ? script : ''
})()

// ---- the checks ------------------------------------------------------------------------------

describe('Dockerfile', () => {
  it('builds on a pinned Node 24 release, one and the same in every stage', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2)
    for (const s of stages) expect(s.image, `FROM ${s.image}`).toMatch(/^node:24\.\d+\.\d+(?:-[\w.]+)*(?:@sha256:[a-f0-9]{64})?$/)
    expect(new Set(stages.map((s) => s.image)).size).toBe(1)
  })

  it('installs production dependencies only, in a stage of their own', () => {
    const install = stages.slice(0, -1).flatMap((s) => s.instructions).filter((i) => i.keyword === 'RUN' && /\bnpm (ci|install)\b/.test(i.args))
    expect(install.length).toBeGreaterThan(0)
    for (const i of install) expect(i.args).toMatch(/--omit=dev\b/)
    const fromDeps = ofRuntime('COPY').map((c) => words(c.args)).filter((c) => c.flags.from)
    expect(fromDeps.map((c) => c.rest.at(-1))).toContain('./node_modules')
    expect(ofRuntime('RUN').some((r) => /\bnpm\b/.test(r.args)), 'the runtime stage runs no npm').toBe(false)
  })

  it('runs as a non-root user that owns /data, created before USER, and declares it a volume', () => {
    const users = ofRuntime('USER')
    expect(users.length).toBeGreaterThan(0)
    const user = users.at(-1)!.args.trim()
    expect(user).not.toMatch(/^(root|0)(:|$)/)
    const name = user.split(':')[0]!
    const userAt = indexOf((i) => i.keyword === 'USER')
    const prepares = indexOf(
      (i) =>
        i.keyword === 'RUN' &&
        /\bmkdir\b[^&;]*\s\/data\b/.test(i.args) &&
        new RegExp(`\\bchown\\s+(-\\w+\\s+)*${name}(:\\S+)?\\s+(\\S+\\s+)*/data\\b`).test(i.args),
    )
    expect(prepares, `a RUN that creates /data and chowns it to ${name}`).toBeGreaterThanOrEqual(0)
    expect(prepares).toBeLessThan(userAt)
    expect(ofRuntime('VOLUME').some((v) => words(v.args).rest.includes('/data'))).toBe(true)
    expect(ofRuntime('ENV').map((e) => e.args).join(' ')).toMatch(/\bDATA_DIR=\/data\b/)
  })

  it('is production: NODE_ENV, the port exposed, a HEALTHCHECK on /readyz or /healthz, `serve` by default', () => {
    const env = ofRuntime('ENV').map((e) => e.args).join(' ')
    expect(env).toMatch(/\bNODE_ENV=production\b/)
    expect(env).toMatch(/\bHOST=0\.0\.0\.0\b/)
    expect(ofRuntime('EXPOSE').map((e) => e.args).join(' ')).toMatch(/\b8080\b/)
    const health = ofRuntime('HEALTHCHECK')
    expect(health).toHaveLength(1)
    expect(health[0]!.args).toMatch(/\bCMD\b[\s\S]*\/(readyz|healthz)\b/)
    expect(ENTRY).toBe('bin/burnrate.js')
    expect(words(ofRuntime('CMD').at(-1)!.args).rest).toEqual(['serve'])
  })
})

describe('.dockerignore and the build context', () => {
  it('keeps out node_modules, .git, data, virtualenvs and everything the server does not run', () => {
    const heavy = /^(node_modules|\.git|data|\.venv|coverage|test|bench|clients|scripts|\.ci)(\/|$)|(^|\/)node_modules\//
    expect(context.filter((f) => heavy.test(f))).toEqual([])
    expect(context.filter((f) => f.endsWith('.log'))).toEqual([])
  })

  it('keeps in every file the Dockerfile copies from the context', () => {
    for (const stage of stages) {
      for (const copy of stage.instructions.filter((i) => i.keyword === 'COPY')) {
        const { flags, rest } = words(copy.args)
        if (flags.from) continue
        for (const source of rest.slice(0, -1)) {
          const src = posix.normalize(source).replace(/\/+$/, '')
          expect(
            context.some((f) => inSource(src, f)),
            `COPY ${source} (stage ${stage.name ?? stage.image}) finds nothing in the build context`,
          ).toBe(true)
        }
      }
    }
  })
})

describe('the image holds what the server needs at run time', () => {
  const image = imageFiles()
  const needs = runtimeNeeds(ENTRY)

  it('finds every module and file the server loads (the walk itself is sound)', () => {
    expect(needs.problems).toEqual([])
    // The walk reaches what it must, or it proves nothing: the server, a migration, a Lua script.
    expect(needs.files).toContain('src/server.ts')
    expect([...needs.files].some((f) => /^sql\/\d{4}_.+\.sql$/.test(f))).toBe(true)
    expect([...needs.files].some((f) => /^src\/hot-state\/lua\/.+\.lua$/.test(f))).toBe(true)
    expect([...needs.files].some((f) => /^src\/journal\/lua\/.+\.lua$/.test(f))).toBe(true)
  })

  it('copies every one of them, at the path the server looks for it', () => {
    const missing = [...needs.files].filter((f) => image.get(f) !== f).sort()
    expect(missing, 'files the server loads that the image lacks').toEqual([])
  })

  it('installs every package the server imports: production dependencies only', () => {
    const notProduction = [...needs.packages].filter(([name]) => !(name in pkg.dependencies)).map(([name, from]) => `${name} (imported by ${from})`)
    expect(notProduction).toEqual([])
  })

  it('copies nothing from the context that is not run: no tests, benchmarks, clients or node_modules', () => {
    const sources = [...image.values()]
    expect(sources.filter((f) => /^(test|bench|clients|node_modules|scripts|data|\.ci|\.git)\//.test(f))).toEqual([])
    expect(sources.filter((f) => /(^|\/)node_modules\/|\.test\.ts$/.test(f))).toEqual([])
    // Every file it copies is a file the server runs or reads, or the sources beside them.
    const unneeded = sources.filter((f) => !needs.files.has(f) && !/^(src|public)\//.test(f))
    expect(unneeded).toEqual([])
  })
})
