import type { ClickHouseClient } from '@clickhouse/client'
import type { FastifyPluginAsync } from 'fastify'
import { Problem } from '../errors.ts'
import type { HotState } from '../hot-state/types.ts'

/** For load balancers: no key. /healthz: the process answers. /readyz: its stores answer. */
export const healthRoutes =
  (clickhouse: ClickHouseClient, hotState: HotState): FastifyPluginAsync =>
  async (app) => {
    app.get('/healthz', async () => ({ ok: true }))

    app.get('/readyz', async () => {
      const [ch, hot] = await Promise.allSettled([clickhouse.ping(), hotState.ping()])
      const clickhouseUp = ch.status === 'fulfilled' && ch.value.success
      const hotUp = hot.status === 'fulfilled'
      if (!clickhouseUp || !hotUp) {
        const down = [clickhouseUp ? null : 'clickhouse', hotUp ? null : 'hot state'].filter(Boolean).join(' and ')
        throw new Problem('store_unavailable', `${down} not answering`, { retryAfter: 1 })
      }
      return { ok: true, clickhouse: 'up', hot_state: 'up' }
    })
  }
