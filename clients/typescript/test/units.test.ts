import { afterEach, describe, expect, it, vi } from 'vitest'
import { Burnrate, fromAnthropic, fromOpenAIChat, fromOpenAIResponses, fromUsage, type BurnrateEvent } from '../src/index.ts'
import { BUFFER_DEFAULTS, bufferSettings } from '../src/buffer.ts'
import { periodBudgetsBody, periodsOf } from '../src/periods.ts'
import { parseRetryAfter, backoffDelay } from '../src/http.ts'
import { randomUuid } from '../src/id.ts'

// The parts of the client that need no server: usage conversion, argument checks, ids,
// Retry-After. The behaviour against a server is in client.test.ts.

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

afterEach(() => {
  vi.unstubAllGlobals()
})

describe('usage helpers: the SDK object goes as it is, the server reads it', () => {
  it('OpenAI Chat Completions and Responses name their API flavor', () => {
    const chat = { prompt_tokens: 1200, completion_tokens: 300, total_tokens: 1500, prompt_tokens_details: { cached_tokens: 1024, audio_tokens: 0 } }
    expect(fromOpenAIChat('gpt-4o', chat)).toEqual({ event_type: 'llm_call', model: 'gpt-4o', provider: 'openai', api_flavor: 'chat', usage: chat })
    const responses = { input_tokens: 5000, input_tokens_details: { cached_tokens: 4096 }, output_tokens: 700, output_tokens_details: { reasoning_tokens: 512 }, total_tokens: 5700 }
    expect(fromOpenAIResponses('o4-mini', responses)).toEqual({ event_type: 'llm_call', model: 'o4-mini', provider: 'openai', api_flavor: 'responses', usage: responses })
  })

  it('Anthropic, with what the old hand-made mapping dropped: 1-hour cache writes, web searches', () => {
    const usage = {
      input_tokens: 100,
      cache_creation_input_tokens: 200,
      cache_read_input_tokens: 700,
      output_tokens: 50,
      cache_creation: { ephemeral_5m_input_tokens: 50, ephemeral_1h_input_tokens: 150 },
      server_tool_use: { web_search_requests: 2 },
    }
    expect(fromAnthropic('claude-sonnet-4-5', usage)).toEqual({ event_type: 'llm_call', model: 'claude-sonnet-4-5', provider: 'anthropic', usage })
  })

  it('any provider the price library knows, with metadata and an event id when given', () => {
    const eventId = '0b0f7a52-9a1c-4c8e-9a54-6f1b1b2f4a10'
    const usage = { promptTokenCount: 10, candidatesTokenCount: 2 }
    expect(fromUsage({ provider: 'google' }, 'gemini-2.5-flash', usage, { metadata: { step: 3 }, eventId })).toEqual({
      event_type: 'llm_call',
      model: 'gemini-2.5-flash',
      provider: 'google',
      usage,
      metadata: { step: 3 },
      event_id: eventId,
    })
  })

  it('take undefined and null usage as the SDKs type it, and refuse it at run time with a clear TypeError', () => {
    expect(() => fromOpenAIChat('gpt-4o', null)).toThrow(/usage object is needed, got null/)
    expect(() => fromOpenAIChat('gpt-4o', undefined)).toThrow(/usage object is needed, got undefined .*streamed/)
    expect(() => fromAnthropic('claude', [] as object)).toThrow(/an array/)
    expect(() => fromAnthropic('', { input_tokens: 1, output_tokens: 0 })).toThrow(/model/)
  })
})

describe('argument checks (programming errors throw; nothing is sent)', () => {
  const refusingFetch = () => {
    const calls: string[] = []
    const fetch = (url: string): Promise<Response> => {
      calls.push(url)
      return Promise.reject(new Error('must not be called'))
    }
    return { fetch, calls }
  }

  it('the constructor throws a TypeError for invalid options', () => {
    const ok = { baseUrl: 'http://127.0.0.1:1', apiKey: 'k', agentId: 'a' }
    expect(() => new Burnrate({ ...ok, baseUrl: 'localhost:8080' })).toThrow(/baseUrl/)
    expect(() => new Burnrate({ ...ok, apiKey: '' })).toThrow(/apiKey/)
    expect(() => new Burnrate({ ...ok, agentId: '' })).toThrow(/agentId/)
    expect(() => new Burnrate({ ...ok, agentId: 'x'.repeat(129) })).toThrow(/agentId/)
    expect(() => new Burnrate({ ...ok, agentId: 'a\nb' })).toThrow(/agentId/)
    expect(() => new Burnrate({ ...ok, costThresholdUsd: -1 })).toThrow(/costThresholdUsd/)
    expect(() => new Burnrate({ ...ok, failMode: 'half' as never })).toThrow(/failMode/)
    expect(() => new Burnrate({ ...ok, maxRetries: 1.5 })).toThrow(/maxRetries/)
    expect(() => new Burnrate({ ...ok, timeoutMs: 0 })).toThrow(/timeoutMs/)
    const c = new Burnrate({ ...ok, baseUrl: 'https://burnrate.example.com/prefix/' })
    expect(c.agentId).toBe('a')
    expect(c.paused).toBe(false)
    expect(c.lastResponse).toBeUndefined()
    expect(c.pendingEvents).toBe(0)
  })

  it('the buffer option: off by default, true for the defaults, each bound checked', () => {
    const ok = { baseUrl: 'http://127.0.0.1:1', apiKey: 'k', agentId: 'a' }
    expect(bufferSettings(undefined)).toBeNull()
    expect(bufferSettings(false)).toBeNull()
    expect(bufferSettings(true)).toEqual({ maxEvents: 100, maxAgeMs: 1000, maxQueued: 10_000 })
    expect(bufferSettings({})).toEqual(BUFFER_DEFAULTS)
    expect(bufferSettings({ maxEvents: 20, maxAgeMs: 50 })).toEqual({ maxEvents: 20, maxAgeMs: 50, maxQueued: 10_000 })
    // Either default follows the other one given.
    expect(bufferSettings({ maxQueued: 5 })).toEqual({ maxEvents: 5, maxAgeMs: 1000, maxQueued: 5 })
    expect(bufferSettings({ maxEvents: 20_000 })).toEqual({ maxEvents: 20_000, maxAgeMs: 1000, maxQueued: 20_000 })
    const bad: Array<[unknown, RegExp]> = [
      [{ maxEvents: 0 }, /maxEvents must be a positive integer/],
      [{ maxEvents: 1.5 }, /maxEvents/],
      [{ maxQueued: -1 }, /maxQueued/],
      [{ maxEvents: 11, maxQueued: 10 }, /must not exceed buffer.maxQueued/],
      [{ maxAgeMs: 0 }, /maxAgeMs/],
      [{ maxAgeMs: Infinity }, /maxAgeMs/],
      [{ maxAge: 10 }, /unknown buffer option "maxAge"/],
      ['yes', /buffer must be/],
      [null, /buffer must be/],
    ]
    for (const [buffer, message] of bad) expect(() => new Burnrate({ ...ok, buffer: buffer as never })).toThrow(message)
  })

  it('the periodBudgets option: camelCase in, the wire fields of POST /config out, what the server would refuse thrown', () => {
    const ok = { baseUrl: 'http://127.0.0.1:1', apiKey: 'k', agentId: 'a' }
    expect(periodBudgetsBody([])).toEqual([])
    expect(
      periodBudgetsBody([
        { period: 'month', limitUsd: 200, timeZone: 'America/New_York', monthStartsOn: 28 },
        { period: 'week', limitUsd: 60, weekStarts: 'sunday' },
        { period: 'day', limitUsd: 10 },
        { windowDays: 30, limitUsd: 250 },
      ]),
    ).toEqual([
      { period: 'month', limit_usd: 200, time_zone: 'America/New_York', month_starts_on: 28 },
      { period: 'week', limit_usd: 60, week_starts: 'sunday' },
      { period: 'day', limit_usd: 10 },
      { window_days: 30, limit_usd: 250 },
    ])
    const bad: Array<[unknown, RegExp]> = [
      [{ period: 'month', limitUsd: 1 }, /periodBudgets must be an array/],
      [[1, 2, 3, 4, 5].map((d) => ({ windowDays: d, limitUsd: 1 })), /at most 4/],
      [[{ period: 'year', limitUsd: 1 }], /periodBudgets\[0\]\.period must be "day", "week" or "month"/],
      [[{ period: 'month', limitUsd: 0 }], /limitUsd must be a number above 0/],
      [[{ period: 'month', limitUsd: 2e9 }], /limitUsd/],
      [[{ period: 'month' }], /limitUsd/],
      [[{ period: 'month', limitUsd: 1, timeZone: '' }], /timeZone/],
      [[{ period: 'week', limitUsd: 1, weekStarts: 'saturday' }], /weekStarts/],
      [[{ period: 'month', limitUsd: 1, monthStartsOn: 29 }], /monthStartsOn/],
      [[{ windowDays: 0, limitUsd: 1 }], /windowDays must be an integer from 1 to 31/],
      [[{ windowDays: 1.5, limitUsd: 1 }], /windowDays/],
      [[{ windowDays: 7, limitUsd: 1, timeZone: 'UTC' }], /unknown field "timeZone" in periodBudgets\[0\] \(a rolling window\)/],
      [[{ period: 'day', limit_usd: 1 }], /unknown field "limit_usd"/],
      [[{ period: 'day', limitUsd: 1 }, { period: 'day', limitUsd: 2 }], /periodBudgets\[1\] repeats the period "day"/],
      [[{ windowDays: 7, limitUsd: 1 }, { windowDays: 7, limitUsd: 2 }], /repeats the period "window_7d"/],
      [[null], /periodBudgets\[0\] must be/],
    ]
    for (const [periodBudgets, message] of bad) expect(() => new Burnrate({ ...ok, periodBudgets: periodBudgets as never })).toThrow(message)
  })

  it("an answer's periods come out with dates; an answer without them has none", () => {
    const month = { period: 'month', spent_usd: 1.5, limit_usd: 2, remaining_usd: 0.5, starts_at: '2026-11-01T04:00:00.000Z', ends_at: '2026-12-01T05:00:00.000Z', projected_exhaustion_at: null }
    const window = { period: 'window_30d', spent_usd: 3, limit_usd: 2, remaining_usd: -1, starts_at: '2026-10-02T13:00:00.000Z', ends_at: null, projected_exhaustion_at: '2026-11-02T12:30:00.000Z' }
    expect(periodsOf([month, window])).toEqual([
      { period: 'month', spentUsd: 1.5, limitUsd: 2, remainingUsd: 0.5, startsAt: new Date('2026-11-01T04:00:00.000Z'), endsAt: new Date('2026-12-01T05:00:00.000Z'), projectedExhaustionAt: null },
      { period: 'window_30d', spentUsd: 3, limitUsd: 2, remainingUsd: -1, startsAt: new Date('2026-10-02T13:00:00.000Z'), endsAt: null, projectedExhaustionAt: new Date('2026-11-02T12:30:00.000Z') },
    ])
    expect(periodsOf(undefined)).toEqual([])
  })

  it('a buffered call rejects with a TypeError for an invalid event, and queues nothing', async () => {
    const { fetch, calls } = refusingFetch()
    const c = new Burnrate({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', agentId: 'a', fetch, buffer: { maxAgeMs: 600_000 } })
    await expect(c.toolCall('')).rejects.toThrow(/tool_name/)
    await expect(c.send({ event_type: 'tool_call' })).rejects.toThrow(/tool_name is required/)
    await expect(c.llmCall('m', { inputTokens: 1.5, outputTokens: 0 }, { buffered: true })).rejects.toThrow(/inputTokens/)
    await expect(c.start(undefined, { eventId: 'nope' })).rejects.toThrow(/event_id must be a UUID/)
    await expect(c.end({ big: 'x'.repeat(17 * 1024) })).rejects.toThrow(/at most 16384 bytes/)
    expect(c.pendingEvents).toBe(0)
    expect(await c.toolCall('search')).toBe(true)
    expect(c.pendingEvents).toBe(1)
    expect(calls).toEqual([])
  })

  it('send() rejects with a TypeError for an event the server would refuse, before any request', async () => {
    const { fetch, calls } = refusingFetch()
    const c = new Burnrate({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', agentId: 'a', fetch, costThresholdUsd: 1 })
    const bad: Array<[unknown, RegExp]> = [
      [null, /an event must be an object/],
      [{ event_type: 'llm' }, /event_type must be one of/],
      [{ event_type: 'llm_call' }, /model is required/],
      [{ event_type: 'tool_call' }, /tool_name is required/],
      [{ event_type: 'tool_call', tool_name: null }, /tool_name is required/],
      [{ event_type: 'agent_start', agent_id: 'b' }, /no agent_id/],
      [{ event_type: 'agent_start', tokens: 3 }, /unknown event field "tokens"/],
      [{ event_type: 'llm_call', model: 'm', input_tokens: -1 }, /input_tokens/],
      [{ event_type: 'llm_call', model: 'm', output_tokens: 2e9 }, /output_tokens/],
      [{ event_type: 'llm_call', model: 'm', input_tokens: 10, cache_read_tokens: 8, cache_write_tokens: 3 }, /must not exceed it/],
      [{ event_type: 'agent_start', metadata: [1, 2] }, /metadata must be a plain object/],
      [{ event_type: 'agent_start', metadata: { big: 'x'.repeat(17 * 1024) } }, /at most 16384 bytes/],
      [{ event_type: 'agent_start', event_id: 'not-a-uuid' }, /event_id must be a UUID/],
    ]
    for (const [event, message] of bad) {
      await expect(c.send(event as BurnrateEvent)).rejects.toThrow(message)
    }
    await expect(c.llmCall('m', { inputTokens: 1.5, outputTokens: 0 })).rejects.toThrow(/inputTokens/)
    await expect(c.toolCall('')).rejects.toThrow(/tool_name/)
    await expect(c.fromAnthropic('m', null as never)).rejects.toThrow(TypeError)
    expect(calls).toEqual([])
  })

  it('hold_id goes with llm_call events only, and only as a UUID', async () => {
    const { fetch, calls } = refusingFetch()
    const c = new Burnrate({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', agentId: 'a', fetch })
    const holdId = '0b0f7a52-9a1c-4c8e-9a54-6f1b1b2f4a10'
    await expect(c.send({ event_type: 'tool_call', tool_name: 'search', hold_id: holdId })).rejects.toThrow(/hold_id is for llm_call events only/)
    await expect(c.send({ event_type: 'llm_call', model: 'm', input_tokens: 1, output_tokens: 1, hold_id: 'hold-1' })).rejects.toThrow(/hold_id must be a UUID/)
    expect(calls).toEqual([])
 
    // Lower-cased like event_id: the id burnrate answered, whatever the caller's case.
    const bodies: unknown[] = []
    const recordingFetch = (_url: string, init: RequestInit): Promise<Response> => {
      bodies.push(JSON.parse(String(init.body)))
      return Promise.reject(new Error('offline'))
    }
    const recording = new Burnrate({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', agentId: 'a', maxRetries: 0, onError: () => {}, fetch: recordingFetch })
    expect(await recording.send({ event_type: 'llm_call', model: 'm', input_tokens: 1, output_tokens: 1, hold_id: holdId.toUpperCase() })).toBe(true)
    expect(bodies).toEqual([expect.objectContaining({ hold_id: holdId })])
  })

  it('guard() rejects with a TypeError for a call the server would refuse, before any request and without running fn', async () => {
    const { fetch, calls } = refusingFetch()
    const c = new Burnrate({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', agentId: 'a', fetch, costThresholdUsd: 1 })
    const ok = { model: 'gpt-4o', inputTokens: 1000, maxOutputTokens: 1000 }
    const fn = vi.fn()
    const bad: Array<[unknown, RegExp]> = [
      [null, /guard needs \{ model, inputTokens, maxOutputTokens, ttlSeconds\? \}/],
      [{ ...ok, model: '' }, /model/],
      [{ ...ok, model: 'm'.repeat(257) }, /model/],
      [{ ...ok, model: undefined }, /model/],
      [{ ...ok, inputTokens: -1 }, /inputTokens/],
      [{ ...ok, inputTokens: 1.5 }, /inputTokens/],
      [{ ...ok, maxOutputTokens: '1000' }, /maxOutputTokens/],
      [{ ...ok, maxOutputTokens: 2e9 }, /maxOutputTokens/],
      [{ ...ok, ttlSeconds: 0 }, /ttlSeconds must be an integer from 1 to 3600/],
      [{ ...ok, ttlSeconds: 3601 }, /ttlSeconds/],
      [{ ...ok, ttlSeconds: 2.5 }, /ttlSeconds/],
      [{ ...ok, max_output_tokens: 10 }, /unknown guard field "max_output_tokens"/],
    ]
    for (const [call, message] of bad) {
      await expect(c.guard(call as never, fn)).rejects.toThrow(message)
    }
    await expect(c.guard(ok, 'not a function' as never)).rejects.toThrow(/guard needs the function/)
    for (const [call] of bad) await expect(c.guard(call as never, fn)).rejects.toBeInstanceOf(TypeError)
    expect(fn).not.toHaveBeenCalled()
    expect(calls).toEqual([])
  })
})

describe('event ids', () => {
  it('are random version-4 UUIDs from crypto.randomUUID', () => {
    const ids = new Set(Array.from({ length: 1000 }, () => randomUuid()))
    expect(ids.size).toBe(1000)
    for (const id of ids) expect(id).toMatch(UUID_V4)
  })

  it('fall back to crypto.getRandomValues, then Math.random, where randomUUID is missing', () => {
    const real = globalThis.crypto
    const getRandomValues = vi.fn(<T extends Uint8Array>(a: T): T => real.getRandomValues(a))
    vi.stubGlobal('crypto', { getRandomValues })
    const a = randomUuid()
    expect(a).toMatch(UUID_V4)
    expect(getRandomValues).toHaveBeenCalledTimes(1)

    vi.stubGlobal('crypto', undefined)
    const ids = new Set(Array.from({ length: 1000 }, () => randomUuid()))
    expect(ids.size).toBe(1000)
    for (const id of ids) expect(id).toMatch(UUID_V4)
  })
})

describe('retry timing', () => {
  it('Retry-After is read as delay-seconds or an HTTP-date', () => {
    const now = Date.parse('2025-01-01T00:00:00Z')
    expect(parseRetryAfter('3', now)).toBe(3000)
    expect(parseRetryAfter(' 0 ', now)).toBe(0)
    expect(parseRetryAfter('Wed, 01 Jan 2025 00:00:05 GMT', now)).toBe(5000)
    expect(parseRetryAfter('Tue, 31 Dec 2024 23:59:00 GMT', now)).toBe(0)
    expect(parseRetryAfter('soon', now)).toBeUndefined()
    expect(parseRetryAfter(null, now)).toBeUndefined()
  })

  it('backoff grows exponentially with jitter and is capped', () => {
    const policy = { baseDelayMs: 100, maxDelayMs: 1000 }
    for (let i = 0; i < 200; i++) {
      const d0 = backoffDelay(0, policy)
      const d2 = backoffDelay(2, policy)
      const d9 = backoffDelay(9, policy)
      expect(d0).toBeGreaterThanOrEqual(50)
      expect(d0).toBeLessThanOrEqual(100)
      expect(d2).toBeGreaterThanOrEqual(200)
      expect(d2).toBeLessThanOrEqual(400)
      expect(d9).toBeGreaterThanOrEqual(500)
      expect(d9).toBeLessThanOrEqual(1000)
    }
  })
})
