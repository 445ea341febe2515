import type { ClickHouseClient } from '@clickhouse/client'
import type { FastifyPluginAsync } from 'fastify'
import { Problem } from '../errors.ts'
import type { HotState } from '../hot-state/types.ts'
import { backlogAgeSeconds, type JournalBacklog, type JournalStatus } from '../journal/types.ts'

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
  ): FastifyPluginAsync =>
  async (app) => {
    app.get('/healthz', async () => ({ ok: true }))

    app.get('/readyz', async (_request, reply) => {
      const [ch, hot] = await Promise.allSettled([clickhouse.ping(), hotState.ping()])
      const clickhouseUp = ch.status === 'fulfilled' && ch.value.success
      const hotUp = hot.status === 'fulfilled'
      if (!hotUp) throw new Problem('store_unavailable', 'hot state not answering', { retryAfter: 1 })
      const body = { ok: true, clickhouse: clickhouseUp ? 'up' : 'down', hot_state: 'up', journal: { ...journalState(journal.backlog()), dead_letters: deadLetters() } }
      if (journal.backlogFull) {
        reply.header('retry-after', '5')
        return reply.status(503).send({ ...body, ok: false })
      }
      return body
    })
  }

function journalState(b: JournalBacklog) {
  return { rows: b.rows, bytes: b.bytes, oldest_age_seconds: backlogAgeSeconds(b, Date.now()) }
}
