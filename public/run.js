// One run (GET /runs/{run_id}): what one task cost, whichever of the user's agents sent its
// events (a run an orchestrator shared with its helpers is one run), by agent and by model,
// and its events, a page at a time (next_before).

import { EVENTS_PAGE, eventRow, runStatus } from './agent.js'
import { api, ApiError } from './api.js'
import { duration, h, int, notice, stats, time, usd } from './dom.js'

export function runView(runId) {
  // The cursors of the event pages shown before this one: [] is the newest page.
  const cursors = []

  const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '#/agents' }, '← Agents'))
  const badge = h('span')
  const missing = h('div')
  const overview = h('div', { class: 'overview' })
  const agents = h('tbody')
  const models = h('tbody')
  const events = h('tbody')
  const pager = h('nav', { class: 'pager', 'aria-label': 'Event pages' })
  // Column headings, those of numbers (`numeric`, by name) aligned as their figures are.
  const columns = (names, numeric) => h('thead', {}, h('tr', {}, ...names.map((c) => h('th', { scope: 'col', class: numeric.includes(c) ? 'num' : null }, c))))

  const el = h(
    'section',
    { class: 'run' },
    crumbs,
    h('div', { class: 'heading' }, h('span', { class: 'muted' }, 'Run'), h('h1', { class: 'run-id' }, runId), badge),
    missing,
    overview,
    h(
      'div',
      { class: 'columns' },
      h('div', { class: 'panel' }, h('h2', {}, 'By agent'), h('table', { class: 'list by-agent' }, columns(['Agent', 'Status', 'Duration', 'Cost', 'LLM calls', 'Events'], ['Duration', 'Cost', 'LLM calls', 'Events']), agents)),
      h('div', { class: 'panel' }, h('h2', {}, 'Cost by model'), h('table', { class: 'list models' }, columns(['Model', 'Cost', 'LLM calls', 'Input tokens', 'Output tokens'], ['Cost', 'LLM calls', 'Input tokens', 'Output tokens']), models)),
    ),
    h(
      'div',
      { class: 'panel' },
      h('h2', {}, 'Events, newest first'),
      h('table', { class: 'list events' }, columns(['Time', 'Agent', 'Type', 'Model or tool', 'Input', 'Output', 'Cost', 'Event id'], ['Input', 'Output', 'Cost']), events),
      pager,
    ),
  )

  const agentLink = (id, text = id) => h('a', { href: `#/agents/${encodeURIComponent(id)}`, title: id }, text)

  function render(r) {
    missing.replaceChildren()
    crumbs.replaceChildren(h('a', { href: '#/agents' }, '← Agents'), ...r.agent_ids.flatMap((id) => [' · ', agentLink(id, `← ${id}`)]))
    badge.replaceChildren(runStatus(r.status, r.budget_stopped_at))
    overview.replaceChildren(
      stats([
        ['Cost', usd(r.cost_usd)],
        ['Duration', duration(r.duration_ms)],
        ['Started', time(r.started_at, { seconds: true })],
        ['Ended', r.ended_at ? time(r.ended_at, { seconds: true }) : h('span', {}, 'not yet; last event ', time(r.last_event_at, { seconds: true }))],
        ['LLM calls', int(r.llm_calls)],
        ['Tool calls', int(r.tool_calls)],
        ['Events', int(r.event_count)],
        ['Models', r.models.length ? r.models.join(', ') : '—'],
        [r.agent_ids.length === 1 ? 'Agent' : 'Agents', r.agent_ids.flatMap((id, i) => [i ? ', ' : '', agentLink(id)])],
      ]),
    )
    agents.replaceChildren(
      ...r.by_agent.map((a) =>
        h(
          'tr',
          {},
          h('th', { scope: 'row', class: 'id' }, agentLink(a.agent_id)),
          h('td', {}, runStatus(a.status, a.budget_stopped_at)),
          h('td', { class: 'num' }, duration(a.duration_ms)),
          h('td', { class: 'num' }, usd(a.cost_usd)),
          h('td', { class: 'num' }, int(a.llm_calls)),
          h('td', { class: 'num' }, int(a.event_count)),
        ),
      ),
    )
    models.replaceChildren(
      ...(r.cost_by_model.length
        ? r.cost_by_model.map((m) => h('tr', {}, h('td', {}, m.model), h('td', { class: 'num' }, usd(m.cost_usd)), h('td', { class: 'num' }, int(m.llm_calls)), h('td', { class: 'num' }, int(m.input_tokens)), h('td', { class: 'num' }, int(m.output_tokens))))
        : [h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No LLM calls in this run.'))]),
    )
    events.replaceChildren(...(r.events.length ? r.events.map((e) => eventRow(e, { agent: true })) : [h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No events on this page.'))]))
    pager.replaceChildren(
      h('button', { type: 'button', disabled: cursors.length === 0, onclick: () => page(() => cursors.pop()) }, '← Newer'),
      h('span', { class: 'range' }, `page ${cursors.length + 1}`),
      h('button', { type: 'button', disabled: !r.next_before, onclick: () => page(() => cursors.push(r.next_before)) }, 'Older →'),
    )
  }

  async function page(move) {
    move()
    await view.refresh()
  }

  const view = {
    el,
    async refresh() {
      try {
        render(await api.run(runId, { limit: EVENTS_PAGE, before: cursors.at(-1) }))
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 404) throw err
        missing.replaceChildren(notice('No such run for this key: none of its events names it.'))
      }
    },
  }
  return view
}
