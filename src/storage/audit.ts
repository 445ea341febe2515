import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { chDateTimeToMs } from './clickhouse.ts'
import { select } from './query.ts'

/** A record of audit_log (sql/0012) as read back. */
export interface AuditRow {
  at: number
  seq: string
  id: string
  agent_id: string
  scope: AuditScope
  action: string
  reason: string
  actor: string
  details: string
}

export const AUDIT_SCOPES = ['agent', 'fleet', 'user'] as const
export type AuditScope = (typeof AUDIT_SCOPES)[number]

/**
 * What a record is of: an agent, the user's fleet (the agent '' of its rows: hot-state/types.ts
 * FLEET), or the user (keys, whose records also have agent_id '').
 */
const SCOPE = "multiIf(agent_id != '', 'agent', startsWith(action, 'key_'), 'user', 'fleet')"

const row = z
  .object({ at_text: z.string(), seq_text: z.string(), id_text: z.string(), agent_id: z.string(), scope: z.enum(AUDIT_SCOPES), action: z.string(), reason: z.string(), actor: z.string(), details: z.string() })
  .transform(({ at_text, seq_text, id_text, ...r }) => ({ ...r, at: chDateTimeToMs(at_text), seq: seq_text, id: id_text }))

/** Where a page of the audit log starts: older than a time, or than a record (its time, seq and id). */
export interface AuditCursor {
  at: string
  after: { seq: string; id: string } | null
}

/**
 * A user's audit records, newest first: of one agent, of one scope or all, strictly older than `before`.
 * The table's order (user_id, at, seq, id) lets ClickHouse read a page from the newest end.
 */
export function auditRecords(
  client: ClickHouseClient,
  q: { userId: string; agentId?: string; scope?: AuditScope; before?: AuditCursor; limit: number },
): Promise<AuditRow[]> {
  const before = q.before
    ? q.before.after === null
      ? "AND at < parseDateTime64BestEffort({before_at:String}, 3, 'UTC')"
      : "AND (at, seq, id) < (parseDateTime64BestEffort({before_at:String}, 3, 'UTC'), {before_seq:UInt64}, toUUID({before_id:String}))"
    : ''
  return select(
    client,
    // Aliases of their own: ClickHouse would read an alias named \`at\` in WHERE as the text.
    `SELECT toString(at) AS at_text, toString(seq) AS seq_text, toString(id) AS id_text, agent_id, ${SCOPE} AS scope, action, reason, actor, details
     FROM audit_log
     WHERE user_id = {user:String} ${q.agentId === undefined ? '' : 'AND agent_id = {agent:String}'}
       ${q.scope === undefined ? '' : `AND ${SCOPE} = {scope:String}`} ${before}
     ORDER BY at DESC, seq DESC, id DESC
     LIMIT {limit:UInt32}`,
    { user: q.userId, agent: q.agentId, scope: q.scope, before_at: q.before?.at, before_seq: q.before?.after?.seq, before_id: q.before?.after?.id, limit: q.limit },
    row,
  )
}
