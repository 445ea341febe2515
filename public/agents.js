// The agents of the last 24 h (GET /agents): spend against budget, pause state, flags. A
// fleet may list 10,000 agents: the whole list is fetched (the API has no paging of it), but
// only one page of rows is in the DOM, and filtering is a pass over precomputed keys.

import { api } from './api.js'
import { h, int, nano, pauseBadge, pct, spendBar, usd } from './dom.js'

export const PAGE_SIZE = 100

const STATES = [
  ['all', 'All agents'],
  ['paused', 'Paused'],
  ['running', 'Running'],
  ['ignoring', 'Ignoring their pause'],
  ['alerted', 'Past an alert level'],
]

export function agentsView() {
  let agents = []
  let keys = [] // lower-cased ids, in the order of `agents`
  let filter = ''
  let state = 'all'
  let page = 0

  const summary = h('p', { class: 'summary', 'aria-live': 'polite' })
  const search = h('input', {
    type: 'search',
    placeholder: 'Filter by agent id',
    'aria-label': 'Filter by agent id',
    autocomplete: 'off',
    spellcheck: 'false',
    oninput: () => {
      filter = search.value.trim().toLowerCase()
      page = 0
      render()
    },
  })
  const select = h(
    'select',
    {
      'aria-label': 'Show',
      onchange: () => {
        state = select.value
        page = 0
        render()
      },
    },
    STATES.map(([value, label]) => h('option', { value }, label)),
  )
  const tbody = h('tbody')
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' })
  const el = h(
    'section',
    { class: 'agents' },
    h('div', { class: 'heading' }, h('h1', {}, 'Agents'), h('span', { class: 'muted' }, 'active in the last 24 h, highest spend first')),
    summary,
    h('div', { class: 'toolbar' }, search, select),
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

  function matches(a, i) {
    if (filter && !keys[i].includes(filter)) return false
    switch (state) {
      case 'paused':
        return a.is_paused
      case 'running':
        return !a.is_paused
      case 'ignoring':
        return a.ignoring_pause
      case 'alerted':
        return a.alerts_reached.length > 0
      default:
        return true
    }
  }

  function render() {
    const shown = filter || state !== 'all' ? agents.filter(matches) : agents
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE))
    page = Math.min(page, pages - 1)
    const first = page * PAGE_SIZE
    const rows = shown.slice(first, first + PAGE_SIZE)
    tbody.replaceChildren(...(rows.length ? rows.map(row) : [h('tr', {}, h('td', { colspan: 6, class: 'empty' }, agents.length ? 'No agent matches.' : 'No agent sent events in the last 24 h.'))]))

    const paused = agents.filter((a) => a.is_paused).length
    const ignoring = agents.filter((a) => a.ignoring_pause).length
    const total = nano(agents.reduce((sum, a) => sum + a.total_cost_usd, 0))
    summary.replaceChildren(
      `${int(agents.length)} agents · ${int(paused)} paused`,
      ignoring ? ` · ${int(ignoring)} ignoring their pause` : '',
      ` · ${usd(total)} in the last 24 h`,
    )

    const range = shown.length ? `${int(first + 1)}–${int(first + rows.length)} of ${int(shown.length)}` : '0 of 0'
    pager.replaceChildren(
      h('button', { type: 'button', disabled: page === 0, onclick: () => go(page - 1) }, '← Previous'),
      h('span', { class: 'range' }, range),
      h('button', { type: 'button', disabled: page >= pages - 1, onclick: () => go(page + 1) }, 'Next →'),
    )
  }

  function go(p) {
    page = p
    render()
    el.scrollIntoView({ block: 'start' })
  }

  return {
    el,
    async refresh() {
      const { agents: list } = await api.agents()
      // The data is here: what follows is the page's own time, measured (it must stay fast at 10,000 agents).
      performance.clearMarks('agents:data')
      performance.clearMeasures('agents:render')
      performance.mark('agents:data')
      agents = list
      keys = list.map((a) => a.agent_id.toLowerCase())
      render()
      performance.measure('agents:render', 'agents:data')
    },
  }
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
    h('td', {}, pauseBadge(a.is_paused, a.paused_reason)),
    h(
      'td',
      { class: 'flags' },
      a.ignoring_pause ? h('span', { class: 'badge ignoring', title: 'it kept calling the model after its pause' }, 'ignoring pause') : null,
      a.alerts_reached.map((level) => h('span', { class: 'badge alert', title: `its spend reached ${pct(level)} of its budget` }, `≥ ${pct(level)}`)),
    ),
  )
}
