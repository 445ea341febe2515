import type { ClickHouseClient } from '@clickhouse/client'
import type { FastifyPluginAsync } from 'fastify'
import type { Clock } from '../clock.ts'
import { nanoToUsd } from '../money.ts'
import { costDimensionsQuery, costsQuery, dimensionName, encodeCostCursor, type CostsQuery } from '../schemas/costs.ts'
import { costsByDimension, dimensionKeys, type CostGroup } from '../storage/costs.ts'
import { csvRow } from './csv.ts'
import type { RouteLimits } from './limits.ts'
import { parse, principal } from './parse.ts'

/** GET /costs: where the money went, by any one or two dimensions (schemas/costs.ts); GET /costs/dimensions: the metadata keys to ask it for. */
export const costsRoutes =
  (clickhouse: ClickHouseClient, clock: Clock, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    app.get('/costs', { config: { rateLimit: limits.reads } }, async (request, reply) => {
      const q = parse(costsQuery(clock.now()), request.query, 'invalid_query')
      const { groups, more } = await costsByDimension(clickhouse, principal(request).userId, q)
      const names = q.groupBy.map(dimensionName)
      const last = groups.at(-1)
      const nextCursor = more && last ? encodeCostCursor({ fromMs: q.fromMs, toMs: q.toMs, groupBy: names, costNano: last.costNano, values: last.values }) : null
      if (q.format === 'csv') {
        if (nextCursor) reply.header('x-next-cursor', nextCursor)
        reply.header('content-disposition', `attachment; filename="${fileName(q)}"`)
        return reply.type('text/csv; charset=utf-8').send(csv(names, groups))
      }
      return {
        from: new Date(q.fromMs).toISOString(),
        to: new Date(q.toMs).toISOString(),
        group_by: names,
        groups: groups.map((g) => ({ group: Object.fromEntries(names.map((n, i) => [n, g.values[i]])), ...totals(g) })),
        next_cursor: nextCursor,
      }
    })

    app.get('/costs/dimensions', { config: { rateLimit: limits.reads } }, async (request) => {
      const q = parse(costDimensionsQuery(clock.now()), request.query, 'invalid_query')
      const keys = await dimensionKeys(clickhouse, principal(request).userId, q)
      return { from: new Date(q.fromMs).toISOString(), to: new Date(q.toMs).toISOString(), keys }
    })
  }

function totals(g: CostGroup) {
  return { cost_usd: nanoToUsd(Number(g.costNano)), llm_calls: g.llmCalls, input_tokens: g.inputTokens, output_tokens: g.outputTokens, events: g.events }
}

const TOTALS = ['cost_usd', 'llm_calls', 'input_tokens', 'output_tokens', 'events'] as const

/** The groups as CSV (RFC 4180): a header row of the dimensions and totals, then a row per group, an empty cell for a missing value. */
function csv(names: readonly string[], groups: readonly CostGroup[]): string {
  const lines = [csvRow([...names, ...TOTALS])]
  for (const g of groups) {
    const t = totals(g)
    lines.push(csvRow([...g.values, ...TOTALS.map((k) => String(t[k]))]))
  }
  return lines.join('')
}

/** costs_<from>_<to>.csv, the instants as UTC to the second (characters every file system takes). */
function fileName(q: CostsQuery): string {
  const at = (ms: number) => new Date(ms).toISOString().slice(0, 19).replaceAll(':', '').replaceAll('-', '')
  return `costs_${at(q.fromMs)}_${at(q.toMs)}.csv`
}
