// The burnrate API as the dashboard calls it. The key the user pasted lives in this tab's
// sessionStorage only and travels as the x-api-key header: never in a URL, never in a cookie.

const KEY = 'burnrate.apiKey'

/** An answer other than 2xx: the status and the problem+json body (RFC 9457), when there is one. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail ?? `HTTP ${status}`)
    this.name = 'ApiError'
    this.status = status
    this.problem = problem
    /** [{field, message}] of a validation error. */
    this.errors = Array.isArray(problem?.errors) ? problem.errors : []
  }
}

export const session = {
  key: () => sessionStorage.getItem(KEY),
  signIn: (key) => sessionStorage.setItem(KEY, key),
  signOut: () => sessionStorage.removeItem(KEY),
}

let unauthorized = () => {}

/** Called with the server's reason when a key is refused (401): the key is forgotten first. */
export function onUnauthorized(fn) {
  unauthorized = fn
}

/** One call with the key; a 401 forgets the key first. The answer as fetch() gives it. */
async function send(method, path, body, accept = 'application/json') {
  const key = session.key()
  if (!key) {
    unauthorized(null)
    throw new ApiError(401, null)
  }
  const headers = { 'x-api-key': key, accept }
  if (body !== undefined) headers['content-type'] = 'application/json'
  // Relative to the page, so a proxy may serve burnrate under a sub-path.
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
  })
  if (res.ok) return res
  const data = await res.json().catch(() => null)
  if (res.status === 401) {
    session.signOut()
    unauthorized(data?.detail ?? 'the key was refused')
  }
  throw new ApiError(res.status, data)
}

async function request(method, path, body) {
  const res = await send(method, path, body)
  return res.json()
}

/** A query string of [name, value] pairs, a name repeated as often as it comes; undefined and null values left out. */
function queryOf(pairs) {
  const q = new URLSearchParams()
  for (const [name, value] of pairs) if (value !== undefined && value !== null) q.append(name, String(value))
  return q
}

const agentPath = (id) => `agents/${encodeURIComponent(id)}`

export const api = {
  /** One page of agents: {limit, cursor, sort, prefix, paused, ignoring_pause, alerted}; unset ones left out. */
  agents: (query = {}) => {
    const q = new URLSearchParams()
    for (const [name, value] of Object.entries(query)) if (value !== undefined && value !== null && value !== '') q.set(name, String(value))
    return request('GET', `agents?${q}`)
  },
  agent: (id, { limit, before } = {}) => {
    const q = new URLSearchParams()
    if (limit) q.set('limit', String(limit))
    if (before) q.set('before', before)
    return request('GET', `${agentPath(id)}?${q}`)
  },
  hourly: (id, hours = 24) => request('GET', `${agentPath(id)}/hourly?hours=${hours}`),
  fleet: () => request('GET', 'fleet'),
  pause: (id, isPaused) => request('POST', 'config/pause', { agent_id: id, is_paused: isPaused }),
  config: (id, policy) => request('POST', 'config', { agent_id: id, ...policy }),
  fleetPause: (isPaused) => request('POST', 'config/fleet/pause', { is_paused: isPaused }),
  fleetConfig: (policy) => request('POST', 'config/fleet', policy),
  /** GET /costs: `pairs` as [name, value], group_by and filters repeated as the API takes them. */
  costs: (pairs) => request('GET', `costs?${queryOf(pairs)}`),
  /**
   * The same query as CSV: the file's bytes, its name (Content-Disposition) and whether more
   * groups follow (x-next-cursor). Fetched with the key as a header, never put in a URL.
   */
  costsCsv: async (pairs) => {
    const res = await send('GET', `costs?${queryOf([...pairs, ['format', 'csv']])}`, undefined, 'text/csv')
    const name = /filename="([^"]+)"/.exec(res.headers.get('content-disposition') ?? '')?.[1] ?? 'costs.csv'
    return { blob: await res.blob(), name, more: res.headers.has('x-next-cursor') }
  },
  costDimensions: ({ from, to }) => request('GET', `costs/dimensions?${queryOf([['from', from], ['to', to]])}`),
  runs: (id, { limit, cursor } = {}) => request('GET', `${agentPath(id)}/runs?${queryOf([['limit', limit], ['cursor', cursor]])}`),
  run: (id, { limit, before } = {}) => request('GET', `runs/${encodeURIComponent(id)}?${queryOf([['limit', limit], ['before', before]])}`),
}
