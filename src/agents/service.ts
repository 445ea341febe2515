import type { ClickHouseClient } from '@clickhouse/client'
import { isoOrNull, type Clock } from '../clock.ts'
import { Problem } from '../errors.ts'
import { budgetMeter, metersOf, periodKey, resolveMeters, type PeriodBudget, type ResolvedMeter } from '../hot-state/meters.ts'
import type { PeriodHistory } from '../hot-state/period-tallies.ts'
import { holdingPause, ignoring, levelsReached, pausedPeriodOf, pausedReasonOf } from '../hot-state/policy.ts'
import { fleetOf, isFleet, type AgentRef } from '../hot-state/agent-ref.ts'
import { DEFAULT_POLICY, agentBudget, type AgentPolicy } from '../hot-state/meters.ts'
import { RUNNING, type HotState, type Ignored, type ListedAgent, type PauseState, type PeriodSpend, type Transition } from '../hot-state/types.ts'
import { periodName } from '../periods.ts'
import { nanoToUsd, usdToNano } from '../money.ts'
import { checkWebhookUrl } from '../notify/webhook.ts'
import type { ConfigBody, PolicyBody } from '../schemas/config.ts'
import { encodeAgentCursor, type AgentSort, type AgentsQuery } from '../schemas/query.ts'
import { auditRecords, type AuditCursor, type AuditScope } from '../storage/audit.ts'
import { formatConfig } from '../storage/configs.ts'
import { agentEvents, agentHasEvents, costByModel, hourlyCost, recentEvents, spendByQuarter, type StoredEvent } from '../storage/events.ts'
import { MINUTE_MS, minuteOf, windowStartMs } from '../rolling-day.ts'

const HOUR_MS = 3_600_000
const RECENT_LOOKBACKS_MS = [HOUR_MS, 24 * HOUR_MS, 30 * 24 * HOUR_MS, Infinity]

export interface AgentServiceDeps {
  clickhouse: ClickHouseClient
  hotState: HotState
  clock: Clock
  allowPrivateWebhooks: boolean
  /** Told each change of pause state a request made, a read's too (a metric; a period budget's pause ending by itself is announced). */
  onTransition?: (t: Transition) => void
}

/** Configuration, manual pause and the read API, all scoped to one user. */
export class AgentService {
  readonly #d: AgentServiceDeps

  constructor(deps: AgentServiceDeps) {
    this.#d = deps
  }

  /** POST /config: an upsert keyed on (user, agent). Omitted fields keep their value. `actor`: the request's key id (audit log). */
  async upsertConfig(userId: string, body: ConfigBody, actor: string): Promise<void> {
    await this.#setPolicy({ userId, agentId: body.agent_id }, body, actor, body.run_budget_usd)
  }

  /** POST /config/fleet: the budget of all of the user's agents together, as POST /config sets an agent's. */
  async upsertFleetConfig(userId: string, body: PolicyBody, actor: string): Promise<void> {
    await this.#setPolicy(fleetOf(userId), body, actor)
  }

  /** `runBudgetUsd`: an agent's run budget as POST /config gave it (undefined: kept as it is). */
  async #setPolicy(ref: AgentRef, body: PolicyBody, actor: string, runBudgetUsd?: number | null): Promise<void> {
    const { hotState, clock } = this.#d
    const state = await hotState.get(ref, clock.now())
    const current = state.snapshot.configured ? state.snapshot.policy : null
    const webhookUrl = body.slack_webhook_url !== undefined ? body.slack_webhook_url : (current?.webhookUrl ?? null)
    if (webhookUrl !== null && body.slack_webhook_url !== undefined) {
      const problem = checkWebhookUrl(webhookUrl, this.#d.allowPrivateWebhooks)
      if (problem) throw invalidField('slack_webhook_url', problem)
    }
    // An agent without a config has the default budget; a fleet has none, so its first config names one.
    if (body.cost_threshold_usd === undefined && current === null && isFleet(ref)) throw invalidField('cost_threshold_usd', 'is required in a fleet\'s first config')
    const policy: AgentPolicy = {
      thresholdNano: body.cost_threshold_usd !== undefined ? usdToNano(body.cost_threshold_usd) : (current?.thresholdNano ?? DEFAULT_POLICY.thresholdNano),
      autoResume: body.auto_resume ?? current?.autoResume ?? false,
      webhookUrl,
      alertAt: body.alert_at ?? current?.alertAt ?? DEFAULT_POLICY.alertAt,
      velocityLimitNano:
        body.velocity_limit_usd !== undefined
          ? body.velocity_limit_usd === null
            ? null
            : usdToNano(body.velocity_limit_usd)
          : (current?.velocityLimitNano ?? DEFAULT_POLICY.velocityLimitNano),
      velocityWindowMinutes: body.velocity_window_minutes ?? current?.velocityWindowMinutes ?? DEFAULT_POLICY.velocityWindowMinutes,
      periodBudgets:
        body.period_budgets !== undefined
          ? (body.period_budgets ?? []).map((b): PeriodBudget => ({ spec: b.spec, limitNano: usdToNano(b.limitUsd) }))
          : (current?.periodBudgets ?? DEFAULT_POLICY.periodBudgets),
      runBudgetNano: runBudgetUsd !== undefined ? (runBudgetUsd === null ? null : usdToNano(runBudgetUsd)) : (current?.runBudgetNano ?? null),
    }
    const history = await this.#periodHistory(ref, state.snapshot.policy, policy)
    await hotState.setPolicy(ref, policy, clock.now(), actor, history)
  }

  /**
   * What the stored events say a state spent in the periods a new policy starts counting
   * (those its current one does not have), up to a cut from which its hot window has every
   * event: undefined when it starts none. A read of ClickHouse, on a config's request only;
   * with ClickHouse away the config is refused (503) rather than counted from nothing.
   */
  async #periodHistory(ref: AgentRef, before: AgentPolicy, after: AgentPolicy): Promise<PeriodHistory | undefined> {
    const now = this.#d.clock.now()
    const known = new Set(metersOf(before).map(periodKey))
    const starting = resolveMeters(metersOf(after), now).filter((m) => m.period && !known.has(periodKey(m)))
    if (starting.length === 0) return undefined
    // The window holds every minute from its start on; two minutes later still, so that the
    // config may take a while to reach the hot state without a minute falling between the two.
    const cut = minuteOf(windowStartMs(now)) + 2
    const from = Math.min(...starting.map((m) => m.from))
    if (from >= cut) return { cut, quarters: [] }
    const rows = await spendByQuarter(this.#d.clickhouse, from * MINUTE_MS, cut * MINUTE_MS, isFleet(ref) ? { fleets: [ref.userId] } : { refs: [ref] })
    return { cut, quarters: rows.flatMap((r) => [r.quarter, r.cost_nano]) }
  }

  /** POST /config/pause: returns the pause flag now in force (a manual pause or resume always holds). */
  async setPaused(userId: string, agentId: string, paused: boolean, actor: string): Promise<boolean> {
    return this.#setPaused({ userId, agentId }, paused, actor)
  }

  /** POST /config/fleet/pause: every agent of the user paused or resumed by hand, as one. */
  async setFleetPaused(userId: string, paused: boolean, actor: string): Promise<boolean> {
    return this.#setPaused(fleetOf(userId), paused, actor)
  }

  async #setPaused(ref: AgentRef, paused: boolean, actor: string): Promise<boolean> {
    const transition = await this.#d.hotState.setPaused(ref, paused, this.#d.clock.now(), actor)
    if (transition) this.#d.onTransition?.(transition)
    return paused
  }

  /** GET /fleet: the user's 24 h total over all of their agents, against the fleet's budget. */
  async fleet(userId: string) {
    const { snapshot: s, exhaustionAt, transition } = await this.#d.hotState.get(fleetOf(userId), this.#d.clock.now())
    if (transition) this.#d.onTransition?.(transition)
    const holding = holdingPause(RUNNING, s.pause)
    return {
      total_cost_usd: nanoToUsd(s.totalNano),
      llm_calls: s.llmCalls,
      // Without a config the fleet has no budget: nothing is left of none, and it never runs out.
      cost_threshold_usd: s.policy.thresholdNano === null ? null : nanoToUsd(s.policy.thresholdNano),
      remaining_usd: s.policy.thresholdNano === null ? null : nanoToUsd(s.policy.thresholdNano - s.totalNano),
      held_usd: nanoToUsd(s.heldNano),
      projected_exhaustion_at: isoOrNull(exhaustionAt),
      is_paused: holding !== null,
      paused_reason: pausedReasonOf(holding),
      paused_period: pausedPeriodOf(holding),
      paused_at: holding ? pausedAt(holding.pause) : null,
      override: s.pause.override,
      alerts_reached: budgetLevelsReached(s.totalNano, s.policy),
      periods: formatPeriods(s.periods),
      config: s.configured ? formatConfig(s.policy) : null,
    }
  }

  /**
   * GET /agents: the user's agents with events in the window, filtered and in the order
   * asked; with `limit`, one page of them and the cursor of the next (null on the last).
   * Totals, calls and pause flags are the hot state's, exactly what POST /events answers.
   * Only the rows answered are formatted: a page of 100 of 10,000 agents formats 100.
   */
  async list(userId: string, q: AgentsQuery = { sort: 'cost' }) {
    const { hotState, clock } = this.#d
    const now = clock.now()
    const [listed, { snapshot: fleet }] = await Promise.all([hotState.listAgents(userId, now), hotState.get(fleetOf(userId), now)])
    // Every agent counts in the summary; the filters keep some as they are listed, and rows
    // are made for the answer's agents only (GET /agents reads all 10,000 agents of a fleet
    // to answer a page of 100: objects made per agent were most of its garbage).
    const kept: ListedAgent[] = []
    const summary = { agents: 0, paused: 0, ignoring_pause: 0, alerted: 0, totalNano: 0 }
    for (const agent of listed) {
      const { snapshot } = agent
      const holding = holdingPause(snapshot.pause, fleet.pause)
      const paused = holding !== null
      const flagged = ignoring(snapshot.ignored, holding?.pause.since ?? 0)
      const alerted = budgetLevelsReached(snapshot.totalNano, snapshot.policy).length > 0
      summary.agents++
      summary.paused += paused ? 1 : 0
      summary.ignoring_pause += flagged ? 1 : 0
      summary.alerted += alerted ? 1 : 0
      summary.totalNano += snapshot.totalNano
      if (q.prefix !== undefined && !agent.agentId.startsWith(q.prefix)) continue
      if (q.paused !== undefined && q.paused !== paused) continue
      if (q.ignoring_pause !== undefined && q.ignoring_pause !== flagged) continue
      if (q.alerted !== undefined && q.alerted !== alerted) continue
      kept.push(agent)
    }
    const value = sortValue(q.sort)
    const order = (a: ListedAgent, b: ListedAgent) => byValueThenId(value(a), a.agentId, value(b), b.agentId)
    const row = (a: ListedAgent) => agentSummary(a, holdingPause(a.snapshot.pause, fleet.pause))
    if (q.limit === undefined) return { agents: kept.sort(order).map(row) }
    const cursor = q.cursor
    // The agents after the cursor's position in the order.
    const after = cursor ? kept.filter((a) => byValueThenId(value(a), a.agentId, cursor.value, cursor.agentId) > 0) : kept
    const page = firstInOrder(after, q.limit, order)
    const last = page.at(-1)
    const more = after.length > q.limit && last !== undefined
    const { totalNano, ...counts } = summary
    return {
      agents: page.map(row),
      next_cursor: more ? encodeAgentCursor({ sort: q.sort, value: value(last), agentId: last.agentId }) : null,
      total: kept.length,
      summary: { ...counts, total_cost_usd: nanoToUsd(totalNano) },
    }
  }

  /**
   * The newest events are almost always recent: look in the last hour first and widen only
   * when it holds fewer than `limit`, so a user with years of history is not read whole.
   */
  async recentEvents(userId: string, limit: number) {
    const now = this.#d.clock.now()
    for (const lookbackMs of RECENT_LOOKBACKS_MS) {
      const events = await recentEvents(this.#d.clickhouse, userId, limit, lookbackMs === Infinity ? 0 : now - lookbackMs)
      if (events.length === limit || lookbackMs === Infinity) return events.map(formatEvent)
    }
    return []
  }

  /**
   * GET /audit: the user's audit records, newest first, a page of `limit` and the
   * cursor of the next (null on the last page).
   */
  async audit(userId: string, q: { agentId?: string; scope?: AuditScope; before?: AuditCursor; limit: number }) {
    const rows = await auditRecords(this.#d.clickhouse, { userId, ...q })
    const last = rows.at(-1)
    return {
      records: rows.map((r) => ({
        at: new Date(r.at).toISOString(),
        agent_id: r.agent_id === '' ? null : r.agent_id,
        scope: r.scope,
        action: r.action,
        reason: r.reason,
        actor: r.actor,
        details: auditDetails(r.details),
      })),
      next_before: rows.length === q.limit && last ? `${new Date(last.at).toISOString()}_${last.seq}_${last.id}` : null,
    }
  }

  /** GET /agents/{id}: 404 when the agent has no events and no config. */
  async detail(userId: string, agentId: string, page: { limit: number; before?: string }) {
    const { clickhouse, hotState, clock } = this.#d
    const now = clock.now()
    const since = windowStartMs(now)
    const [byModel, events, state, fleet] = await Promise.all([
      costByModel(clickhouse, userId, agentId, since),
      agentEvents(clickhouse, { userId, agentId, sinceMs: since, before: page.before, limit: page.limit }),
      hotState.get({ userId, agentId }, now),
      hotState.get(fleetOf(userId), now),
    ])
    const { snapshot } = state
    for (const t of [state.transition, fleet.transition]) if (t) this.#d.onTransition?.(t)
    const holding = holdingPause(snapshot.pause, fleet.snapshot.pause)
    // An agent with open budget holds is known, even before its first event.
    await this.#mustExist(userId, agentId, snapshot.active || events.length > 0 || snapshot.configured || snapshot.heldNano > 0)
    const last = events.at(-1)
    return {
      agent_id: agentId,
      // The hot state's, as POST /events answers; the lists below come from ClickHouse and
      // may lag an acknowledged event by the shipper's interval plus one INSERT.
      total_cost_usd: nanoToUsd(snapshot.totalNano),
      llm_calls: snapshot.llmCalls,
      is_paused: holding !== null,
      paused_reason: pausedReasonOf(holding),
      paused_period: pausedPeriodOf(holding),
      paused_at: holding ? pausedAt(holding.pause) : null,
      // llm_calls that kept coming after the pause that holds and its grace period.
      ...ignoredOf(snapshot.ignored, holding?.pause.since ?? 0),
      remaining_usd: nanoToUsd(agentBudget(snapshot.policy) - snapshot.totalNano),
      // The worst cases of its open budget holds, counted with its total by the budget rules.
      held_usd: nanoToUsd(snapshot.heldNano),
      projected_exhaustion_at: isoOrNull(state.exhaustionAt),
      alerts_reached: budgetLevelsReached(snapshot.totalNano, snapshot.policy),
      periods: formatPeriods(snapshot.periods),
      config: snapshot.configured ? formatConfig(snapshot.policy) : null,
      cost_by_model: byModel.map((m) => ({
        model: m.model,
        cost_usd: nanoToUsd(m.cost_nano),
        llm_calls: m.llm_calls,
        input_tokens: m.input_tokens,
        output_tokens: m.output_tokens,
      })),
      events: events.map(formatEvent),
      // The next page: pass it as ?before= (null when this page was the last).
      next_before: events.length === page.limit && last ? last.timestamp : null,
    }
  }

  /** GET /agents/{id}/hourly: exactly `hours` UTC buckets, oldest first, the last one the current hour. */
  async hourly(userId: string, agentId: string, hours: number) {
    const { clickhouse, clock } = this.#d
    const currentHour = Math.floor(clock.now() / HOUR_MS) * HOUR_MS
    const first = currentHour - (hours - 1) * HOUR_MS
    const [rows, state] = await Promise.all([hourlyCost(clickhouse, userId, agentId, first), this.#d.hotState.get({ userId, agentId }, clock.now())])
    await this.#mustExist(userId, agentId, rows.length > 0 || state.snapshot.configured || state.snapshot.active)
    const byHour = new Map(rows.map((r) => [r.hour_ms, r]))
    const buckets = Array.from({ length: hours }, (_, i) => {
      const hour = first + i * HOUR_MS
      const r = byHour.get(hour)
      return {
        hour: new Date(hour).toISOString(),
        cost_usd: nanoToUsd(r?.cost_nano ?? 0),
        llm_calls: r?.llm_calls ?? 0,
        input_tokens: r?.input_tokens ?? 0,
        output_tokens: r?.output_tokens ?? 0,
      }
    })
    return { agent_id: agentId, hours, buckets }
  }

  /**
   * 404 for an agent with no events and no config. `known` is what the
   * caller's own reads already showed; only when they showed nothing is history looked up.
   */
  async #mustExist(userId: string, agentId: string, known: boolean): Promise<void> {
    if (known || (await agentHasEvents(this.#d.clickhouse, userId, agentId))) return
    throw new Problem('agent_not_found', `no agent ${JSON.stringify(agentId)} for this API key's user`)
  }
}

/** A stored event as the read API shows it: its cost in USD. */
export function formatEvent(e: StoredEvent) {
  const { cost_nano, ...rest } = e
  return { ...rest, cost_usd: nanoToUsd(cost_nano) }
}

/** A record's details as the API shows them: money in USD (pause and alert records keep nano-USD), times in ISO. */
function auditDetails(json: string): Record<string, unknown> {
  const { total_nano, threshold_nano, spent_nano, held_nano, budget_nano, paused_at_ms, ...rest } = JSON.parse(json) as Record<string, unknown>
  return {
    ...rest,
    ...(typeof held_nano === 'number' ? { held_usd: nanoToUsd(held_nano) } : {}),
    ...(typeof budget_nano === 'number' ? { run_budget_usd: nanoToUsd(budget_nano) } : {}),
    ...(typeof paused_at_ms === 'number' ? { paused_at: new Date(paused_at_ms).toISOString() } : {}),
    ...(typeof spent_nano === 'number' ? { spent_usd: nanoToUsd(spent_nano) } : {}),
    ...(typeof total_nano === 'number' ? { total_cost_usd: nanoToUsd(total_nano) } : {}),
    ...(typeof threshold_nano === 'number' ? { cost_threshold_usd: nanoToUsd(threshold_nano) } : {}),
  }
}

const NONE: readonly number[] = Object.freeze([])

/** The alert levels of the daily budget the total is at or above (policy.ts levelsReached), as their fractions. */
function budgetLevelsReached(totalNano: number, policy: AgentPolicy): readonly number[] {
  const budget = budgetMeter(policy)
  const bits = budget ? levelsReached(budget, totalNano) : 0
  // Most agents of a listing are under every level: one shared empty list, not one each.
  return bits === 0 ? NONE : budget!.alertAt.filter((_, i) => (bits & (1 << i)) !== 0)
}

/** A 400 naming the offending field, for what only the service can check. */
function invalidField(field: string, message: string): Problem {
  return new Problem('invalid_body', `${field}: ${message}`, { errors: [{ field, message }] })
}

/** The ignoring-pause flag and its counts, against the pause that holds (`since`); zero when it does not hold. */
function ignoredOf(ign: Ignored, since: number) {
  const flagged = ignoring(ign, since)
  return { ignoring_pause: flagged, ignored_calls: flagged ? ign.calls : 0, ignored_usd: flagged ? nanoToUsd(ign.nano) : 0 }
}

/** When a pause (one that holds) began, ISO; null for a pause Redis held from before this was kept (0). */
function pausedAt(pause: PauseState): string | null {
  return pause.since > 0 ? new Date(pause.since).toISOString() : null
}

/** What a listing's order sorts on, highest first (0 for every agent when sorted by id). */
function sortValue(sort: AgentSort): (a: ListedAgent) => number {
  if (sort === 'cost') return (a) => a.snapshot.totalNano
  if (sort === 'recent') return (a) => a.snapshot.lastEventMinute ?? 0
  return () => 0
}

/**
 * A listing's order, of two agents or of an agent and a cursor's position (value, id):
 * highest value first, then by id in code-unit order (a locale-aware comparison cost 40 ms
 * over 10,000 agents of equal totals).
 */
function byValueThenId(valueA: number, idA: string, valueB: number, idB: string): number {
  return valueB - valueA || (idA < idB ? -1 : idA > idB ? 1 : 0)
}

/**
 * The first `n` of `rows` in `order`, sorted, without sorting the rest: a heap of the `n`
 * kept so far, whose last in order is at its root, which a row replaces only when it comes
 * before it. A page of 100 of 10,000 agents compares most rows once with the root, and sorts
 * 100 (a whole sort made the page's time grow with the fleet's n log n).
 */
export function firstInOrder<T>(rows: readonly T[], n: number, order: (a: T, b: T) => number): T[] {
  if (rows.length <= n) return [...rows].sort(order)
  // A max-heap by `order`: heap[0] is the last in order of the kept rows.
  const heap: T[] = []
  const later = (i: number, j: number) => order(heap[i]!, heap[j]!) > 0
  const swap = (i: number, j: number) => ([heap[i], heap[j]] = [heap[j]!, heap[i]!])
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1
      const r = l + 1
      let top = i
      if (l < heap.length && later(l, top)) top = l
      if (r < heap.length && later(r, top)) top = r
      if (top === i) return
      swap(i, top)
      i = top
    }
  }
  for (const row of rows) {
    if (heap.length < n) {
      heap.push(row)
      for (let i = heap.length - 1; i > 0 && later(i, (i - 1) >> 1); i = (i - 1) >> 1) swap(i, (i - 1) >> 1)
    } else if (order(row, heap[0]!) < 0) {
      heap[0] = row
      down(0)
    }
  }
  return heap.sort(order)
}

// One shape for every row (an absent threshold is undefined, which the reply leaves out):
// a spread of an optional field made rows of two shapes and took a quarter of the listing.
function agentSummary({ agentId, snapshot: s }: ListedAgent, holding: { pause: PauseState; fleet: boolean } | null) {
  return {
    agent_id: agentId,
    total_cost_usd: nanoToUsd(s.totalNano),
    llm_calls: s.llmCalls,
    cost_threshold_usd: s.configured ? nanoToUsd(agentBudget(s.policy)) : undefined,
    is_paused: holding !== null,
    paused_reason: pausedReasonOf(holding),
    paused_period: pausedPeriodOf(holding),
    remaining_usd: nanoToUsd(agentBudget(s.policy) - s.totalNano),
    alerts_reached: budgetLevelsReached(s.totalNano, s.policy),
    ignoring_pause: ignoring(s.ignored, holding?.pause.since ?? 0),
    periods: formatPeriods(s.periods),
  }
}

const NO_PERIODS: readonly never[] = Object.freeze([])

/**
 * Each period of a state's period budgets as the API shows it: what it holds against its
 * limit, when it began and (a calendar period) ends, and when its limit is reached at the
 * last hour's rate within it. A rolling window begins with its first whole UTC hour.
 */
export function formatPeriods(periods: readonly PeriodSpend[]) {
  if (periods.length === 0) return NO_PERIODS
  return periods.map(({ meter: m, spentNano, exhaustionAt }) => {
    const shown = shownPeriod(m)
    return {
      period: shown.period,
      spent_usd: nanoToUsd(spentNano),
      limit_usd: shown.limitUsd,
      remaining_usd: nanoToUsd(m.limitNano - spentNano),
      starts_at: shown.startsAt,
      ends_at: shown.endsAt,
      projected_exhaustion_at: isoOrNull(exhaustionAt),
    }
  })
}

// What a period shows that changes only with its resolved meter (a minute's, shared by every
// answer of the policy in it): made once. Formatting the dates per answer was the periods'
// largest cost on POST /events.
const shownPeriods = new WeakMap<ResolvedMeter, { period: string; limitUsd: number; startsAt: string; endsAt: string | null }>()

function shownPeriod(m: ResolvedMeter) {
  let shown = shownPeriods.get(m)
  if (!shown) {
    shown = {
      period: periodName(m.period!),
      limitUsd: nanoToUsd(m.limitNano),
      startsAt: new Date(m.from * MINUTE_MS).toISOString(),
      endsAt: m.endsAt === undefined ? null : new Date(m.endsAt).toISOString(),
    }
    shownPeriods.set(m, shown)
  }
  return shown
}
