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

async function request(method, path, body) {
  const key = session.key()
  if (!key) {
    unauthorized(null)
    throw new ApiError(401, null)
  }
  const headers = { 'x-api-key': key, accept: 'application/json' }
  if (body !== undefined) headers['content-type'] = 'application/json'
  // Relative to the page, so a proxy may serve burnrate under a sub-path.
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
  })
  const data = await res.json().catch(() => null)
  if (res.status === 401) {
    session.signOut()
    unauthorized(data?.detail ?? 'the key was refused')
  }
  if (!res.ok) throw new ApiError(res.status, data)
  return data
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
}
