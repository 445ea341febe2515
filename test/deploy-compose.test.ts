// docker-compose.yml starts. No Docker engine runs here, so the file is read for what
// makes `docker compose up` fail or lose data: a mounted file that is not there, an image that
// changes under the same tag, a service started before the one it needs answers, a Redis that
// forgets the journal, a replica count that cannot grow, a Grafana user that can write.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { queryBind } from 'chdb'
import { parse } from 'yaml'
import { describe, expect, it } from 'vitest'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8')

interface Healthcheck {
  test?: string | string[]
  disable?: boolean
}
type Volume = string | { type?: string; source?: string; target?: string }
interface Service {
  image?: string
  build?: unknown
  command?: string | string[]
  environment?: Record<string, string | number | boolean | null> | string[]
  volumes?: Volume[]
  depends_on?: string[] | Record<string, { condition?: string }>
  healthcheck?: Healthcheck
  restart?: string
  ports?: unknown[]
  container_name?: string
}
interface Compose {
  services: Record<string, Service>
  volumes?: Record<string, unknown>
}

const compose = parse(read('docker-compose.yml')) as Compose
const services = Object.entries(compose.services)
const service = (name: string) => {
  const s = compose.services[name]
  if (!s) throw new Error(`docker-compose.yml has no service ${name}`)
  return s
}

/** What compose substitutes when the variable is unset: `${X:-default}` → default, `${X}` → ''. */
const withDefaults = (text: string) => text.replace(/\$\{(\w+)(?::?-([^}]*))?\}/g, (_, _name: string, dflt?: string) => dflt ?? '')

interface Mount {
  kind: 'bind' | 'volume'
  /** Host path (bind), volume name (volume), or null for an anonymous volume. */
  source: string | null
  target: string
}

function mounts(s: Service): Mount[] {
  return (s.volumes ?? []).map((v) => {
    if (typeof v !== 'string') {
      const kind = v.type === 'bind' ? 'bind' : 'volume'
      return { kind, source: v.source ?? null, target: v.target ?? '' }
    }
    const parts = withDefaults(v).split(':')
    if (parts.length === 1) return { kind: 'volume', source: null, target: parts[0]! }
    const source = parts[0]!
    return { kind: /^[./~]/.test(source) ? 'bind' : 'volume', source, target: parts[1]! }
  })
}

function env(s: Service): Record<string, string> {
  const e = s.environment ?? {}
  if (Array.isArray(e)) return Object.fromEntries(e.map((kv) => [kv.split('=')[0]!, kv.split('=').slice(1).join('=')]))
  return Object.fromEntries(Object.entries(e).map(([k, v]) => [k, v === null ? '' : String(v)]))
}

const dependsOn = (s: Service): Record<string, { condition?: string }> =>
  Array.isArray(s.depends_on) ? Object.fromEntries(s.depends_on.map((d) => [d, {}])) : (s.depends_on ?? {})
const commandWords = (s: Service) => (Array.isArray(s.command) ? s.command : (s.command ?? '').split(/\s+/))
const hostPath = (source: string) => join(ROOT, source)

describe('docker-compose.yml', () => {
  it('mounts only files and directories the repository has', () => {
    const binds = services.flatMap(([name, s]) => mounts(s).filter((m) => m.kind === 'bind').map((m) => ({ name, ...m })))
    expect(binds.length).toBeGreaterThan(0)
    for (const b of binds) {
      const path = hostPath(b.source!)
      expect(existsSync(path), `${b.name}: ${b.source} → ${b.target} is not in the repository`).toBe(true)
      if (statSync(path).isDirectory()) expect(readdirSync(path).length, `${b.name}: ${b.source} is empty`).toBeGreaterThan(0)
    }
  })

  it('pins every image to a full version or a digest', () => {
    for (const [name, s] of services) {
      expect(s.image ?? s.build, `${name} has an image or a build`).toBeDefined()
      if (!s.image) continue
      const m = /^[a-z0-9][a-z0-9._/-]*(?::([\w][\w.-]{0,127}))?(@sha256:[a-f0-9]{64})?$/.exec(s.image)
      expect(m, `${name}: image ${s.image} is not a plain reference`).not.toBeNull()
      const [, tag, digest] = m!
      expect(tag === undefined || !/latest/i.test(tag), `${name}: ${s.image}`).toBe(true)
      expect(digest !== undefined || /^v?\d+\.\d+\.\d+/.test(tag ?? ''), `${name}: ${s.image} is not pinned to major.minor.patch or a digest`).toBe(true)
    }
  })

  it('starts a service only once what it depends on is healthy, and restarts every service', () => {
    const needed = new Set<string>()
    for (const [name, s] of services) {
      expect(s.restart, `${name}: restart`).toBe('unless-stopped')
      for (const [dep, how] of Object.entries(dependsOn(s))) {
        needed.add(dep)
        expect(compose.services[dep], `${name} depends on an unknown service ${dep}`).toBeDefined()
        expect(how.condition, `${name} → ${dep}`).toBe('service_healthy')
      }
    }
    expect(needed.size).toBeGreaterThan(0)
    for (const dep of needed) {
      const hc = service(dep).healthcheck
      expect(hc?.test, `${dep} is depended on and has no healthcheck`).toBeDefined()
      expect(hc?.disable).not.toBe(true)
    }
  })

  it('runs Redis with AOF (the journal of acknowledged events), noeviction, on a named volume', () => {
    const redis = service('redis')
    const args = commandWords(redis)
    const flag = (name: string) => args[args.indexOf(name) + 1]
    expect(args[0]).toBe('redis-server')
    expect(flag('--appendonly')).toBe('yes')
    expect(['everysec', 'always']).toContain(flag('--appendfsync'))
    expect(flag('--maxmemory-policy')).toBe('noeviction')
    const data = mounts(redis).find((m) => m.target === '/data')
    expect(data?.kind).toBe('volume')
    expect(Object.keys(compose.volumes ?? {})).toContain(data?.source)
  })

  it('keeps ClickHouse on a named volume', () => {
    const data = mounts(service('clickhouse')).find((m) => m.target === '/var/lib/clickhouse')
    expect(data?.kind).toBe('volume')
    expect(Object.keys(compose.volumes ?? {})).toContain(data?.source)
  })

  it('builds burnrate as a service that scales: no host port, no container name, no shared /data', () => {
    const b = service('burnrate')
    const pkg = JSON.parse(read('package.json')) as { version: string }
    expect(b.build).toBe('.')
    expect(b.image).toBe(`burnrate:${pkg.version}`)
    expect(b.restart).toBe('unless-stopped')
    expect(b.ports, 'a fixed host port allows one replica').toBeUndefined()
    expect(b.container_name).toBeUndefined()
    // The admin socket lives in DATA_DIR: replicas sharing one volume there refuse each other.
    expect(mounts(b).filter((m) => m.target === '/data' && m.source !== null)).toEqual([])
    // Nothing correct may live in one replica: the shared stores.
    expect(env(b).REDIS_URL).toMatch(/^redis:\/\/redis:/)
    expect(env(b).CLICKHOUSE_URL).toMatch(/^http:\/\/clickhouse:8123/)
  })

  it('puts a load balancer in front that finds every replica', () => {
    const lbs = services.filter(([, s]) => 'burnrate' in dependsOn(s) && (s.ports ?? []).length > 0)
    expect(lbs).toHaveLength(1)
    const [name, lb] = lbs[0]!
    const conf = mounts(lb).find((m) => m.kind === 'bind')
    expect(conf, `${name} mounts its configuration`).toBeDefined()
    const text = readFileSync(hostPath(conf!.source!), 'utf8').replace(/#.*$/gm, '')
    // Re-resolved, so `--scale` takes effect without restarting the balancer.
    expect(text).toMatch(/server\s+burnrate:8080\s+resolve\b/)
    expect(text).toMatch(/^\s*resolver\s+127\.0\.0\.11\b/m)
    expect(env(service('burnrate')).TRUST_PROXY).toBe('true')
  })
})

describe("ClickHouse's read-only user for Grafana", () => {
  const ch = service('clickhouse')
  const init = mounts(ch).filter((m) => m.kind === 'bind' && m.target.startsWith('/docker-entrypoint-initdb.d/'))
  const script = init.map((m) => readFileSync(hostPath(m.source!), 'utf8')).join('\n')
  /** The script without its shell comments. */
  const code = script.replace(/^\s*#.*$/gm, '')
  const sql = /<<-?\s*'?SQL'?\n([\s\S]*?)\n\s*SQL\s*$/m.exec(code)?.[1] ?? ''
  const statements = sql.split(/;\s*\n?/).map((s) => s.trim()).filter(Boolean)

  it('is created by an init script the ClickHouse image runs on its first start', () => {
    expect(init.length).toBeGreaterThan(0)
    for (const m of init) expect(m.target).toMatch(/\.(sh|sql)$/)
    expect(statements.length).toBeGreaterThan(0)
    expect(env(ch).CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT).toBe('1')
  })

  it('grants SELECT on burnrate’s database and nothing else', () => {
    const grants = statements.filter((s) => /^GRANT\b/i.test(s))
    expect(grants.length).toBeGreaterThan(0)
    for (const g of grants) {
      const m = /^GRANT\s+([\s\S]+?)\s+ON\s+(\S+)\s+TO\s+(\S+)$/i.exec(g)
      expect(m, g).not.toBeNull()
      const [, privileges, on, to] = m!
      expect(privileges!.split(',').map((p) => p.trim().toUpperCase()), g).toEqual(['SELECT'])
      expect(withDefaults(on!), g).toBe(`${env(ch).CLICKHOUSE_DB}.*`)
      expect(to).toBe('grafana')
      expect(g).not.toMatch(/\b(ALL|INSERT|ALTER|CREATE|DROP|TRUNCATE|OPTIMIZE|SYSTEM)\b|WITH GRANT OPTION/i)
    }
    // Nothing else in the script hands out rights.
    expect(statements.filter((s) => /\b(GRANT|ROLE)\b/i.test(s) && !/^GRANT\b/i.test(s))).toEqual([])
  })

  it('gives the user a readonly = 1 profile that lets the plugin set only its query timeout', () => {
    const profile = statements.find((s) => /^CREATE SETTINGS PROFILE\b/i.test(s))
    expect(profile).toBeDefined()
    const [, name] = /PROFILE\s+(?:OR REPLACE\s+|IF NOT EXISTS\s+)?(\w+)/i.exec(profile!) ?? []
    expect(profile).toMatch(/\breadonly\s*=\s*1\b/)
    const changeable = [...profile!.matchAll(/(\w+)\s+CHANGEABLE_IN_READONLY/gi)].map((m) => m[1])
    expect(changeable).toEqual(['max_execution_time'])
    const user = statements.find((s) => /^CREATE USER\b/i.test(s))
    expect(user).toMatch(/^CREATE USER\s+(OR REPLACE\s+|IF NOT EXISTS\s+)?grafana\b/i)
    expect(user).toMatch(new RegExp(`SETTINGS\\s+PROFILE\\s+'?${name}'?`, 'i'))
  })

  it('parses in ClickHouse’s own parser (chDB)', () => {
    for (const statement of statements) {
      const q = withDefaults(statement).replace(/\$\{?\w+\}?/g, 'x')
      expect(() => queryBind('SELECT formatQuery({q:String}) AS f', { q }, 'JSONEachRow'), q).not.toThrow()
    }
  })

  it('takes its password from GRAFANA_CLICKHOUSE_PASSWORD, which Grafana gets too', () => {
    expect(code).toMatch(/\$\{?GRAFANA_CLICKHOUSE_PASSWORD\b/)
    const forClickHouse = env(ch).GRAFANA_CLICKHOUSE_PASSWORD
    expect(forClickHouse).toMatch(/\$\{GRAFANA_CLICKHOUSE_PASSWORD\b/)
    expect(env(service('grafana')).GRAFANA_CLICKHOUSE_PASSWORD).toBe(forClickHouse)
  })
})

describe('Grafana', () => {
  const g = service('grafana')
  const e = env(g)
  const target = (t: string) => mounts(g).find((m) => m.kind === 'bind' && m.target === t)
  const yamlFiles = (dir: string) =>
    existsSync(hostPath(dir)) ? readdirSync(hostPath(dir)).filter((f) => /\.ya?ml$/.test(f)).map((f) => parse(read(`${dir}/${f}`)) as Record<string, unknown>) : []

  it('installs the ClickHouse plugin, pinned, the way current Grafana documents (GF_PLUGINS_PREINSTALL)', () => {
    const preinstall = `${e.GF_PLUGINS_PREINSTALL_SYNC ?? ''},${e.GF_PLUGINS_PREINSTALL ?? ''}`
    expect(preinstall).toMatch(/(^|,)\s*grafana-clickhouse-datasource@\d+\.\d+\.\d+\s*(,|$)/)
    expect(e.GF_INSTALL_PLUGINS, 'deprecated').toBeUndefined()
  })

  it('has no anonymous access by default, and its admin password from the environment', () => {
    expect(withDefaults(e.GF_AUTH_ANONYMOUS_ENABLED ?? 'false')).toBe('false')
    expect(e.GF_SECURITY_ADMIN_PASSWORD).toMatch(/^\$\{\w+:-.+\}$/)
    expect(e.GF_USERS_ALLOW_SIGN_UP).toBe('false')
  })

  it('provisions the data source as `grafana` with the password compose passes, and burnrate’s dashboards', () => {
    const provisioning = target('/etc/grafana/provisioning')
    expect(provisioning).toBeDefined()
    const datasources = yamlFiles(`${provisioning!.source}/datasources`).flatMap((f) => (f.datasources ?? []) as Array<Record<string, unknown>>)
    const ds = datasources.filter((d) => d.type === 'grafana-clickhouse-datasource')
    expect(ds).toHaveLength(1)
    const jsonData = ds[0]!.jsonData as Record<string, unknown>
    const secure = ds[0]!.secureJsonData as Record<string, unknown>
    expect(jsonData.host).toBe('clickhouse')
    expect(jsonData.username).toBe('grafana')
    expect(jsonData.defaultDatabase).toBe(env(service('clickhouse')).CLICKHOUSE_DB)
    const password = /^\$\{?(\w+)\}?$/.exec(String(secure.password))?.[1]
    expect(password).toBe('GRAFANA_CLICKHOUSE_PASSWORD')
    expect(e[password!], 'Grafana expands it from its own environment').toBeDefined()

    const providers = yamlFiles(`${provisioning!.source}/dashboards`).flatMap((f) => (f.providers ?? []) as Array<{ options?: { path?: string } }>)
    expect(providers.length).toBeGreaterThan(0)
    for (const p of providers) {
      const dashboards = target(p.options?.path ?? '')
      expect(dashboards, `the provider's path ${p.options?.path} is mounted`).toBeDefined()
      expect(readdirSync(hostPath(dashboards!.source!)).some((f) => f.endsWith('.json'))).toBe(true)
    }
  })

  it('is healthy only when its API answers', () => {
    expect(JSON.stringify(g.healthcheck?.test)).toContain('/api/health')
  })
})
