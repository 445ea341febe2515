import { createRequire } from 'node:module'
import type { FastifyRequest } from 'fastify'
import type { FastifyRateLimitStore, RateLimitOptions } from '@fastify/rate-limit'
import type { Config } from '../config.ts'
import { Problem } from '../errors.ts'

// The plugin's own in-memory store, one per route by design. burnrate limits groups of
// routes (all reads together), so every route shares one store; the group is in the key.
const LocalStore = createRequire(import.meta.url)('@fastify/rate-limit/store/LocalStore.js') as new (
  continueExceeding: boolean,
  exponentialBackoff: boolean,
  cache: number,
) => FastifyRateLimitStore

export class GroupedLocalStore implements FastifyRateLimitStore {
  readonly #inner = new LocalStore(false, false, 100_000)
  incr(...args: Parameters<FastifyRateLimitStore['incr']>): void {
    this.#inner.incr(...args)
  }
  child(): FastifyRateLimitStore {
    return this
  }
}

export interface RouteLimits {
  events: RateLimitOptions
  reads: RateLimitOptions
  config: RateLimitOptions
}

/**
 * Per-key limits, counted per route group: POST /events (120 requests per minute by default;
 * a key can carry its own), all reads together, both config routes together. Auth runs
 * first, so the key id is known here.
 */
export function routeLimits(config: Config): RouteLimits {
  const limit = (group: string, max: (req: FastifyRequest) => number): RateLimitOptions => ({
    max: (req) => max(req),
    timeWindow: 60_000,
    keyGenerator: (req) => `${group}:${req.principal?.keyId ?? req.ip}`,
    errorResponseBuilder: (_req, ctx) =>
      new Problem('rate_limited', `at most ${ctx.max} requests per minute for this API key; retry after ${Math.ceil(ctx.ttl / 1000)} s`, {
        retryAfter: Math.ceil(ctx.ttl / 1000),
      }),
  })
  return {
    events: limit('events', (req) => req.principal?.rateLimit ?? config.rateLimits.events),
    reads: limit('reads', () => config.rateLimits.reads),
    config: limit('config', () => config.rateLimits.config),
  }
}
