// What Grafana and its ClickHouse data source (grafana-clickhouse-datasource 4.x) do to a
// panel's `rawSql` before ClickHouse sees it, so a test can run the dashboard's SQL on the
// embedded engine as Grafana would send it. Three steps, in the order the plugin runs them:
//
//  1. the plugin's front end, `applyConditionalAll` (src/data/CHDatasource.ts):
//     `$__conditionalAll(<condition>, $var)` becomes `1=1` when $var is All (or empty),
//     else <condition>;
//  2. Grafana's template service, called by the plugin's `applyTemplateVariables` with the
//     plugin's own default format (CHDatasource.ts `format`): `$var`, `${var}`, `${var:fmt}`,
//     `[[var]]`;
//  3. the plugin's back end, `macros.Interpolate` (pkg/macros/macros.go, the same expansions
//     from v4.0.3 through v4.20.0; 4.0.0-4.0.2 rendered $__fromTime/$__toTime as
//     toDateTime64(ms/1000, 3)): `$__timeFilter(col)`, `$__fromTime`, `$__timeInterval(col)`,
//     `$__interval_s`, … (the macro engine changed in 4.19, grafana/macropro; the expansions
//     did not)
//
// Written from reading those files; nothing here is the plugin's code. Only what a dashboard
// can rely on is modelled: a macro or variable this file does not know is left in place, as
// Grafana and the plugin leave it, so a test sees it reach the SQL.

/** A template variable's current value and, for All, the values All stands for. */
export interface TemplateVariable {
  /** One value, several (multi-value), or `'$__all'` / `['$__all']` for All. */
  current: string | readonly string[]
  /** The variable's options: what All expands to (a variable without a custom all value). */
  options?: readonly string[]
}

/** What Grafana sends with a query: the dashboard's time range and the panel's interval. */
export interface GrafanaRequest {
  /** Epoch milliseconds. */
  from: number
  to: number
  /** Grafana's $__interval for the panel, in milliseconds. */
  intervalMs: number
  variables: Readonly<Record<string, TemplateVariable>>
}

export const ALL = '$__all'

/** Steps 1 to 3: the SQL ClickHouse receives for `rawSql`. */
export function interpolate(rawSql: string, request: GrafanaRequest): string {
  const templated = replaceVariables(applyConditionalAll(rawSql, request.variables), request.variables)
  return expandMacros(templated, request)
}

// ---- 1. $__conditionalAll (plugin front end) -------------------------------------------------

const CONDITIONAL_ALL = '$__conditionalAll('

/**
 * `$__conditionalAll(cond, $var)`: the plugin reads the variable's current value as text
 * (a multi-value's values joined by commas) and keeps `cond` unless that text is empty or
 * `$__all`. Its arguments are split at the commas of the outermost parentheses; the
 * plugin's splitter does not look inside string literals, nor does this one. Rewritten from
 * the last occurrence backwards, as the plugin does.
 */
export function applyConditionalAll(sql: string, variables: Readonly<Record<string, TemplateVariable>>): string {
  for (let at = sql.lastIndexOf(CONDITIONAL_ALL); at !== -1; at = sql.lastIndexOf(CONDITIONAL_ALL)) {
    const open = at + CONDITIONAL_ALL.length - 1
    const call = callAt(sql, open)
    if (!call || call.args.length !== 2) return sql
    const [condition, variableArg] = call.args as [string, string]
    const name = /\$\{(\w+)\}|\$(\w+)/.exec(variableArg.trim())
    let phrase = condition
    if (name) {
      const variable = variables[name[1] ?? name[2]!]
      const text = variable === undefined ? undefined : [variable.current].flat().join(',')
      if (text === '' || text === ALL) phrase = '1=1'
    }
    sql = sql.slice(0, at) + phrase + sql.slice(call.end)
  }
  return sql
}

// ---- 2. Grafana template variables ------------------------------------------------------------

// ${name}, ${name:format}, [[name]], [[name:format]], $name: Grafana's variable syntaxes.
const VARIABLE = /\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)(?::(\w+))?\]\]|\$(\w+)/g

/**
 * Grafana's templateSrv.replace with the plugin's default format. A name that is not a
 * dashboard variable (the plugin's `$__…` macros among them) is left as it is. All, on a
 * variable without a custom all value, stands for every one of its options.
 */
export function replaceVariables(sql: string, variables: Readonly<Record<string, TemplateVariable>>): string {
  return sql.replace(VARIABLE, (match, braced?: string, bracedFmt?: string, bracketed?: string, bracketedFmt?: string, plain?: string) => {
    const name = braced ?? bracketed ?? plain!
    const variable = variables[name]
    if (variable === undefined) return match
    const current = variable.current
    const isAll = current === ALL || (Array.isArray(current) && current.includes(ALL))
    const value: string | readonly string[] = isAll ? (variable.options ?? []) : current
    return format(value, bracedFmt ?? bracketedFmt)
  })
}

function format(value: string | readonly string[], fmt: string | undefined): string {
  const many = typeof value === 'string' ? null : value
  switch (fmt) {
    case undefined:
      // The plugin's default (CHDatasource.ts `format`): several values as 'a','b' (not
      // escaped), one value as it is. Dashboards should quote with :singlequote instead.
      return many ? `'${many.join("','")}'` : (value as string)
    case 'singlequote': {
      // Grafana's singlequote: each value in '…', a ' inside escaped as \' (a backslash is
      // not escaped), several joined by commas.
      const quote = (v: string) => `'${v.replace(/'/g, "\\'")}'`
      return many ? many.map(quote).join(',') : quote(value as string)
    }
    case 'sqlstring': {
      const quote = (v: string) => `'${v.replace(/'/g, "''")}'`
      return many ? many.map(quote).join(',') : quote(value as string)
    }
    case 'percentencode': {
      // Grafana's percentencode (encodeURIComponentStrict): encodeURIComponent, and the
      // characters it leaves as they are that RFC 3986 reserves, !'()*, encoded too; several
      // values as one, in braces.
      const encode = (v: string) => encodeURIComponent(v).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
      return many ? encode(`{${many.join(',')}}`) : encode(value as string)
    }
    case 'raw':
    case 'csv':
      return many ? many.join(',') : (value as string)
    default:
      throw new Error(`variable format :${fmt} is not modelled in test/helpers/grafana-macros.ts`)
  }
}

// ---- 3. The plugin's back-end macros ----------------------------------------------------------

type Macro = (args: readonly string[], r: GrafanaRequest) => string

const seconds = (ms: number) => Math.floor(ms / 1000)
/** toDateTime(<unix seconds>): the plugin's second-precision instant. */
const dateTime = (ms: number) => `toDateTime(${seconds(ms)})`
/** fromUnixTimestamp64Milli(<unix ms>): its millisecond-precision instant. */
const dateTime64 = (ms: number) => `fromUnixTimestamp64Milli(${ms})`
/** toDate('YYYY-MM-DD') of the instant, in UTC (Go formats it in the plugin process's zone: UTC in Grafana's image). */
const date = (ms: number) => `toDate('${new Date(ms).toISOString().slice(0, 10)}')`
/** The interval in whole seconds, at least 1 (Go's int(math.Max(interval.Seconds(), 1))). */
const intervalSeconds = (r: GrafanaRequest) => Math.trunc(Math.max(r.intervalMs / 1000, 1))

function oneArg(name: string, expand: (col: string, r: GrafanaRequest) => string): Macro {
  return (args, r) => {
    if (args.length !== 1) throw new Error(`$__${name} expects 1 argument, got ${args.length}`)
    return expand(args[0]!, r)
  }
}

/** The expansions of pkg/macros/macros.go (ClickHouseMacros) that take the time range or interval. */
const MACROS: Readonly<Record<string, Macro>> = {
  fromTime: (_, r) => dateTime(r.from),
  toTime: (_, r) => dateTime(r.to),
  fromTime_ms: (_, r) => dateTime64(r.from),
  toTime_ms: (_, r) => dateTime64(r.to),
  timeFilter: oneArg('timeFilter', (c, r) => `${c} >= ${dateTime(r.from)} AND ${c} <= ${dateTime(r.to)}`),
  timeFilter_ms: oneArg('timeFilter_ms', (c, r) => `${c} >= ${dateTime64(r.from)} AND ${c} <= ${dateTime64(r.to)}`),
  timeFrom: oneArg('timeFrom', (c, r) => `${c} >= ${dateTime(r.from)}`),
  timeTo: oneArg('timeTo', (c, r) => `${c} <= ${dateTime(r.to)}`),
  dateFilter: oneArg('dateFilter', (c, r) => `${c} >= ${date(r.from)} AND ${c} <= ${date(r.to)}`),
  timeInterval: oneArg('timeInterval', (c, r) => `toStartOfInterval(toDateTime(${c}), INTERVAL ${intervalSeconds(r)} second)`),
  timeInterval_ms: oneArg(
    'timeInterval_ms',
    (c, r) => `toStartOfInterval(toDateTime64(${c}, 3), INTERVAL ${Math.trunc(Math.max(r.intervalMs, 1))} millisecond)`,
  ),
  interval_s: (_, r) => String(intervalSeconds(r)),
}

/**
 * `$__name` or `$__name(arg, …)`: the name is the longest run of word characters (so
 * `$__fromTime_ms` is not `$__fromTime` followed by `_ms`), arguments are split at the
 * commas of the outermost parentheses and trimmed. A macro inside another's arguments is
 * expanded first, as 4.20 does (this dashboard nests none). Unknown macros stay as they are.
 */
export function expandMacros(sql: string, request: GrafanaRequest): string {
  let out = ''
  let i = 0
  for (;;) {
    const at = sql.indexOf('$__', i)
    if (at === -1) return out + sql.slice(i)
    const name = /^\w+/.exec(sql.slice(at + 3))?.[0] ?? ''
    const macro = MACROS[name]
    out += sql.slice(i, at)
    let end = at + 3 + name.length
    if (!macro) {
      out += sql.slice(at, end)
      i = end
      continue
    }
    let args: string[] = []
    if (sql[end] === '(') {
      const call = callAt(sql, end)
      if (!call) throw new Error(`unbalanced parentheses after $__${name}`)
      args = call.args.map((a) => expandMacros(a, request).trim())
      if (args.length === 1 && args[0] === '') args = [] // `()`: no arguments
      end = call.end
    }
    out += macro(args, request)
    i = end
  }
}

/** The arguments of the call whose `(` is at `open`, and the index just past its `)`. */
function callAt(sql: string, open: number): { args: string[]; end: number } | null {
  const args: string[] = []
  let depth = 0
  let start = open + 1
  for (let k = open; k < sql.length; k++) {
    const c = sql[k]
    if (c === '(') depth++
    else if (c === ')' && --depth === 0) {
      args.push(sql.slice(start, k))
      return { args, end: k + 1 }
    } else if (c === ',' && depth === 1) {
      args.push(sql.slice(start, k))
      start = k + 1
    }
  }
  return null
}
