import type { FastifyPluginAsync } from 'fastify'
import type { AgentService } from '../agents/service.ts'
import { agentParams, agentQuery, eventsQuery, hourlyQuery } from '../schemas/query.ts'
import type { RouteLimits } from './limits.ts'
import { parse, principal } from './parse.ts'

export const agentsRoutes =
  (agents: AgentService, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    const opts = { config: { rateLimit: limits.reads } }

    app.get('/agents', opts, async (request) => {
      parse(eventsQuery.pick({}), request.query, 'invalid_query')
      return { agents: await agents.list(principal(request).userId) }
    })

    app.get('/agents/events', opts, async (request) => {
      const { limit } = parse(eventsQuery, request.query, 'invalid_query')
      return { events: await agents.recentEvents(principal(request).userId, limit) }
    })

    app.get('/agents/:agent_id', opts, async (request) => {
      const { agent_id } = parse(agentParams, request.params, 'invalid_query')
      const page = parse(agentQuery, request.query, 'invalid_query')
      return agents.detail(principal(request).userId, agent_id, page)
    })

    app.get('/agents/:agent_id/hourly', opts, async (request) => {
      const { agent_id } = parse(agentParams, request.params, 'invalid_query')
      const { hours } = parse(hourlyQuery, request.query, 'invalid_query')
      return agents.hourly(principal(request).userId, agent_id, hours)
    })
  }
