import type { FastifyPluginAsync } from 'fastify'
import type { Clock } from '../clock.ts'
import type { ExportService } from '../exports/service.ts'
import { exportQuery, exportRange } from '../schemas/export.ts'
import type { RouteLimits } from './limits.ts'
import { parse, principal } from './parse.ts'

/**
 * GET /export: the key's user's events of a range, as a file. The bytes pass through as the
 * client reads them; a client that goes away cancels the query (Fastify destroys the stream
 * when the response closes first). A failure after the first bytes cannot be a problem
 * answer any more: the connection is cut, so the client sees an error, never a short file
 * that looks whole. Counted with the reads.
 */
export const exportRoutes =
  (exports: ExportService, clock: Clock, limits: RouteLimits): FastifyPluginAsync =>
  async (app) => {
    app.get('/export', { config: { rateLimit: limits.reads } }, async (request, reply) => {
      const range = exportRange(parse(exportQuery, request.query, 'invalid_query'), clock.now())
      const { stream, contentType, filename } = await exports.open(principal(request).userId, range)
      return reply
        .type(contentType)
        .header('content-disposition', `attachment; filename="${filename}"`)
        .header('cache-control', 'no-store')
        .send(stream)
    })
  }
