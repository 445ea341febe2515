import type { FastifyPluginAsync } from 'fastify'
import type { AgentService } from '../agents/service.ts'
import { configBody, fleetConfigBody, fleetPauseBody, pauseBody } from '../schemas/config.ts'
import type { RouteLimits } from './limits.ts'
import { parse, principal } from './parse.ts'

export const configRoutes =
  (agents: AgentService, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    app.post('/config', { config: { rateLimit: limits.config } }, async (request) => {
      const body = parse(configBody, request.body, 'invalid_body')
      const { userId, keyId } = principal(request)
      await agents.upsertConfig(userId, body, keyId)
      return { ok: true }
    })

    app.post('/config/pause', { config: { rateLimit: limits.config } }, async (request) => {
      const body = parse(pauseBody, request.body, 'invalid_body')
      const { userId, keyId } = principal(request)
      const isPaused = await agents.setPaused(userId, body.agent_id, body.is_paused, keyId)
      return { ok: true, agent_id: body.agent_id, is_paused: isPaused }
    })

    app.post('/config/fleet', { config: { rateLimit: limits.config } }, async (request) => {
      const body = parse(fleetConfigBody, request.body, 'invalid_body')
      const { userId, keyId } = principal(request)
      await agents.upsertFleetConfig(userId, body, keyId)
      return { ok: true }
    })

    app.post('/config/fleet/pause', { config: { rateLimit: limits.config } }, async (request) => {
      const body = parse(fleetPauseBody, request.body, 'invalid_body')
      const { userId, keyId } = principal(request)
      return { ok: true, is_paused: await agents.setFleetPaused(userId, body.is_paused, keyId) }
    })
  }
