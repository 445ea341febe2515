import type { FastifyRequest } from 'fastify'
import type { RateLimitOptions } from '@fastify/rate-limit'
import type { Config } from '../config.ts'
import { Problem } from '../errors.ts'

export interface RouteLimits {
  events: RateLimitOptions
  reads: RateLimitOptions
  config: RateLimitOptions
}

/**
 * Per-key limits, counted per route group (POST /events 120/min by default, SPEC.md 8;
 * a key can carry its own events limit). Auth runs first, so the key id is known here.
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
