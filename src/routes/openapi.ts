import fastifySwagger from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyPluginAsync } from 'fastify'
import { OPENAPI_DOCUMENT } from '../openapi.ts'

/** The reference page's routes, all under this prefix (public, as the document is). */
export const REFERENCE_PREFIX = '/reference'

/**
 * GET /openapi.json, the API's OpenAPI 3.1 document (src/openapi.ts), and a browsable
 * reference of it at /reference: Swagger UI from its package, no CDN, under a CSP that
 * allows its own scripts and styles only (staticCSP hashes its inline ones).
 */
export const openapiRoutes = (): FastifyPluginAsync => async (app) => {
  app.get('/openapi.json', async () => OPENAPI_DOCUMENT)
  await app.register(fastifySwagger, { mode: 'static', specification: { document: OPENAPI_DOCUMENT as never } })
  await app.register(fastifySwaggerUi, { routePrefix: REFERENCE_PREFIX, staticCSP: true, uiConfig: { docExpansion: 'list', deepLinking: true } })
}
