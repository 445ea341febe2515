// One agent (GET /agents/{id} and its hourly buckets): totals, period budgets and pause state,
// pause and resume (POST /config/pause), its budget (POST /config), cost by model, its runs
// (GET /agents/{id}/runs, a page at a time: next_cursor), each opening its own page, and its
// events of the last 24 h, a page at a time (next_before).

import { api, ApiError } from './api.js'
import { budgetForm } from './budget-form.js'
import { hourlyChart } from './chart.js'
import { act, duration, h, int, nano, notice, pauseBadge, pauseState, pct, spendBar, stats, time, usd } from './dom.js'
import { periodLines } from './periods.js'

export const EVENTS_PAGE = 50
export const RUNS_PAGE = 10

export function agentView(agentId) {
  // The cursors of the pages shown before this one: [] is the newest page.
  const cursors = []
  const runCursors = []
  let detail = null

  const title = h('h1', { class: 'agent-id' }, agentId)
  const badge = h('span')
  const toggle = h('button', { type: 'button', class: 'pause', onclick: () => setPaused(!ownPause()) })
  const actionStatus = h('div', { class: 'action-status' })
  const overview = h('div', { class: 'overview' })
  const chart = hourlyChart()
  const models = h('tbody')
  const events = h('tbody')
  const pager = h('nav', { class: 'pager', 'aria-label': 'Event pages' })
  const runs = h('tbody')
  const runsStatus = h('div')
  const runsPager = h('nav', { class: 'pager', 'aria-label': 'Run pages' })
  const form = budgetForm({
    title: 'Budget',
    save: (policy) => api.config(agentId, policy),
    onSaved: () => view.refresh(),
  })
  const missing = h('div')

  const el = h(
    'section',
    { class: 'agent' },
    h('p', { class: 'crumbs' }, h('a', { href: '#/agents' }, '← Agents')),
    h('div', { class: 'heading' }, title, badge, toggle),
    actionStatus,
    missing,
    overview,
    h('div', { class: 'panel' }, h('h2', {}, 'Cost per hour (UTC), last 24 h'), chart.el),
    h(
      'div',
      { class: 'panel' },
      h('h2', {}, 'Runs, newest first'),
      runsStatus,
      h(
        'table',
        { class: 'list runs' },
        h('thead', {}, h('tr', {}, ...['Run', 'Status', 'Started', 'Duration', 'Cost', 'LLM calls', 'Models'].map((c, i) => h('th', { scope: 'col', class: i >= 3 && i <= 5 ? 'num' : null }, c)))),
        runs,
      ),
      runsPager,
    ),
    h(
      'div',
      { class: 'columns' },
      h(
        'div',
        { class: 'panel' },
        h('h2', {}, 'Cost by model, last 24 h'),
        h(
          'table',
          { class: 'list models' },
          h('thead', {}, h('tr', {}, ...['Model', 'Cost', 'LLM calls', 'Input tokens', 'Output tokens'].map((c, i) => h('th', { scope: 'col', class: i ? 'num' : null }, c)))),
          models,
        ),
      ),
      h('div', { class: 'panel' }, form.el),
    ),
    h(
      'div',
      { class: 'panel' },
      h('h2', {}, 'Events, newest first'),
      h(
        'table',
        { class: 'list events' },
        h('thead', {}, h('tr', {}, ...['Time', 'Type', 'Model or tool', 'Input', 'Output', 'Cost', 'Event id'].map((c, i) => h('th', { scope: 'col', class: i >= 3 && i <= 5 ? 'num' : null }, c)))),
        events,
      ),
      pager,
    ),
  )

  // Paused by its own state: a pause of its fleet shows too, but is resumed on the fleet page.
  const ownPause = () => Boolean(detail?.is_paused && !String(detail.paused_reason).startsWith('fleet_'))

  function setPaused(paused) {
    const done = paused ? 'Paused: its next event is answered paused: true.' : 'Resumed.'
    return act(toggle, actionStatus, async () => {
      await api.pause(agentId, paused)
      await view.refresh()
    }, done)
  }

  function render(d) {
    detail = d
    missing.replaceChildren()
    badge.replaceChildren(pauseBadge(d.is_paused, d.paused_reason, d.paused_period))
    toggle.textContent = ownPause() ? 'Resume' : 'Pause'
    toggle.hidden = false
    const budget = d.config?.cost_threshold_usd ?? nano(d.total_cost_usd + d.remaining_usd)
    overview.replaceChildren(
      h('div', { class: 'spend-line' }, h('span', { class: 'period-name' }, '24 h'), spendBar(d.total_cost_usd, budget, { alerted: d.alerts_reached.length > 0 }), h('span', { class: 'amount' }, `${usd(d.total_cost_usd)} of ${usd(budget)} in the last 24 h`)),
      ...periodLines(d.periods, { alertAt: d.config?.alert_at ?? [] }),
      stats([
        ['Spent (24 h)', usd(d.total_cost_usd)],
        ['Budget', d.config ? usd(budget) : `${usd(budget)} (default)`],
        ['Remaining', usd(d.remaining_usd)],
        ['Held for calls in flight', usd(d.held_usd)],
        ['LLM calls (24 h)', int(d.llm_calls)],
        ['Runs out at', d.projected_exhaustion_at ? time(d.projected_exhaustion_at) : 'not at this rate'],
        ['State', pauseState(d.is_paused, d.paused_reason, d.paused_period)],
        d.is_paused && ['Paused at', time(d.paused_at, { seconds: true })],
        ['Alerts reached', d.alerts_reached.length ? d.alerts_reached.map(pct).join(', ') : 'none'],
        d.ignoring_pause && ['Ignoring its pause', h('span', { class: 'badge ignoring' }, `${int(d.ignored_calls)} calls, ${usd(d.ignored_usd)} after the pause`)],
        d.config?.velocity_limit_usd && ['Velocity limit', `${usd(d.config.velocity_limit_usd)} per ${d.config.velocity_window_minutes} min`],
        d.config?.run_budget_usd && ['Run budget', `${usd(d.config.run_budget_usd)} per run`],
      ]),
    )
    form.fill(d.config)
    models.replaceChildren(
      ...(d.cost_by_model.length
        ? d.cost_by_model.map((m) => h('tr', {}, h('td', {}, m.model), h('td', { class: 'num' }, usd(m.cost_usd)), h('td', { class: 'num' }, int(m.llm_calls)), h('td', { class: 'num' }, int(m.input_tokens)), h('td', { class: 'num' }, int(m.output_tokens))))
        : [h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No LLM calls in the last 24 h.'))]),
    )
    events.replaceChildren(
      ...(d.events.length ? d.events.map(eventRow) : [h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No events on this page.'))]),
    )
    const pageNo = cursors.length + 1
    pager.replaceChildren(
      h('button', { type: 'button', disabled: cursors.length === 0, onclick: () => page(() => cursors.pop()) }, '← Newer'),
      h('span', { class: 'range' }, `page ${pageNo}`),
      h('button', { type: 'button', disabled: !d.next_before, onclick: () => page(() => cursors.push(d.next_before)) }, 'Older →'),
    )
  }

  /** A page of runs, or why there is none (the runs are read apart: the rest of the page does not wait on them). */
  function renderRuns(r) {
    if (r instanceof Error) {
      runsStatus.replaceChildren(notice(`Runs not shown: ${r.message}`))
      return
    }
    runsStatus.replaceChildren()
    runs.replaceChildren(...(r.runs.length ? r.runs.map(runRow) : [h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No runs on this page: its events name none.'))]))
    runsPager.replaceChildren(
      h('button', { type: 'button', disabled: runCursors.length === 0, onclick: () => page(() => runCursors.pop()) }, '← Later runs'),
      h('span', { class: 'range' }, `page ${runCursors.length + 1}`),
      h('button', { type: 'button', disabled: !r.next_cursor, onclick: () => page(() => runCursors.push(r.next_cursor)) }, 'Earlier runs →'),
    )
  }

  async function page(move) {
    move()
    await view.refresh()
  }

  const view = {
    el,
    editing: () => form.editing(),
    async refresh() {
      try {
        const [d, hourly, runPage] = await Promise.all([
          api.agent(agentId, { limit: EVENTS_PAGE, before: cursors.at(-1) }),
          api.hourly(agentId, 24),
          api.runs(agentId, { limit: RUNS_PAGE, cursor: runCursors.at(-1) }).catch((err) => err),
        ])
        render(d)
        chart.update(hourly.buckets)
        renderRuns(runPage)
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 404) throw err
        toggle.hidden = true
        missing.replaceChildren(notice('No such agent for this key: it has sent no event and has no config.'))
      }
    },
    dispose: () => chart.dispose(),
  }
  return view
}

/** A run of the agent: its link opens the run's page, as a click anywhere on its row does. */
function runRow(r) {
  const href = `#/runs/${encodeURIComponent(r.run_id)}`
  return h(
    'tr',
    {
      class: 'opens',
      dataset: { runId: r.run_id },
      onclick: (event) => {
        if (!event.target.closest('a')) location.hash = href
      },
    },
    h('th', { scope: 'row', class: 'id' }, h('a', { href, title: r.run_id }, r.run_id)),
    h('td', {}, runStatus(r.status, r.budget_stopped_at)),
    h('td', {}, time(r.started_at, { seconds: true })),
    h('td', { class: 'num' }, duration(r.duration_ms)),
    h('td', { class: 'num' }, usd(r.cost_usd)),
    h('td', { class: 'num' }, int(r.llm_calls)),
    h('td', {}, r.models.length ? r.models.join(', ') : '—'),
  )
}

const RUN_STATES = {
  open: 'no agent_end yet, and its last event is recent',
  ended: 'its agent_end arrived',
  abandoned: 'no agent_end, and no event for RUN_ABANDONED_AFTER (24 h by default)',
}

/** A run's status as a badge: open, ended or abandoned; and another when its run budget stopped it (`stoppedAt`, ISO). */
export function runStatus(status, stoppedAt = null) {
  const badge = h('span', { class: `badge run-${status}`, title: RUN_STATES[status] ?? '' }, status)
  if (!stoppedAt) return badge
  return h('span', {}, badge, h('span', { class: 'badge paused', title: `stopped by its run budget at ${stoppedAt}` }, 'over run budget'))
}

/** An event as a row; `agent`: with its agent's id (a run's events may come from several). */
export function eventRow(e, { agent = false } = {}) {
  const what = e.event_type === 'tool_call' ? e.tool_name : e.model
  return h(
    'tr',
    {},
    h('td', {}, time(e.timestamp, { seconds: true })),
    agent ? h('td', { class: 'id' }, h('a', { href: `#/agents/${encodeURIComponent(e.agent_id)}`, title: e.agent_id }, e.agent_id)) : null,
    h('td', {}, e.event_type),
    h('td', {}, what ?? '—', e.price_fallback ? h('span', { class: 'badge alert', title: 'priced as the default model: its price is unknown' }, 'fallback price') : null),
    h('td', { class: 'num' }, int(e.input_tokens)),
    h('td', { class: 'num' }, int(e.output_tokens)),
    h('td', { class: 'num' }, usd(e.cost_usd)),
    h('td', { class: 'mono', title: e.event_id }, String(e.event_id).slice(0, 8)),
  )
}
