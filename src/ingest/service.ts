import { randomUUID } from 'node:crypto'
import type { ClickHouseClient } from '@clickhouse/client'
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from '../clock.ts'
import { StoreUnavailableError } from '../errors.ts'
import { manual } from '../hot-state/policy.ts'
import type { AgentPolicy, AgentRef, EventRef, HotState, RecordResult, Reservation, Transition } from '../hot-state/types.ts'
import type { Nano } from '../money.ts'
import type { PriceTable } from '../pricing/price-table.ts'
import type { EventBody } from '../schemas/event.ts'
import { chDateTimeToMs } from '../storage/clickhouse.ts'
import { monotonicMicros } from '../storage/version.ts'
import { eventKey, insertEvents, storedEvents, type EventRow } from '../storage/events.ts'
import { configRow, upsertConfig } from '../storage/configs.ts'
import { insertTransitions } from '../storage/transitions.ts'
import { nextVersion } from '../storage/version.ts'
import { GroupCommitter, type GroupCommitOptions } from './group-commit.ts'
import { eventRow } from './event-row.ts'
import { announceBudgetPauses, type PauseNotifier } from './notify.ts'
import type { Ingest, IngestReply } from './types.ts'


interface Item {
  row: EventRow
  at: number
  /** The reservation was taken over from a quiet instance: the row may be stored already. */
  takeover: boolean
}

// How long a request waits for another instance storing the same event before a 503.
const BUSY_WAIT_MS = 3000
const MAX_UNCERTAIN = 100_000

export interface IngestDeps {
  clickhouse: ClickHouseClient
  hotState: HotState
  prices: PriceTable
  notifier: PauseNotifier
  clock: Clock
  log: FastifyBaseLogger
  batch: GroupCommitOptions
}

/**
 * The write path with REDIS_URL, until the Redis journal of issue 8 replaces it (the
 * embedded mode already answers from its journal: journaled.ts). An event is priced,
 * group-committed to ClickHouse with the events that arrived with it, and only then counted
 * in the hot state; the caller is answered after that, so a 200 means stored. A failed
 * insert rejects the whole batch (the routes answer 503) and counts none of it, so a client
 * retry with the same event_id is safe.
 */
export class IngestService implements Ingest {
  readonly #deps: IngestDeps
  readonly #committer: GroupCommitter<Item, RecordResult>
  // Requests in flight per user+agent+event_id: a concurrent repeat waits for the first.
  readonly #inFlight = new Map<string, Promise<IngestReply>>()
  readonly #receivedAt = monotonicMicros()
  // Events whose batch failed, oldest first (bounded): their retry looks in ClickHouse first.
  readonly #uncertain = new Set<string>()
  // Names this instance's reservations (HotState.reserve).
  readonly #token = randomUUID()

  constructor(deps: IngestDeps) {
    this.#deps = deps
    this.#committer = new GroupCommitter((items) => this.#commit(items), deps.batch)
  }

  get stats() {
    return this.#committer.stats
  }

  async ingest(userId: string, event: EventBody): Promise<IngestReply> {
    const eventId = event.event_id ?? randomUUID()
    const key = `${userId}\0${event.agent_id}\0${eventId}`
    const pending = this.#inFlight.get(key)
    if (pending) return { ...(await pending), duplicate: true }

    // Registered before the first await, so a concurrent repeat always finds it.
    const reply = this.#accept(userId, eventId, event)
    this.#inFlight.set(key, reply)
    try {
      return await reply
    } finally {
      this.#inFlight.delete(key)
    }
  }

  /** Stores what is queued and stops taking events (graceful shutdown). */
  close(): Promise<void> {
    return this.#committer.close()
  }

  async #accept(userId: string, eventId: string, e: EventBody): Promise<IngestReply> {
    const claim = await this.#claim({ userId, agentId: e.agent_id, eventId })
    if (claim.state === 'done') return this.#replay(userId, e.agent_id, eventId, claim.costNano)
    const micros = this.#receivedAt(this.#deps.clock.now())
    const at = Math.floor(micros / 1000)
    const row = eventRow(this.#deps.prices, userId, eventId, e, micros)
    // A batch that failed may have been stored all the same (a ClickHouse server that timed
    // out after writing): its retry here looks before storing, as a takeover does.
    const key = eventKey(row)
    const failedBefore = this.#uncertain.delete(key)
    const takeover = claim.state === 'takeover' || failedBefore
    let result: RecordResult
    try {
      result = await this.#committer.submit({ row, at, takeover })
    } catch (err) {
      if (this.#uncertain.size >= MAX_UNCERTAIN) this.#uncertain.delete(this.#uncertain.keys().next().value!)
      this.#uncertain.add(key)
      throw err
    }
    return { eventId, costNano: row.cost_nano, paused: result.paused, totalNano: result.totalNano, duplicate: !result.counted }
  }

  /**
   * Reserves the event id for this instance. While another instance is storing the same
   * event, waits (bounded) for it to finish; then it is a duplicate, or stale and ours.
   */
  async #claim(ref: EventRef): Promise<Exclude<Reservation, { state: 'busy' }>> {
    const deadline = performance.now() + BUSY_WAIT_MS
    for (let delay = 10; ; delay = Math.min(delay * 2, 200)) {
      const [claim] = await this.#deps.hotState.reserve([ref], this.#token, this.#deps.clock.now())
      if (claim!.state !== 'busy') return claim!
      if (performance.now() > deadline) {
        throw new StoreUnavailableError('Redis', 'the same event is being stored by another instance; retry with the same event_id')
      }
      await new Promise((r) => setTimeout(r, delay))
    }
  }

  async #replay(userId: string, agentId: string, eventId: string, costNano: Nano): Promise<IngestReply> {
    const { snapshot } = await this.#deps.hotState.get({ userId, agentId }, this.#deps.clock.now())
    return { eventId, costNano, paused: snapshot.pause.paused, totalNano: snapshot.totalNano, duplicate: true }
  }

  async #commit(items: Item[]): Promise<RecordResult[]> {
    const { clickhouse, hotState, clock } = this.#deps
    // A taken-over event may have been stored by the instance that went quiet: look, and
    // count the stored row instead of storing it twice (one query, only after a failure).
    const takeovers = items.filter((i) => i.takeover)
    const stored = takeovers.length > 0 ? await storedEvents(clickhouse, takeovers.map((i) => i.row)) : new Map<string, EventRow>()
    for (const item of takeovers) {
      const row = stored.get(eventKey(item.row))
      if (row) {
        // In place: the request answers with the stored cost and counts the stored minute.
        Object.assign(item.row, row)
        item.at = chDateTimeToMs(row.timestamp)
      }
    }
    await insertEvents(
      clickhouse,
      items.filter((i) => !stored.has(eventKey(i.row))).map((i) => i.row),
    )
    const results = await hotState.record(
      items.map(({ row, at }) => ({
        userId: row.user_id,
        agentId: row.agent_id,
        eventId: row.event_id,
        costNano: row.cost_nano,
        llmCall: row.event_type === 'llm_call',
        at,
      })),
      clock.now(),
    )
    const transitions = results.flatMap((r) => r.transitions)
    if (transitions.length > 0) await this.persistTransitions(transitions)
    return results
  }

  /** POST /config: stored in ClickHouse first, so a refusal changes nothing anywhere. */
  async configure(ref: AgentRef, policy: AgentPolicy): Promise<void> {
    const now = this.#deps.clock.now()
    await upsertConfig(this.#deps.clickhouse, configRow(ref, policy, now))
    const transition = await this.#deps.hotState.setPolicy(ref, policy, now)
    if (transition) await this.persistTransitions([transition])
  }

  /** POST /config/pause: the transition is stored before it takes effect, so a restart finds it. */
  async setPaused(ref: AgentRef, paused: boolean): Promise<void> {
    const { clickhouse, hotState, clock } = this.#deps
    const now = clock.now()
    const { snapshot } = await hotState.get(ref, now)
    const next = manual(snapshot.pause, paused, snapshot.totalNano, snapshot.policy)
    if (!next) return
    const transition: Transition = {
      ...ref,
      at: now,
      version: nextVersion(now),
      paused: next.paused,
      reason: 'manual',
      override: next.override,
      totalNano: snapshot.totalNano,
      thresholdNano: snapshot.policy.thresholdNano,
      webhookUrl: snapshot.policy.webhookUrl,
    }
    await insertTransitions(clickhouse, [transition])
    await hotState.setPaused(ref, paused, now)
  }

  /**
   * Records pause transitions and sends the budget notifications. The events behind them
   * are already stored, so a failure here is logged, not answered: a rebuild re-derives a
   * budget pause from the stored totals.
   */
  async persistTransitions(transitions: readonly Transition[]): Promise<void> {
    try {
      await insertTransitions(this.#deps.clickhouse, transitions)
    } catch (err) {
      this.#deps.log.error({ err, count: transitions.length }, 'could not store pause transitions')
    }
    announceBudgetPauses(transitions, this.#deps.log, this.#deps.notifier)
  }
}
