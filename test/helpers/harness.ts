import { mkdtempSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { pino } from 'pino'
import { afterAll, beforeAll } from 'vitest'
import { buildApp } from '../../src/app.ts'
import type { Clock } from '../../src/clock.ts'
import { loadConfig } from '../../src/config.ts'
import { openServices, type Services } from '../../src/server.ts'
import { startReceiver, type Receiver } from './receiver.ts'

export interface Harness {
  app: FastifyInstance
  services: Services
  dataDir: string
  /** A new API key for `user` (each test uses its own users, so tests of one file share the engine). */
  key(user: string, opts?: { rateLimit?: number }): Promise<string>
  post(path: string, body: unknown, key: string | null): Promise<LightMyRequestResponse>
  get(path: string, key: string | null): Promise<LightMyRequestResponse>
  /** Ships the journal to ClickHouse now, for reads of event lists, breakdowns and hourly buckets. */
  flush(): Promise<void>
  /** Serves the app on a free port of 127.0.0.1, for clients that need real HTTP; resolves to its URL (http://127.0.0.1:<port>). */
  listen(): Promise<string>
  close(): Promise<void>
}

let seq = 0

/** A unique name, so tests sharing one engine never see each other's users or agents. */
export function unique(prefix: string): string {
  return `${prefix}-${process.pid}-${++seq}-${Math.random().toString(36).slice(2, 8)}`
}

/**
 * The real service in process: chDB on a fresh data directory, the in-process hot state,
 * the real routes. chDB allows one data path per process, and vitest runs each test file in
 * its own process: open one harness per file (beforeAll) and isolate tests by user.
 */
export async function startHarness(opts: { clock?: Clock; env?: Record<string, string>; dataDir?: string } = {}): Promise<Harness> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'burnrate-test-'))
  const config = loadConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', WEBHOOK_ALLOW_PRIVATE: 'true', BATCH_MAX_WAIT_MS: '1', ...opts.env })
  const log = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' })
  const services = await openServices(config, { clock: opts.clock, log })
  const app = await buildApp({ ...services, log })
  await app.ready()
  const headers = (key: string | null) => (key === null ? {} : { 'x-api-key': key })
  const flush = async () => {
    if (services.shipper && !(await services.shipper.flush(10_000))) throw new Error('the journal did not ship within 10 s')
  }
  return {
    app,
    services,
    dataDir,
    async key(user, o = {}) {
      return (await services.keys.create(user, { rateLimit: o.rateLimit ?? 1_000_000 })).key
    },
    post: (url, body, key) =>
      app.inject({ method: 'POST', url, headers: { ...headers(key), 'content-type': 'application/json' }, payload: JSON.stringify(body) }),
    // Reads see every acknowledged event: the journal is shipped first (the lag of event
    // lists behind POST /events is the journal's and the shipper's own tests' subject).
    get: async (url, key) => {
      await flush()
      return app.inject({ method: 'GET', url, headers: headers(key) })
    },
    flush,
    async listen() {
      await app.listen({ port: 0, host: '127.0.0.1' })
      return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
    },
    async close() {
      await app.close()
      await services.close()
    },
  }
}

/**
 * One harness and one chat-webhook receiver for a test file, started before its tests and
 * closed after them: read `h` and `receiver` inside the tests.
 */
export function harnessAndReceiver(opts: Parameters<typeof startHarness>[0]): { readonly h: Harness; readonly receiver: Receiver } {
  const started = {} as { h: Harness; receiver: Receiver }
  beforeAll(async () => {
    started.receiver = await startReceiver()
    started.h = await startHarness(opts)
  })
  afterAll(async () => {
    await started.h?.close()
    await started.receiver?.close()
  })
  return started
}

/**
 * Two burnrate instances on one shared store (`env`: REDIS_URL or REDIS_CLUSTER_NODES) and
 * one ClickHouse, as behind a load balancer, and a chat-webhook receiver. chDB lets one
 * process open a data path, so both run in this process on one engine (separate apps, Redis
 * clients, shippers and caches).
 */
export async function startTwoInstances(env: Record<string, string>): Promise<{ a: Harness; b: Harness; receiver: Receiver; close(): Promise<void> }> {
  const a = await startHarness({ env })
  const b = await startHarness({ env, dataDir: a.dataDir })
  const receiver = await startReceiver()
  return {
    a,
    b,
    receiver,
    async close() {
      await b.close()
      await a.close()
      await receiver.close()
    },
  }
}

/** Takes the events table away for real while `fn` runs, so ClickHouse refuses the shipper's INSERTs. */
export async function withEventsTableGone<T>(h: Harness, fn: () => Promise<T>): Promise<T> {
  await h.services.clickhouse.command({ query: 'RENAME TABLE events TO events_offline' })
  try {
    return await fn()
  } finally {
    await h.services.clickhouse.command({ query: 'RENAME TABLE events_offline TO events' })
  }
}

/** Polls `check` until it returns a value other than undefined, or fails after `ms`. */
export async function eventually<T>(check: () => T | undefined | Promise<T | undefined>, ms = 5000): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

export function llmCall(agentId: string, extra: Record<string, unknown> = {}) {
  return { agent_id: agentId, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, ...extra }
}

/** gpt-4o at 2.5 / 10 USD per 1M tokens: 1000 in + 500 out = 0.0075 USD. */
export const LLM_CALL_USD = 0.0075
