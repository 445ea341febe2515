import type { FastifyPluginAsync } from 'fastify'
import type { RunService } from '../runs/service.ts'
import { agentParams, agentQuery } from '../schemas/query.ts'
import { runParams, runsQuery } from '../schemas/runs.ts'
import type { RouteLimits } from './limits.ts'
import { parse, principal } from './parse.ts'

export const runsRoutes =
  (runs: RunService, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    const opts = { config: { rateLimit: limits.reads } }

    app.get('/agents/:agent_id/runs', opts, async (request) => {
      const { agent_id } = parse(agentParams, request.params, 'invalid_query')
      const q = parse(runsQuery, request.query, 'invalid_query')
      return runs.list(principal(request).userId, agent_id, q)
    })

    // Events paged as GET /agents/{agent_id}'s are: limit (default 100) and before.
    app.get('/runs/:run_id', opts, async (request) => {
      const { run_id } = parse(runParams, request.params, 'invalid_query')
      const page = parse(agentQuery, request.query, 'invalid_query')
      return runs.show(principal(request).userId, run_id, page)
    })
  }
