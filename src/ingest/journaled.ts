import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from '../clock.ts'
import type { MemoryHotState } from '../hot-state/memory.ts'
import type { AgentPolicy, AgentRef, Transition } from '../hot-state/types.ts'
import type { SegmentLog } from '../journal/segment-log.ts'
import { JournalFullError, type JournalRow } from '../journal/types.ts'
import type { PriceTable } from '../pricing/price-table.ts'
import type { EventBody } from '../schemas/event.ts'
import { configRow } from '../storage/configs.ts'
import { transitionRow } from '../storage/transitions.ts'
import { monotonicMicros } from '../storage/version.ts'
import { eventRow } from './event-row.ts'
import { announceBudgetPauses, type PauseNotifier } from './notify.ts'
import type { Ingest, IngestReply } from './types.ts'

export interface JournaledIngestDeps {
  hotState: MemoryHotState
  journal: SegmentLog
  prices: PriceTable
  notifier: PauseNotifier
  clock: Clock
  log: FastifyBaseLogger
  /** Told after each append how many rows wait to be shipped (the shipper ships a full batch at once). */
  onAppended?: (backlogRows: number) => void
}

/**
 * The embedded write path (issue 8): POST /events is answered from one atomic step, with no
 * ClickHouse call on its way. Dedup, count, evaluate and flip (the in-process hot state) and
 * the append of the event and its transitions to the journal run in one synchronous block,
 * so no other request sees one without the other; the answer waits until the journal has
 * written them (group commit). The shipper moves the journal into ClickHouse afterwards.
 */
export class JournaledIngest implements Ingest {
  readonly #d: JournaledIngestDeps
  readonly #receivedAt = monotonicMicros()

  constructor(deps: JournaledIngestDeps) {
    this.#d = deps
  }

  async ingest(userId: string, e: EventBody): Promise<IngestReply> {
    const { hotState, journal, clock } = this.#d
    const eventId = e.event_id ?? randomUUID()
    const now = clock.now()
    const micros = this.#receivedAt(now)
    const row = eventRow(this.#d.prices, userId, eventId, e, micros)
    // The bound is checked before anything changes: a refused event leaves no trace.
    if (journal.backlogFull) throw new JournalFullError(journal.backlog())
    const step = hotState.recordNow(
      { userId, agentId: e.agent_id, eventId, costNano: row.cost_nano, llmCall: row.event_type === 'llm_call', at: Math.floor(micros / 1000) },
      now,
    )
    const reply = { eventId, costNano: step.costNano, paused: step.paused, totalNano: step.totalNano, duplicate: !step.counted }
    if (!step.counted) {
      // The first of these may still be on its way to the disk: answer once it is there.
      await journal.synced()
      return reply
    }
    await this.#append([{ table: 'events', row }, ...step.transitions.map(asRow)], now)
    this.#notify(step.transitions)
    return reply
  }

  async persistTransitions(transitions: readonly Transition[]): Promise<void> {
    if (transitions.length === 0) return
    await this.#append(transitions.map(asRow), this.#d.clock.now())
    this.#notify(transitions)
  }

  async configure(ref: AgentRef, policy: AgentPolicy): Promise<void> {
    const { hotState, journal, clock } = this.#d
    const now = clock.now()
    if (journal.backlogFull) throw new JournalFullError(journal.backlog())
    // One synchronous block, as for an event: the new policy and its row, and the end of an override it causes.
    const transition = hotState.setPolicyNow(ref, policy, now)
    await this.#append([{ table: 'agent_configs', row: configRow(ref, policy, now) }, ...(transition ? [asRow(transition)] : [])], now)
  }

  async setPaused(ref: AgentRef, paused: boolean): Promise<void> {
    const { hotState, journal, clock } = this.#d
    const now = clock.now()
    if (journal.backlogFull) throw new JournalFullError(journal.backlog())
    const transition = hotState.setPausedNow(ref, paused, now)
    // Already so: answer once what made it so is on disk.
    await (transition ? this.#append([asRow(transition)], now) : journal.synced())
  }

  /** The write path stops with the HTTP server; what is appended is already durable. */
  async close(): Promise<void> {}

  async #append(rows: JournalRow[], now: number): Promise<void> {
    const written = this.#d.journal.append(rows, now)
    this.#d.onAppended?.(this.#d.journal.backlog().rows)
    await written
  }

  #notify(transitions: readonly Transition[]): void {
    announceBudgetPauses(transitions, this.#d.log, this.#d.notifier)
  }
}

function asRow(t: Transition): JournalRow {
  return { table: 'pause_transitions', row: transitionRow(t) }
}
