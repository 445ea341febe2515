import { hash } from 'node:crypto'
import { isMeterId, periodOfMeter } from '../hot-state/meters.ts'
import { isFleet } from '../hot-state/agent-ref.ts'
import { type BudgetAlert, type IgnoredPause, type RunStop, type Transition } from '../hot-state/types.ts'
import { nanoToUsd } from '../money.ts'
import type { WebhookNotifier } from '../notify/webhook.ts'

/**
 * Logs each pause by a meter among `transitions`, and each end of a period budget's pause by
 * itself, and sends its chat message (the others send none).
 */
export function announceBudgetPauses(transitions: readonly Transition[], log: { info(obj: object, msg: string): void }, notifier: PauseNotifier): void {
  for (const t of transitions) {
    if (isMeterId(t.reason)) {
      log.info({ userId: t.userId, agentId: t.agentId, totalUsd: nanoToUsd(t.totalNano), meter: t.reason }, `${isFleet(t) ? 'fleet' : 'agent'} paused by its ${METER_NAMES[t.reason] ?? 'period budget'}`)
      notifier.budgetPaused(t)
    } else if (t.reason === 'auto_resume' && t.meter && periodOfMeter(t.meter.id) !== null) {
      log.info({ userId: t.userId, agentId: t.agentId, meter: t.meter.id }, `${isFleet(t) ? 'fleet' : 'agent'} resumed: its period budget's pause ended`)
      notifier.budgetPaused(t)
    }
  }
}

const METER_NAMES: Partial<Record<string, string>> = { budget: 'budget', velocity: 'velocity limit' }

/** Logs each alert level an event crossed and sends its chat message. */
export function announceAlerts(alerts: readonly BudgetAlert[], log: { info(obj: object, msg: string): void }, notifier: PauseNotifier): void {
  for (const a of alerts) {
    log.info({ userId: a.userId, agentId: a.agentId, level: a.level, totalUsd: nanoToUsd(a.totalNano) }, isFleet(a) ? 'fleet reached an alert level of its budget' : 'agent reached an alert level of its budget')
    notifier.alert(a)
  }
}

/** Tells a team that its agent was paused by its budget, or is getting close to it. */
export interface PauseNotifier {
  /** Returns at once: ingestion never waits on a chat service. */
  budgetPaused(t: Transition): void
  /** Returns at once, as budgetPaused does. */
  alert(a: BudgetAlert): void
  /** An agent went on calling the model after its pause: returns at once. */
  ignoredPause(i: IgnoredPause): void
  /** A run was stopped by its agent's run budget: returns at once. */
  runStopped(r: RunStop): void
  drain(): Promise<void>
}

export class WebhookPauseNotifier implements PauseNotifier {
  readonly #webhooks: WebhookNotifier

  constructor(webhooks: WebhookNotifier) {
    this.#webhooks = webhooks
  }

  budgetPaused(t: Transition): void {
    if (t.webhookUrl === null) return
    this.#webhooks.notify(t.webhookUrl, {
      // The pause it announces, named by its version: the same on every attempt and instance.
      id: noticeId(t.userId, t.agentId, t.version),
      userId: t.userId,
      agentId: isFleet(t) ? null : t.agentId,
      totalUsd: nanoToUsd(t.totalNano),
      thresholdUsd: nanoToUsd(t.meter?.id === 'budget' ? t.meter.limitNano : (t.thresholdNano ?? 0)),
      ...(t.meter?.id === 'velocity'
        ? { velocity: { spentUsd: nanoToUsd(t.meter.spentNano), limitUsd: nanoToUsd(t.meter.limitNano), windowMinutes: t.meter.windowMinutes } }
        : {}),
      ...(t.meter && periodOfMeter(t.meter.id) !== null
        ? { period: { name: periodOfMeter(t.meter.id)!, spentUsd: nanoToUsd(t.meter.spentNano), limitUsd: nanoToUsd(t.meter.limitNano), resumed: !t.paused } }
        : {}),
      ...(t.heldNano ? { heldUsd: nanoToUsd(t.heldNano) } : {}),
      at: new Date(t.at),
    })
  }

  alert(a: BudgetAlert): void {
    if (a.webhookUrl === null) return
    this.#webhooks.notify(a.webhookUrl, {
      // The crossing it announces, named by the agent's version when it fired.
      id: noticeId('alert', a.userId, a.agentId, a.version),
      userId: a.userId,
      agentId: isFleet(a) ? null : a.agentId,
      level: a.level,
      totalUsd: nanoToUsd(a.totalNano),
      thresholdUsd: nanoToUsd(a.thresholdNano),
      exhaustionAt: a.exhaustionAt === null ? null : new Date(a.exhaustionAt),
      ...(periodOfMeter(a.meter) === null ? {} : { period: periodOfMeter(a.meter)! }),
      at: new Date(a.at),
    })
  }

  ignoredPause(i: IgnoredPause): void {
    if (i.webhookUrl === null) return
    this.#webhooks.notify(i.webhookUrl, {
      id: noticeId('ignored', i.userId, i.agentId, i.version),
      userId: i.userId,
      agentId: i.agentId,
      pausedAt: new Date(i.pausedSince),
      calls: i.calls,
      spentUsd: nanoToUsd(i.costNano),
      at: new Date(i.at),
    })
  }

  runStopped(r: RunStop): void {
    if (r.webhookUrl === null) return
    this.#webhooks.notify(r.webhookUrl, {
      id: noticeId('run', r.userId, r.agentId, r.version),
      userId: r.userId,
      agentId: r.agentId,
      runId: r.runId,
      spentUsd: nanoToUsd(r.spentNano),
      heldUsd: nanoToUsd(r.heldNano),
      budgetUsd: nanoToUsd(r.budgetNano),
      at: new Date(r.at),
    })
  }

  drain(): Promise<void> {
    return this.#webhooks.drain()
  }
}

/** A notification's id (its Idempotency-Key): the same on every attempt and every instance. */
function noticeId(...parts: Array<string | number>): string {
  return hash('sha256', parts.join('\0'), 'hex').slice(0, 32)
}
