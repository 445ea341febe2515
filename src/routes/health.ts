import type { ClickHouseClient } from '@clickhouse/client'
import type { FastifyPluginAsync } from 'fastify'
import { Problem } from '../errors.ts'
import type { HotState } from '../hot-state/types.ts'
import { backlogAgeSeconds, type JournalStatus } from '../journal/types.ts'
import { oldestEventReader, type Retention } from '../storage/retention.ts'

/**
 * For load balancers: no key. /healthz: the process answers. /readyz: it can take events.
 * With the journal ClickHouse is not needed for that: its state is reported, with
 * the backlog the journal holds for it, and only a hot state that does not answer or a full
 * journal makes the instance unready.
 */
export const healthRoutes =
  (
    clickhouse: ClickHouseClient,
    hotState: HotState,
    journal: JournalStatus,
    deadLetters: () => number,
    retention: Retention,
  ): FastifyPluginAsync =>
  async (app) => {
    const oldestEvent = oldestEventReader(clickhouse)
    app.get('/healthz', async () => ({ ok: true }))

    app.get('/readyz', async (_request, reply) => {
      const [ch, hot, oldest] = await Promise.allSettled([clickhouse.ping(), hotState.ping(), oldestEvent()])
      const clickhouseUp = ch.status === 'fulfilled' && ch.value.success
      const hotUp = hot.status === 'fulfilled'
      if (!hotUp) throw new Problem('store_unavailable', 'hot state not answering', { retryAfter: 1 })
      const body = { ok: true, clickhouse: clickhouseUp ? 'up' : 'down', hot_state: 'up', journal: { ...journalState(journal), dead_letters: deadLetters() },
        retention: {
          events_days: retention.eventsDays,
          hourly_days: retention.hourlyDays,
          audit_days: retention.auditDays,
          oldest_event_at: oldest.status === 'fulfilled' && oldest.value !== null ? new Date(oldest.value).toISOString() : null,
        },
      }
      if (journal.backlogFull || journal.diskFull) {
        reply.header('retry-after', '5')
        return reply.status(503).send({ ...body, ok: false })
      }
      return body
    })
  }

function journalState(journal: JournalStatus) {
  const b = journal.backlog()
  return { rows: b.rows, bytes: b.bytes, oldest_age_seconds: backlogAgeSeconds(b, Date.now()), disk_full: journal.diskFull ?? false }
}
