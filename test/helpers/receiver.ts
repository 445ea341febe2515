import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

/** A real local chat-webhook receiver: records every message it is sent. */
export interface Receiver {
  url: string
  messages: Array<{ text: string; [k: string]: unknown }>
  close(): Promise<void>
}

export async function startReceiver(status = 200): Promise<Receiver> {
  const messages: Receiver['messages'] = []
  const server: Server = createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (c: string) => (body += c))
    req.on('end', () => {
      messages.push(JSON.parse(body))
      res.writeHead(status).end('ok')
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/services/T000/B000/XXXXXXXXXXXXXXXX`,
    messages,
    close: () => new Promise((r) => server.close(() => r())),
  }
}
