import { createRequire } from 'node:module'
import { dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import fastifyStatic from '@fastify/static'
import type { FastifyError, FastifyPluginAsync } from 'fastify'

/**
 * The built-in dashboard: static files only, no build step. `/` is the page,
 * `/assets/*` its modules and styles (public/) and uPlot's two dist files, from the package
 * itself (no CDN: the page works offline). They need no API key; the data calls the page
 * makes do, with the key the user pasted.
 */
export const DASHBOARD_ROUTES = ['/', '/assets/*'] as const

const PUBLIC_DIR = fileURLToPath(new URL('../../public/', import.meta.url))
const UPLOT_DIR = dirname(createRequire(import.meta.url).resolve('uplot/dist/uPlot.esm.js'))
/** Of uPlot's dist, only what the page loads. */
const UPLOT_FILES = new Set(['/uPlot.esm.js', '/uPlot.min.css'])

/**
 * No inline script or style anywhere: scripts, styles and fetches from this origin only.
 * uPlot sizes its canvas through the CSSOM (element.style), which style-src does not govern.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ')

const HEADERS = {
  'content-security-policy': DASHBOARD_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  // The files are not fingerprinted: the browser revalidates each (ETag, 304), so an
  // upgrade of burnrate never leaves an old module beside a new one.
  'cache-control': 'no-cache',
}

export const dashboardRoutes = (): FastifyPluginAsync => async (app) => {
  // Encapsulated: these headers go on the dashboard's answers only, not on the API's.
  app.addHook('onRequest', async (_request, reply) => {
    reply.headers(HEADERS)
  })

  // @fastify/send answers a directory, a dotfile or a path it will not serve with a 403, and
  // a failed If-Match with a 412, as http-errors: for the page's files, the first is "no such
  // file" (404, as any unknown path), the others keep their status. Anything else goes on
  // to the app's handler.
  app.setErrorHandler((err: FastifyError, _request, reply) => {
    if (err.statusCode === 403) return reply.callNotFound()
    if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500) return reply.code(err.statusCode).send()
    throw err
  })

  await app.register(fastifyStatic, {
    root: [PUBLIC_DIR, UPLOT_DIR],
    prefix: '/assets/',
    index: false,
    dotfiles: 'ignore',
    cacheControl: false,
    // Whole files only: the largest is uPlot's, 145 KB.
    acceptRanges: false,
    allowedPath: (pathname, root) => root !== UPLOT_DIR || UPLOT_FILES.has(pathname),
  })

  app.get('/', (_request, reply) => reply.sendFile('index.html', PUBLIC_DIR))
}
