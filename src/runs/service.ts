import type { ClickHouseClient } from '@clickhouse/client'
import type { Clock } from '../clock.ts'
import { Problem } from '../errors.ts'
import type { HotState } from '../hot-state/types.ts'
import { nanoToUsd } from '../money.ts'
import { encodeRunCursor } from '../schemas/runs.ts'
import { agentHasEvents, runEvents } from '../storage/events.ts'
import { agentRuns, runParts, type ModelSpend, type RunPart, type RunPosition } from '../storage/runs.ts'
import { runStopTimes } from '../storage/run-stops.ts'
import { formatEvent } from '../agents/service.ts'

export interface RunServiceDeps {
  clickhouse: ClickHouseClient
  hotState: HotState
  clock: Clock
  /** A run with no agent_end whose last event is older than this is abandoned (RUN_ABANDONED_AFTER). */
  abandonedAfterMs: number
}

export type RunStatus = 'open' | 'ended' | 'abandoned'

/** A run's figures, of one agent's part or of every part together. Times in epoch microseconds. */
interface Figures {
  firstUs: number
  lastUs: number
  startUs: number | null
  endUs: number | null
  costNano: number
  events: number
  llmCalls: number
  toolCalls: number
  byModel: ModelSpend[]
  /** When its agent's run budget stopped it (epoch ms), null when it did not. */
  stoppedMs: number | null
}

/**
 * GET /agents/{id}/runs and GET /runs/{id}, scoped to one user. Read from the runs view
 * (sql/0020) and, for a run's events, from the events of its agents within its span: both
 * may lag an acknowledged event by the shipper's interval plus one INSERT, as event lists do.
 */
export class RunService {
  readonly #d: RunServiceDeps

  constructor(deps: RunServiceDeps) {
    this.#d = deps
  }

  /** One agent's runs, newest start first, a page of `limit` and the cursor of the next (null on the last). */
  async list(userId: string, agentId: string, q: { limit: number; cursor?: RunPosition | undefined }) {
    // One more than the page: whether a next page exists, without a count.
    const rows = await agentRuns(this.#d.clickhouse, { userId, agentId, limit: q.limit + 1, after: q.cursor })
    if (rows.length === 0) await this.#agentMustExist(userId, agentId)
    const page = rows.slice(0, q.limit)
    const last = page.at(-1)
    const now = this.#d.clock.now()
    const stops = await runStopTimes(this.#d.clickhouse, userId, page.map((p) => p.run_id))
    return {
      agent_id: agentId,
      runs: page.map((p) => ({ run_id: p.run_id, agent_id: p.agent_id, ...this.#shown(figuresOf(p, stops), now) })),
      next_cursor: rows.length > q.limit && last ? encodeRunCursor({ startedUs: startedUs(figuresOf(last, stops)), runId: last.run_id }) : null,
    }
  }

  /**
   * One run of the user: its figures over every agent that sent events with its id (as if one
   * agent had sent them all), each agent's part, its cost by model, and a page of its events,
   * newest first. 404 when none of the user's events names it.
   */
  async show(userId: string, runId: string, page: { limit: number; before?: string | undefined }) {
    const parts = await runParts(this.#d.clickhouse, userId, runId)
    if (parts.length === 0) throw new Problem('run_not_found', `no run ${JSON.stringify(runId)} for this API key's user`)
    const stops = await runStopTimes(this.#d.clickhouse, userId, [runId])
    const whole = fold(parts.map((p) => figuresOf(p, stops)))
    const events = await runEvents(this.#d.clickhouse, {
      userId,
      runId,
      agentIds: parts.map((p) => p.agent_id),
      fromUs: whole.firstUs,
      untilUs: whole.lastUs,
      before: page.before,
      limit: page.limit,
    })
    const now = this.#d.clock.now()
    const last = events.at(-1)
    return {
      run_id: runId,
      agent_ids: parts.map((p) => p.agent_id),
      ...this.#shown(whole, now),
      by_agent: parts.map((p) => ({ agent_id: p.agent_id, ...this.#shown(figuresOf(p, stops), now) })),
      cost_by_model: [...whole.byModel]
        .sort((a, b) => b.cost_nano - a.cost_nano || byCodeUnits(a.model, b.model))
        .map((m) => ({ model: m.model, cost_usd: nanoToUsd(m.cost_nano), llm_calls: m.llm_calls, input_tokens: m.input_tokens, output_tokens: m.output_tokens })),
      events: events.map(formatEvent),
      // The next page: pass it as ?before= (null when this page was the last).
      next_before: events.length === page.limit && last ? last.timestamp : null,
    }
  }

  /** A run's figures as the API shows them, its status as of `now`. */
  #shown(f: Figures, now: number) {
    const status: RunStatus = f.endUs !== null ? 'ended' : now - f.lastUs / 1000 > this.#d.abandonedAfterMs ? 'abandoned' : 'open'
    const started = startedUs(f)
    return {
      started_at: isoOfMicros(started),
      ended_at: f.endUs === null ? null : isoOfMicros(f.endUs),
      last_event_at: isoOfMicros(f.lastUs),
      status,
      // To its end, or to its last event while it has none; never negative (an agent_end may
      // arrive before the agent_start it closes, whose time is the run's start).
      duration_ms: Math.max(0, Math.round(((f.endUs ?? f.lastUs) - started) / 1000)),
      cost_usd: nanoToUsd(f.costNano),
      llm_calls: f.llmCalls,
      tool_calls: f.toolCalls,
      // `events` is the list of a run's events in GET /runs/{id}, as in GET /agents/{id}.
      event_count: f.events,
      models: f.byModel.map((m) => m.model).sort(byCodeUnits),
      budget_stopped_at: f.stoppedMs === null ? null : new Date(f.stoppedMs).toISOString(),
    }
  }

  /** 404 for an agent with no events and no config, as GET /agents/{id} answers. */
  async #agentMustExist(userId: string, agentId: string): Promise<void> {
    if (await agentHasEvents(this.#d.clickhouse, userId, agentId)) return
    const { snapshot } = await this.#d.hotState.get({ userId, agentId }, this.#d.clock.now())
    if (snapshot.configured || snapshot.active || snapshot.heldNano > 0) return
    throw new Problem('agent_not_found', `no agent ${JSON.stringify(agentId)} for this API key's user`)
  }
}

/** A part's figures; `stops`: runStopTimes() of its run. */
function figuresOf(p: RunPart, stops: ReadonlyMap<string, number>): Figures {
  return {
    stoppedMs: stops.get(`${p.agent_id}\0${p.run_id}`) ?? null,
    firstUs: p.first_us,
    lastUs: p.last_us,
    startUs: p.start_us,
    endUs: p.end_us,
    costNano: p.cost_nano,
    events: p.events,
    llmCalls: p.llm_calls,
    toolCalls: p.tool_calls,
    byModel: p.byModel,
  }
}

/** Several agents' parts of one run as one: its first start, its latest end, its last event, the sums. */
function fold(parts: readonly Figures[]): Figures {
  const starts = parts.flatMap((p) => (p.startUs === null ? [] : [p.startUs]))
  const ends = parts.flatMap((p) => (p.endUs === null ? [] : [p.endUs]))
  const stops = parts.flatMap((p) => (p.stoppedMs === null ? [] : [p.stoppedMs]))
  const models = new Map<string, ModelSpend>()
  for (const m of parts.flatMap((p) => p.byModel)) {
    const sum = models.get(m.model)
    models.set(
      m.model,
      sum
        ? { model: m.model, cost_nano: sum.cost_nano + m.cost_nano, llm_calls: sum.llm_calls + m.llm_calls, input_tokens: sum.input_tokens + m.input_tokens, output_tokens: sum.output_tokens + m.output_tokens }
        : m,
    )
  }
  return {
    firstUs: Math.min(...parts.map((p) => p.firstUs)),
    lastUs: Math.max(...parts.map((p) => p.lastUs)),
    startUs: starts.length > 0 ? Math.min(...starts) : null,
    endUs: ends.length > 0 ? Math.max(...ends) : null,
    costNano: parts.reduce((s, p) => s + p.costNano, 0),
    events: parts.reduce((s, p) => s + p.events, 0),
    llmCalls: parts.reduce((s, p) => s + p.llmCalls, 0),
    toolCalls: parts.reduce((s, p) => s + p.toolCalls, 0),
    byModel: [...models.values()],
    stoppedMs: stops.length > 0 ? Math.min(...stops) : null,
  }
}

/** Its agent_start's time, else its first event's. */
function startedUs(f: Figures): number {
  return f.startUs ?? f.firstUs
}

/** ISO 8601 UTC with the microseconds the events' timestamps carry ("…T12:00:00.123456Z"). */
function isoOfMicros(us: number): string {
  const ms = Math.floor(us / 1000)
  return `${new Date(ms).toISOString().slice(0, -1)}${String(us - ms * 1000).padStart(3, '0')}Z`
}

function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}
