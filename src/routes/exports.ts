import type { FastifyPluginAsync } from 'fastify'
import type { Clock } from '../clock.ts'
import type { ExportService } from '../exports/service.ts'
import { exportQuery, exportRange } from '../schemas/export.ts'
import type { RouteLimits } from './limits.ts'
import { parse, principal } from './parse.ts'

/**
 * GET /export: the key's user's events of a range, as a file. The bytes pass through as the
 * client reads them; a client that goes away cancels the query (Fastify destroys the stream
 * when the response closes first), and so does one that takes nothing for `stallMs`: its
 * connection is cut, or a few clients that stop reading would hold every export slot. A
 * failure after the first bytes cannot be a problem answer any more: the connection is cut,
 * so the client sees an error, never a short file that looks whole. Counted with the reads.
 */
export const exportRoutes =
  (exports: ExportService, clock: Clock, limits: RouteLimits, stallMs: number): FastifyPluginAsync =>
  async (app) => {
    app.get('/export', { config: { rateLimit: limits.reads } }, async (request, reply) => {
      const range = exportRange(parse(exportQuery, request.query, 'invalid_query'), clock.now())
      const { stream, contentType, filename } = await exports.open(principal(request).userId, range)
      // The socket's inactivity timeout: no byte taken by the client for stallMs. Cleared once
      // the export is over, for what the connection serves next (an injected request's
      // socket has no timeout to clear).
      const socket = request.raw.socket as Partial<Pick<typeof request.raw.socket, 'setTimeout'>> | null
      reply.raw.setTimeout(stallMs, () => reply.raw.destroy())
      stream.once('close', () => socket?.setTimeout?.(0))
      return reply
        .type(contentType)
        .header('content-disposition', `attachment; filename="${filename}"`)
        .header('cache-control', 'no-store')
        .send(stream)
    })
  }
