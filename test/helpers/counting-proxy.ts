import { createServer, request, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * An HTTP proxy in front of a ClickHouse server that keeps the text of every query sent
 * through it (the URL's `query` parameter and the body), so that a test can count the reads
 * a piece of code makes against the real engine.
 */
export async function startCountingProxy(target: string): Promise<{ url: string; queries: string[]; close(): Promise<void> }> {
  const queries: string[] = []
  const to = new URL(target)
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      const url = new URL(req.url ?? '/', target)
      queries.push(`${url.searchParams.get('query') ?? ''}\n${body.toString('utf8')}`)
      const upstream = request({ host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers)
        up.pipe(res)
      })
      upstream.on('error', () => res.writeHead(502).end())
      upstream.end(body)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    queries,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}
