import { createRequire } from 'node:module'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { FastifyRateLimitStore, RateLimitOptions } from '@fastify/rate-limit'
import type { Config } from '../config.ts'
import { Problem } from '../errors.ts'
import type { RateCharge, RateState } from '../hot-state/types.ts'

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
  /** A request's charge against its key's budget of events, counted by the hot state in the step that does what it asks. */
  eventsCharge(req: FastifyRequest): RateCharge
  reads: RateLimitOptions
  config: RateLimitOptions
}

/** Where @fastify/rate-limit keeps its counts in Redis: `<prefix><route>-<group>:<key id>`. */
export const ROUTE_LIMITS_PREFIX = 'burnrate:rl:'

/** Every budget is per minute. */
const WINDOW_MS = 60_000

/**
 * Per-key limits, counted per route group: the events routes (POST /events, each event of
 * POST /events/batch, POST and DELETE /holds: 120 a minute by default; a key can carry its
 * own), all reads together, the config routes together. The events budget is counted by the
 * hot state in the same step as the event (one call to Redis per request, not two); the
 * others by @fastify/rate-limit. Both answer the same way: the x-ratelimit-* headers, and a
 * 429 with Retry-After past the budget. Auth runs first, so the key id is known here.
 */
export function routeLimits(config: Config): RouteLimits {
  const limit = (group: string, max: (req: FastifyRequest) => number): RateLimitOptions => ({
    max: (req) => max(req),
    timeWindow: WINDOW_MS,
    keyGenerator: (req) => `${group}:${req.principal?.keyId ?? req.ip}`,
    errorResponseBuilder: (_req, ctx) => rateLimitedProblem(ctx.max, ctx.ttl),
  })
  return {
    eventsCharge: (req) => ({ key: eventsBudget(req.principal?.keyId ?? req.ip), max: req.principal?.rateLimit ?? config.rateLimits.events, windowMs: WINDOW_MS }),
    reads: limit('reads', () => config.rateLimits.reads),
    config: limit('config', () => config.rateLimits.config),
  }
}

/** The name of a key's budget of events (a RateCharge key): an erasure forgets its user's. */
export function eventsBudget(keyId: string): string {
  return `events:${keyId}`
}

/** The 429 of a budget spent, `ttlMs` before its window ends. */
export function rateLimitedProblem(max: number, ttlMs: number): Problem {
  const seconds = Math.ceil(ttlMs / 1000)
  return new Problem('rate_limited', `at most ${max} requests per minute for this API key; retry after ${seconds} s`, { retryAfter: seconds })
}

/** The headers @fastify/rate-limit sends, for a budget the hot state counted: what it allows, what is left, when it starts again (s). */
export function rateHeaders(reply: FastifyReply, rate: RateState | null): void {
  if (!rate) return
  reply.header('x-ratelimit-limit', rate.max)
  reply.header('x-ratelimit-remaining', Math.max(0, rate.max - rate.current))
  reply.header('x-ratelimit-reset', Math.ceil(rate.ttlMs / 1000))
}
