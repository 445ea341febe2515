// The fleet (GET /fleet): all of the key's user's agents together, against the fleet budget
// and its period budgets when there are some (POST /config/fleet), and the fleet-wide pause
// (POST /config/fleet/pause).

import { api } from './api.js'
import { budgetForm } from './budget-form.js'
import { act, h, int, notice, pauseBadge, pauseState, pct, spendBar, stats, time, usd } from './dom.js'
import { periodLines } from './periods.js'

const NEW_FLEET = { cost_threshold_usd: null, alert_at: [0.8], auto_resume: false, velocity_limit_usd: null, velocity_window_minutes: 5 }

export function fleetView() {
  let fleet = null

  const badge = h('span')
  const toggle = h('button', { type: 'button', class: 'pause', onclick: () => setPaused(!fleet?.is_paused) })
  const actionStatus = h('div', { class: 'action-status' })
  const overview = h('div', { class: 'overview' })
  const noBudget = h('div')
  const form = budgetForm({
    title: 'Fleet budget',
    save: (policy) => api.fleetConfig(policy),
    onSaved: () => view.refresh(),
    defaults: NEW_FLEET,
    fleet: true,
  })

  const el = h(
    'section',
    { class: 'fleet' },
    h('div', { class: 'heading' }, h('h1', {}, 'Fleet'), badge, toggle),
    h('p', { class: 'muted' }, 'Every agent of this key’s user, together.'),
    actionStatus,
    noBudget,
    overview,
    h('div', { class: 'panel narrow' }, form.el),
  )

  function setPaused(paused) {
    const done = paused ? 'Fleet paused: every agent is answered paused: true.' : 'Fleet resumed (agents paused on their own stay paused).'
    return act(toggle, actionStatus, async () => {
      await api.fleetPause(paused)
      await view.refresh()
    }, done)
  }

  function render(f) {
    fleet = f
    const budget = f.cost_threshold_usd
    badge.replaceChildren(pauseBadge(f.is_paused, f.paused_reason, f.paused_period))
    toggle.textContent = f.is_paused ? 'Resume fleet' : 'Pause fleet'
    noBudget.replaceChildren(
      budget === null ? notice('This fleet has no budget: each agent is held only by its own. Set one below to cap all of them together.', 'info') : '',
    )
    overview.replaceChildren(
      budget === null ? '' : h('div', { class: 'spend-line' }, h('span', { class: 'period-name' }, '24 h'), spendBar(f.total_cost_usd, budget, { alerted: f.alerts_reached.length > 0 }), h('span', { class: 'amount' }, `${usd(f.total_cost_usd)} of ${usd(budget)} in the last 24 h`)),
      ...periodLines(f.periods, { alertAt: f.config?.alert_at ?? [] }),
      stats([
        ['Spent (24 h)', usd(f.total_cost_usd)],
        ['Budget', budget === null ? 'none' : usd(budget)],
        ['Remaining', budget === null ? '—' : usd(f.remaining_usd)],
        ['Held for calls in flight', usd(f.held_usd)],
        ['LLM calls (24 h)', int(f.llm_calls)],
        ['Runs out at', budget === null ? '—' : f.projected_exhaustion_at ? time(f.projected_exhaustion_at) : 'not at this rate'],
        ['State', pauseState(f.is_paused, f.paused_reason, f.paused_period)],
        f.is_paused && ['Paused at', time(f.paused_at, { seconds: true })],
        f.override && ['Override', 'resumed by hand over budget'],
        ['Alerts reached', f.alerts_reached.length ? f.alerts_reached.map(pct).join(', ') : 'none'],
      ]),
    )
    form.fill(f.config ?? NEW_FLEET)
  }

  const view = {
    el,
    editing: () => form.editing(),
    async refresh() {
      render(await api.fleet())
    },
  }
  return view
}
