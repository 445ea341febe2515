import type { BudgetAlert } from '../hot-state/types.ts'
import type { Nano } from '../money.ts'
import { toChDateTime } from './clickhouse.ts'

/** A row of budget_alerts (sql/0013): an alert level an event crossed. */
export interface AlertRow {
  user_id: string
  agent_id: string
  at: string
  version: number
  level: number
  total_nano: Nano
  threshold_nano: Nano
}

export function alertRow(a: BudgetAlert): AlertRow {
  return {
    user_id: a.userId,
    agent_id: a.agentId,
    at: toChDateTime(a.at),
    version: a.version,
    level: a.level,
    total_nano: a.totalNano,
    threshold_nano: a.thresholdNano,
  }
}
