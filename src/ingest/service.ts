import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from '../clock.ts'
import { isFleet } from '../hot-state/agent-ref.ts'
import { type BudgetAlert, type HotState, type PausedReason, type PeriodSpend, type RateCharge, type RateState, type Transition } from '../hot-state/types.ts'
import type { PriceTable } from '../pricing/price-table.ts'
import type { EventBody } from '../schemas/event.ts'
import { monotonicMicros } from '../storage/version.ts'
import { eventRow } from './event-row.ts'
import { announceAlerts, announceBudgetPauses, type PauseNotifier } from './notify.ts'

/** The answer to POST /events, in nano-USD until the route formats it. */
export interface IngestReply {
  eventId: string
  costNano: number
  paused: boolean
  /** Why, the agent's own reason or its fleet's; null while running. */
  pausedReason: PausedReason | null
  /** The period of the period budget that paused it, else null. */
  pausedPeriod: string | null
  /** Each period of the agent's period budgets. */
  periods: readonly PeriodSpend[]
  totalNano: number
  thresholdNano: number
  /** When the total reaches the threshold at the last hour's rate, epoch ms, or null (never). */
  exhaustionAt: number | null
  /** The alert levels of the agent's own budget this event crossed. */
  alerts: readonly number[]
  /** The alert levels of its fleet's budget this event crossed. */
  fleetAlerts: readonly number[]
  duplicate: boolean
  /** Its API key's budget of events after this event. */
  rate: RateState | null
}

export interface IngestDeps {
  hotState: HotState
  prices: PriceTable
  notifier: PauseNotifier
  clock: Clock
  log: FastifyBaseLogger
  /** Told after each event counted (the embedded shipper ships a full batch at once). */
  onRecorded?: () => void
  /** Told the quantities of a counted event that the price data has no price for (a metric). */
  onUnpriced?: (quantities: readonly string[]) => void
  /** Told each agent flagged for calling the model after its pause (a metric). */
  onIgnoredPause?: () => void
  /** Told each run stopped by its agent's run budget (a metric). */
  onRunStopped?: () => void
  /** Told what a counted event changed: pause transitions and alert levels crossed (metrics). */
  onChanges?: (transitions: readonly Transition[], alerts: readonly BudgetAlert[]) => void
}

/**
 * POST /events: an event is priced and handed to the hot state's atomic step,
 * which dedups, counts, evaluates, flips and journals it together and resolves once the
 * journal has it; no ClickHouse call is on the way. The shipper moves the journal into
 * ClickHouse afterwards, in both modes.
 */
export class IngestService {
  readonly #d: IngestDeps
  readonly #receivedAt = monotonicMicros()

  constructor(deps: IngestDeps) {
    this.#d = deps
  }

  async ingest(userId: string, e: EventBody, rate?: RateCharge): Promise<IngestReply> {
    const eventId = e.event_id ?? randomUUID()
    const now = this.#d.clock.now()
    const micros = this.#receivedAt(now)
    const row = eventRow(this.#d.prices, userId, eventId, e, micros)
    const step = await this.#d.hotState.record(
      {
        userId,
        agentId: e.agent_id,
        eventId,
        costNano: row.cost_nano,
        llmCall: row.event_type === 'llm_call',
        at: Math.floor(micros / 1000),
        holdId: e.hold_id,
        runId: row.run_id || undefined,
        endsRun: row.event_type === 'agent_end',
        row,
        rate,
      },
      now,
    )
    if (step.counted) {
      this.#d.onRecorded?.()
      if (row.unpriced_quantities?.length) this.#d.onUnpriced?.(row.unpriced_quantities)
      announceBudgetPauses(step.transitions, this.#d.log, this.#d.notifier)
      announceAlerts(step.alerts, this.#d.log, this.#d.notifier)
      if (step.transitions.length > 0 || step.alerts.length > 0) this.#d.onChanges?.(step.transitions, step.alerts)
      if (step.ignored) {
        this.#d.log.warn({ userId, agentId: e.agent_id, calls: step.ignored.calls }, 'agent keeps calling the model after its pause')
        this.#d.notifier.ignoredPause(step.ignored)
        this.#d.onIgnoredPause?.()
      }
      if (step.runStop) {
        this.#d.log.info({ userId, agentId: e.agent_id, runId: step.runStop.runId, spentNano: step.runStop.spentNano }, 'run stopped by its run budget')
        this.#d.notifier.runStopped(step.runStop)
        this.#d.onRunStopped?.()
      }
    }
    const { costNano, paused, pausedReason, pausedPeriod, periods, totalNano, thresholdNano, exhaustionAt } = step
    return {
      eventId,
      costNano,
      paused,
      pausedReason,
      pausedPeriod,
      periods,
      totalNano,
      thresholdNano,
      exhaustionAt,
      alerts: levelsOf(step.alerts, false),
      fleetAlerts: levelsOf(step.alerts, true),
      duplicate: !step.counted,
      rate: step.rate,
    }
  }
}

const NONE: readonly number[] = Object.freeze([])

function levelsOf(alerts: readonly BudgetAlert[], fleet: boolean): readonly number[] {
  // Almost every event fires none: no array of its own for it.
  // The daily budget's levels: a period budget's are told by its chat message and audit record.
  return alerts.length === 0 ? NONE : alerts.filter((a) => isFleet(a) === fleet && a.meter === 'budget').map((a) => a.level)
}
