// The burnrate dashboard: sign-in, hash routes, and a refresh every 10 s.
//   #/agents          the agents of the last 24 h
//   #/agents/<id>     one agent (the id percent-encoded)
//   #/runs/<id>       one run (the id percent-encoded)
//   #/costs           where the money went: cost by any dimension
//   #/fleet           the fleet budget and pause

import { agentView } from './agent.js'
import { agentsView } from './agents.js'
import { ApiError, onUnauthorized, session } from './api.js'
import { costsView } from './costs.js'
import { h, notice } from './dom.js'
import { fleetView } from './fleet.js'
import { runView } from './run.js'

const REFRESH_MS = 10_000

const main = document.getElementById('main')
const top = document.getElementById('top')
const updated = document.getElementById('updated')

let view = null
let timer = null

/** The id a hash names after `prefix`, percent-decoded; null when it names none. */
function idAfter(hash, prefix) {
  if (!hash.startsWith(prefix)) return null
  try {
    return decodeURIComponent(hash.slice(prefix.length)) || null
  } catch {
    return null
  }
}

function route() {
  const hash = location.hash || '#/agents'
  const agent = idAfter(hash, '#/agents/')
  if (agent) return { name: 'agents', make: () => agentView(agent) }
  const run = idAfter(hash, '#/runs/')
  if (run) return { name: 'agents', make: () => runView(run) }
  if (hash === '#/costs') return { name: 'costs', make: costsView }
  if (hash === '#/fleet') return { name: 'fleet', make: fleetView }
  return { name: 'agents', make: agentsView }
}

function show() {
  if (!session.key()) return signIn()
  const r = route()
  view?.dispose?.()
  view = r.make()
  top.hidden = false
  for (const a of top.querySelectorAll('[data-nav]')) a.toggleAttribute('aria-current', a.dataset.nav === r.name)
  main.replaceChildren(view.el)
  refresh({ force: true })
  clearInterval(timer)
  timer = setInterval(() => refresh(), REFRESH_MS)
}

/** Loads the current view's data; skipped while a form is being edited or the tab is hidden. */
async function refresh({ force = false } = {}) {
  if (!view) return
  if (!force && document.hidden) return
  if (!force && view.editing?.()) {
    updated.textContent = 'Refresh paused while you edit'
    return
  }
  const current = view
  // One refresh of a view at a time: a slow answer is not overtaken by the next tick.
  current.inflight ??= current
    .refresh()
    .then(() => {
      if (current !== view) return
      updated.replaceChildren('Updated ', h('time', { datetime: new Date().toISOString() }, new Date().toLocaleTimeString()))
      document.getElementById('refresh-error')?.remove()
    })
    .catch((err) => {
      if (current !== view || (err instanceof ApiError && err.status === 401)) return
      document.getElementById('refresh-error')?.remove()
      const message = notice(`Could not refresh: ${err.message}. Trying again in ${REFRESH_MS / 1000} s.`)
      message.id = 'refresh-error'
      main.prepend(message)
      if (!(err instanceof ApiError)) console.error(err)
    })
    .finally(() => {
      current.inflight = null
    })
  return current.inflight
}

function signIn(reason) {
  clearInterval(timer)
  view?.dispose?.()
  view = null
  top.hidden = true
  updated.textContent = ''
  // No name on the field: were the form ever submitted without this script, the key would
  // not be sent, let alone put in a URL.
  const key = h('input', { id: 'api-key', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true })
  const form = h(
    'form',
    {
      class: 'signin',
      method: 'post',
      action: '#',
      onsubmit: (event) => {
        event.preventDefault()
        const value = key.value.trim()
        if (!value) return
        session.signIn(value)
        show()
      },
    },
    h('h1', {}, 'burnrate'),
    h('label', { for: 'api-key' }, 'API key'),
    key,
    h('button', { type: 'submit' }, 'Sign in'),
    reason ? notice(`Signed out: ${reason}.`) : null,
    h(
      'p',
      { class: 'muted' },
      'Create a key with ',
      h('code', {}, 'burnrate keys create --user <name>'),
      '. It is kept in this tab only (session storage) and sent as the x-api-key header.',
    ),
  )
  main.replaceChildren(form)
  key.focus()
}

onUnauthorized((reason) => signIn(reason ?? undefined))
document.getElementById('sign-out').addEventListener('click', () => {
  session.signOut()
  signIn()
})
window.addEventListener('hashchange', show)
document.addEventListener('visibilitychange', () => {
  if (!document.hidden) refresh()
})
show()
