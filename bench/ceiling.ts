/**
 * The ceiling: a bare Fastify server that answers POST /events with a constant body shaped
 * like burnrate's reply. It parses the JSON body the way Fastify does by default and does
 * nothing else (no auth, no validation, no pricing, no storage, no logging), so it is the
 * most a Fastify service can do on this machine, measured in the same run as burnrate.
 *
 * Listens on 127.0.0.1, port 0 (or BENCH_CEILING_PORT), and prints its URL as the first line
 * of stdout. Stops on SIGTERM/SIGINT.
 */
import Fastify from 'fastify'

const REPLY = {
  ok: true,
  event_id: '00000000-0000-4000-8000-000000000000',
  cost_usd: 0.0075,
  paused: false,
  total_cost_24h: 0.0075,
}

const app = Fastify({ logger: false })

// The default JSON content-type parser reads and parses the body before the handler runs.
app.post('/events', async () => REPLY)

const address = await app.listen({ host: '127.0.0.1', port: Number(process.env.BENCH_CEILING_PORT ?? 0) })
console.log(address)

const stop = () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  )
}
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
