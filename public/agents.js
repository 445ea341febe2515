// The agents of the last 24 h (GET /agents): spend against budget, pause state, flags (the
// period budget nearest its limit among them). A fleet may list 10,000 agents: the server
// filters and orders them and answers one page of 100 at a time; a refresh asks again for the
// page on screen only.

import { api } from './api.js'
import { h, int, pauseBadge, pct, spendBar, usd, nano } from './dom.js'
import { tightestPeriod } from './periods.js'

export const PAGE_SIZE = 100

// What the "Show" choice asks the API for.
const STATES = [
  ['all', 'All agents', {}],
  ['paused', 'Paused', { paused: true }],
  ['running', 'Running', { paused: false }],
  ['ignoring', 'Ignoring their pause', { ignoring_pause: true }],
  ['alerted', 'Past an alert level', { alerted: true }],
]

const SORTS = [
  ['cost', 'Highest spend first'],
  ['recent', 'Most recent first'],
  ['agent_id', 'By agent id'],
]

// Typing in the filter asks the server once the typing pauses.
const TYPING_MS = 250

export function agentsView() {
  let prefix = ''
  let state = 'all'
  let sort = 'cost'
  // The cursor of each page reached so far (the first has none), and the one on screen.
  let cursors = [null]
  let page = 0
  let typing = null
  // Answers of an older question (a page or a filter left since) are not shown.
  let asked = 0

  const summary = h('p', { class: 'summary', 'aria-live': 'polite' })
  const search = h('input', {
    type: 'search',
    placeholder: 'Agent id starts with…',
    'aria-label': 'Filter by agent id',
    autocomplete: 'off',
    spellcheck: 'false',
    oninput: () => {
      clearTimeout(typing)
      typing = setTimeout(() => {
        prefix = search.value.trim()
        restart()
      }, TYPING_MS)
    },
  })
  const select = choice('Show', STATES, (value) => {
    state = value
    restart()
  })
  const order = choice('Order', SORTS, (value) => {
    sort = value
    restart()
  })
  const tbody = h('tbody')
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' })
  const el = h(
    'section',
    { class: 'agents' },
    h('div', { class: 'heading' }, h('h1', {}, 'Agents'), h('span', { class: 'muted' }, 'active in the last 24 h')),
    summary,
    h('div', { class: 'toolbar' }, search, select, order),
    h(
      'table',
      { class: 'list' },
      h(
        'thead',
        {},
        h('tr', {}, h('th', { scope: 'col' }, 'Agent'), h('th', { scope: 'col', class: 'spend' }, 'Spend (24 h) of budget'), h('th', { scope: 'col', class: 'num' }, 'Remaining'), h('th', { scope: 'col', class: 'num' }, 'LLM calls'), h('th', { scope: 'col' }, 'State'), h('th', { scope: 'col' }, 'Flags')),
      ),
      tbody,
    ),
    pager,
  )

  async function load() {
    const question = ++asked
    const filters = STATES.find(([value]) => value === state)[2]
    const answer = await api.agents({ limit: PAGE_SIZE, cursor: cursors[page], sort, prefix, ...filters })
    if (question !== asked) return
    // The data is here: what follows is the page's own time, measured.
    performance.clearMarks('agents:data')
    performance.clearMeasures('agents:render')
    performance.mark('agents:data')
    render(answer)
    performance.measure('agents:render', 'agents:data')
  }

  function render({ agents, next_cursor: next, total, summary: all }) {
    cursors[page + 1] = next
    const filtered = prefix !== '' || state !== 'all'
    tbody.replaceChildren(...(agents.length ? agents.map(row) : [h('tr', {}, h('td', { colspan: 6, class: 'empty' }, filtered && all.agents ? 'No agent matches.' : 'No agent sent events in the last 24 h.'))]))
    summary.replaceChildren(
      `${int(all.agents)} agents · ${int(all.paused)} paused`,
      all.ignoring_pause ? ` · ${int(all.ignoring_pause)} ignoring their pause` : '',
      ` · ${usd(nano(all.total_cost_usd))} in the last 24 h`,
    )
    const first = page * PAGE_SIZE
    const range = agents.length ? `${int(first + 1)}–${int(first + agents.length)} of ${int(total)}` : `0 of ${int(total)}`
    pager.replaceChildren(
      h('button', { type: 'button', disabled: page === 0, onclick: () => go(page - 1) }, '← Previous'),
      h('span', { class: 'range' }, range),
      h('button', { type: 'button', disabled: !next, onclick: () => go(page + 1) }, 'Next →'),
    )
  }

  function go(p) {
    page = p
    load().catch(console.error)
    el.scrollIntoView({ block: 'start' })
  }

  function restart() {
    cursors = [null]
    page = 0
    load().catch(console.error)
  }

  return {
    el,
    refresh: load,
    dispose() {
      clearTimeout(typing)
    },
  }
}

/** A select named `label` of [value, text] options; `onchange` gets the value chosen. */
function choice(label, options, onchange) {
  const el = h('select', { 'aria-label': label, onchange: () => onchange(el.value) }, options.map(([value, text]) => h('option', { value }, text)))
  return el
}

function row(a) {
  const budget = a.cost_threshold_usd ?? nano(a.total_cost_usd + a.remaining_usd)
  const href = `#/agents/${encodeURIComponent(a.agent_id)}`
  return h(
    'tr',
    { dataset: { agentId: a.agent_id } },
    h('th', { scope: 'row', class: 'id' }, h('a', { href, title: a.agent_id }, a.agent_id)),
    h(
      'td',
      { class: 'spend' },
      spendBar(a.total_cost_usd, budget, { alerted: a.alerts_reached.length > 0 }),
      h('span', { class: 'amount' }, `${usd(a.total_cost_usd)} of ${usd(budget)}`),
    ),
    h('td', { class: 'num' }, usd(a.remaining_usd)),
    h('td', { class: 'num' }, int(a.llm_calls)),
    h('td', {}, pauseBadge(a.is_paused, a.paused_reason, a.paused_period)),
    h(
      'td',
      { class: 'flags' },
      tightestPeriod(a.periods),
      a.ignoring_pause ? h('span', { class: 'badge ignoring', title: 'it kept calling the model after its pause' }, 'ignoring pause') : null,
      a.alerts_reached.map((level) => h('span', { class: 'badge alert', title: `its spend reached ${pct(level)} of its budget` }, `≥ ${pct(level)}`)),
    ),
  )
}
