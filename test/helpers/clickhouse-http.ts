// A ClickHouse server for tests that need one shared by several burnrate processes: the
// real engine (chDB) behind the subset of ClickHouse's HTTP interface that
// @clickhouse/client speaks (POST / with the query in the body or in ?query=, param_*
// bindings, settings as URL parameters, GET /ping). chDB opens a data path in one process
// only, and no ClickHouse server can be installed here; this process is that server.
// Run: node test/helpers/clickhouse-http.ts <data path> [port]; prints `listening <port>`.
import { createServer } from 'node:http'
import { Session } from 'chdb'

const IGNORED = new Set(['query', 'query_id', 'database', 'default_format', 'wait_end_of_query', 'enable_http_compression', 'session_id', 'session_timeout'])

const session = new Session(process.argv[2] ?? '')

/** clickhouse-js sends parameter values TSV-escaped; chdb escapes them again when binding. */
function unescapeTsv(s: string): string {
  return s.replace(/\\(.)/g, (_, c: string) => ({ n: '\n', t: '\t', r: '\r', b: '\b', f: '\f', '0': '\0' })[c] ?? c)
}

const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost')
  if (url.pathname === '/ping') return void res.writeHead(200).end('Ok.\n')
  let body = ''
  req.setEncoding('utf8')
  req.on('data', (c: string) => (body += c))
  req.on('end', () => {
    const inUrl = url.searchParams.get('query')
    const sql = inUrl === null ? body : `${inUrl}\n${body}`
    const params: Record<string, string> = {}
    const settings: string[] = []
    for (const [k, v] of url.searchParams) {
      if (k.startsWith('param_')) params[k.slice(6)] = unescapeTsv(v)
      else if (!IGNORED.has(k)) settings.push(`SET ${k} = ${/^-?\d+(\.\d+)?$/.test(v) ? v : `'${v.replace(/'/g, "\\'")}'`}`)
    }
    const text = settings.length > 0 ? `${settings.join('; ')}; ${sql}` : sql
    const run = Object.keys(params).length > 0 ? session.queryBindAsync(text, params) : session.queryAsync(text)
    run.then(
      (result) => {
        res.writeHead(200, { 'content-type': 'text/plain; charset=UTF-8', 'x-clickhouse-summary': '{}' }).end(result.bytes())
      },
      (err: Error & { clickhouseCode?: number }) => {
        // The client reads the code and message from the body, as a server writes them.
        const message = /Code: \d+/.test(err.message) ? err.message : `Code: ${err.clickhouseCode ?? 1000}. DB::Exception: ${err.message}`
        res.writeHead(500, { 'x-clickhouse-exception-code': String(err.clickhouseCode ?? 1000) }).end(message)
      },
    )
  })
})

server.listen(Number(process.argv[3] ?? 0), '127.0.0.1', () => {
  const address = server.address()
  if (address && typeof address === 'object') console.log(`listening ${address.port}`)
})

const stop = () => server.close(() => session.close())
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
