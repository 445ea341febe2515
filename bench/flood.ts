/**
 * A flood of made-up API keys: POST /events with a new well-formed key nobody has
 * on every request, from `--connections` connections for `--duration` seconds, as an attacker
 * or a misconfigured fleet would send. With `--addresses N` (N > 1) each request names one of
 * N client addresses in X-Forwarded-For (10.0.x.y, in turn), as a flood through a proxy, or
 * from a botnet, reaches a burnrate run with TRUST_PROXY: no address ever sends enough to be
 * refused for its failures. Prints one JSON line: requests per second and the status codes it
 * got. Run by bench/run.ts beside a fixed-rate load of a real key.
 */
import { parseArgs } from 'node:util'
import autocannon from 'autocannon'
import { generateKey } from '../src/auth/api-keys.ts'
import { benchBody } from './load.ts'

const { values } = parseArgs({ options: { url: { type: 'string' }, connections: { type: 'string' }, duration: { type: 'string' }, addresses: { type: 'string' } }, strict: true })
if (!values.url) throw new Error('--url is required')
const base = new URL(values.url)
if (base.hostname !== '127.0.0.1') throw new Error(`refusing to load anything but 127.0.0.1 (got ${base.hostname})`)
const body = benchBody('flood-agent')
const addresses = Number(values.addresses ?? 1)
let sent = 0
const from = (): Record<string, string> => {
  if (addresses <= 1) return {}
  const i = sent++ % addresses
  return { 'x-forwarded-for': `10.0.${Math.floor(i / 250)}.${(i % 250) + 1}` }
}
const r = await autocannon({
  url: new URL('/events', base).href,
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  requests: [{ method: 'POST', setupRequest: (req) => ({ ...req, body, headers: { ...req.headers, ...from(), 'x-api-key': generateKey().key } }) }],
  connections: Number(values.connections ?? 10),
  duration: Number(values.duration ?? 10),
  pipelining: 1,
})
const statusCodes = Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, s]) => [code, s.count ?? 0]))
console.log(JSON.stringify({ requestsPerSec: r.duration > 0 ? r.requests.sent / r.duration : 0, statusCodes, errors: r.errors }))
