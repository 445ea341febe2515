// The budget form of an agent (POST /config) or of the fleet (POST /config/fleet): the daily
// budget, alerts, velocity limit, an agent's run budget and period budgets. The server judges every value: what it
// refuses comes back as problem+json, and each of its `errors[]` is shown next to the field it
// names.

import { ApiError } from './api.js'
import { h, notice, numeric } from './dom.js'
import { periodBudgetsEditor } from './period-budgets.js'

const FIELDS = [
  { name: 'cost_threshold_usd', label: 'Daily budget (USD)', hint: 'over a rolling 24 h', mode: 'decimal' },
  { name: 'alert_at', label: 'Alert at', hint: 'fractions of the budget, e.g. 0.5, 0.8; empty: no alerts', mode: 'text' },
  { name: 'velocity_limit_usd', label: 'Velocity limit (USD)', hint: 'empty: none', mode: 'decimal' },
  { name: 'velocity_window_minutes', label: 'Velocity window (minutes)', hint: '1 to 60', mode: 'numeric' },
  { name: 'run_budget_usd', label: 'Run budget (USD)', hint: 'what one run may cost; empty: no limit', mode: 'decimal', agentOnly: true },
]

/** The defaults of a new config (docs/api.md, POST /config). */
const DEFAULTS = { cost_threshold_usd: 10, alert_at: [0.8], auto_resume: false, velocity_limit_usd: null, velocity_window_minutes: 5, period_budgets: [], run_budget_usd: null }

/**
 * A form that edits a budget. `save(policy)` posts it; `onSaved()` runs after the server
 * took it. fill(config) sets the fields from the server, unless the user is editing them.
 * `fleet`: a fleet's form, without an agent's own fields (its run budget).
 */
export function budgetForm({ title, save, onSaved, defaults = DEFAULTS, fleet = false }) {
  const inputs = {}
  const errors = {}
  const rows = FIELDS.filter((f) => !(fleet && f.agentOnly)).map((f) => {
    const id = `budget-${f.name}`
    inputs[f.name] = h('input', { id, name: f.name, type: 'text', inputmode: f.mode, autocomplete: 'off', spellcheck: 'false', 'aria-describedby': `${id}-error ${id}-hint` })
    errors[f.name] = h('span', { class: 'field-error', id: `${id}-error`, role: 'alert' })
    return h('div', { class: 'field' }, h('label', { for: id }, f.label), inputs[f.name], h('small', { id: `${id}-hint` }, f.hint), errors[f.name])
  })
  inputs.auto_resume = h('input', { id: 'budget-auto_resume', name: 'auto_resume', type: 'checkbox' })
  errors.auto_resume = h('span', { class: 'field-error', role: 'alert' })
  const periods = periodBudgetsEditor({
    onChange: () => {
      dirty = true
    },
  })
  const status = h('div', { class: 'form-status' })
  const submit = h('button', { type: 'submit' }, 'Save budget')
  const form = h(
    'form',
    { class: 'budget-form', novalidate: true, method: 'post', action: '#', 'aria-label': title },
    h('h2', {}, title),
    rows,
    h('div', { class: 'field check' }, h('label', { for: 'budget-auto_resume' }, inputs.auto_resume, ' Resume on its own once back under budget'), errors.auto_resume),
    periods.el,
    h('div', { class: 'actions' }, submit, h('button', { type: 'button', class: 'secondary', onclick: () => discard() }, 'Discard changes')),
    status,
  )

  let dirty = false
  let last = defaults
  form.addEventListener('input', () => {
    dirty = true
  })
  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    clearErrors()
    submit.disabled = true
    try {
      await save(read())
      dirty = false
      status.replaceChildren(notice('Saved.', 'ok'))
      await onSaved?.()
    } catch (err) {
      if (err instanceof ApiError) showErrors(err)
      else status.replaceChildren(notice(`Not saved: ${err.message}`))
    } finally {
      submit.disabled = false
    }
  })

  function read() {
    const policy = { auto_resume: inputs.auto_resume.checked }
    const threshold = inputs.cost_threshold_usd.value.trim()
    if (threshold !== '') policy.cost_threshold_usd = numeric(threshold)
    const levels = inputs.alert_at.value.trim()
    policy.alert_at = levels === '' ? [] : levels.split(/[\s,;]+/).map(numeric)
    const velocity = inputs.velocity_limit_usd.value.trim()
    policy.velocity_limit_usd = velocity === '' ? null : numeric(velocity)
    const minutes = inputs.velocity_window_minutes.value.trim()
    if (minutes !== '') policy.velocity_window_minutes = numeric(minutes)
    if (!fleet) {
      const run = inputs.run_budget_usd.value.trim()
      policy.run_budget_usd = run === '' ? null : numeric(run)
    }
    policy.period_budgets = periods.read()
    return policy
  }

  function showErrors(err) {
    const unplaced = []
    for (const e of err.errors) {
      const [name, index, ...rest] = String(e.field).split('.')
      const target = name === 'period_budgets' ? periods.errorFor(index, rest) : errors[name]
      if (target) target.textContent = `${e.field}: ${e.message}`
      else unplaced.push(`${e.field}: ${e.message}`)
    }
    const detail = err.errors.length === 0 ? err.message : unplaced.join('; ')
    status.replaceChildren(notice(detail ? `Not saved: ${detail}` : 'Not saved: see the fields above.'))
  }

  function clearErrors() {
    for (const el of Object.values(errors)) el.textContent = ''
    periods.clearErrors()
    status.replaceChildren()
  }

  function discard() {
    dirty = false
    clearErrors()
    write(last)
  }

  function write(config) {
    inputs.cost_threshold_usd.value = config.cost_threshold_usd ?? ''
    inputs.alert_at.value = (config.alert_at ?? []).join(', ')
    inputs.velocity_limit_usd.value = config.velocity_limit_usd ?? ''
    inputs.velocity_window_minutes.value = config.velocity_window_minutes ?? ''
    if (!fleet) inputs.run_budget_usd.value = config.run_budget_usd ?? ''
    inputs.auto_resume.checked = Boolean(config.auto_resume)
    periods.write(config.period_budgets ?? [])
  }

  write(defaults)
  return {
    el: form,
    /** True while the user has changes not yet saved (or discarded). */
    editing: () => dirty,
    fill(config) {
      last = config ?? defaults
      if (!dirty) write(last)
    },
  }
}
