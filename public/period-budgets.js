// The period budgets of the budget form (`period_budgets` of POST /config and POST
// /config/fleet): one row each, a calendar period (a day, week or month from local midnight in
// a time zone) or a rolling window of days, added and removed here and sent as the whole list.
// The server judges them as it judges the rest of the form.

import { h, numeric } from './dom.js'

/** This browser's zone: a new calendar budget's, and what an emptied zone field stands for. */
const BROWSER_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'

const PERIODS = [
  ['day', 'Day'],
  ['week', 'Week'],
  ['month', 'Month'],
]
const WEEK_STARTS = [
  ['monday', 'Monday'],
  ['sunday', 'Sunday'],
]

/**
 * The editor of a list of period budgets. `onChange()` runs when a row is added or removed
 * (typing in a row is an `input` event the form sees itself).
 */
export function periodBudgetsEditor({ onChange }) {
  const list = h('div', { class: 'period-budgets' })
  const error = h('span', { class: 'field-error', id: 'budget-period_budgets-error', role: 'alert' })
  let rows = []
  let serial = 0
  // The budgets the rows were last built from: a refresh that brings the same ones leaves the
  // rows (and the focus in them) alone.
  let written = null

  const el = h(
    'fieldset',
    { class: 'periods', 'aria-describedby': 'budget-period_budgets-hint budget-period_budgets-error' },
    h('legend', {}, 'Period budgets'),
    h('small', { id: 'budget-period_budgets-hint' }, 'beside the 24 h budget: a calendar day, week or month in a time zone, or a rolling window of days; up to four, one per period'),
    list,
    error,
    h(
      'div',
      { class: 'actions' },
      h('button', { type: 'button', class: 'secondary', onclick: () => added({ period: 'month', time_zone: BROWSER_ZONE }) }, 'Add calendar period'),
      h('button', { type: 'button', class: 'secondary', onclick: () => added({ window_days: 30 }) }, 'Add rolling window'),
    ),
    zoneNames(),
  )

  el.addEventListener('input', () => {
    written = null
  })

  function added(budget) {
    written = null
    rows.push(budgetRow(budget, `budget-period-${++serial}`, remove))
    list.replaceChildren(...rows.map((r) => r.el))
    rows.at(-1).focus()
    onChange()
  }

  function remove(row) {
    written = null
    rows = rows.filter((r) => r !== row)
    list.replaceChildren(...rows.map((r) => r.el))
    onChange()
  }

  return {
    el,
    /** The list as POST /config takes it. */
    read: () => rows.map((r) => r.read()),
    /** Rows for the budgets a config shows. */
    write(budgets) {
      const json = JSON.stringify(budgets)
      if (json === written) return
      written = json
      rows = budgets.map((b) => budgetRow(b, `budget-period-${++serial}`, remove))
      list.replaceChildren(...rows.map((r) => r.el))
    },
    /**
     * Where the server's error on `period_budgets.<index>.<field…>` goes: beside that field of
     * that row, or under the row, or under the list for the list as a whole.
     */
    errorFor(index, rest) {
      const row = index === undefined ? undefined : rows[Number(index)]
      return row ? row.errorFor(rest[0]) : error
    },
    clearErrors() {
      error.textContent = ''
      for (const r of rows) r.clearErrors()
    },
  }
}

/** One period budget's row: a calendar period or a rolling window, by what the budget names. */
function budgetRow(budget, id, remove) {
  const calendar = budget.window_days === undefined
  const inputs = {}
  const errors = {}
  const field = (name, label, control, { hint } = {}) => {
    control.id = `${id}-${name}`
    control.name = name
    inputs[name] = control
    errors[name] = h('span', { class: 'field-error', id: `${id}-${name}-error`, role: 'alert' })
    control.setAttribute('aria-describedby', `${id}-${name}-error`)
    return h('div', { class: 'field', dataset: { field: name } }, h('label', { for: control.id }, label), control, hint ? h('small', {}, hint) : null, errors[name])
  }
  const text = (value, mode, extra = {}) => h('input', { type: 'text', inputmode: mode, autocomplete: 'off', spellcheck: 'false', value: value ?? '', ...extra })

  const fields = calendar
    ? [
        field('period', 'Period', select(PERIODS, budget.period ?? 'month')),
        field('limit_usd', 'Limit (USD)', text(budget.limit_usd, 'decimal')),
        field('time_zone', 'Time zone', text(budget.time_zone ?? BROWSER_ZONE, 'text', { placeholder: BROWSER_ZONE, list: 'budget-time-zones' }), { hint: 'IANA name; empty: this browser’s' }),
        field('week_starts', 'Week starts on', select(WEEK_STARTS, budget.week_starts ?? 'monday')),
        field('month_starts_on', 'Month starts on day', text(budget.month_starts_on ?? 1, 'numeric'), { hint: '1 to 28' }),
      ]
    : [field('window_days', 'Window (days)', text(budget.window_days, 'numeric'), { hint: '1 to 31' }), field('limit_usd', 'Limit (USD)', text(budget.limit_usd, 'decimal'))]
  const rowError = h('span', { class: 'field-error', role: 'alert' })
  const row = {
    el: h(
      'div',
      { class: `period-budget ${calendar ? 'calendar' : 'rolling'}`, role: 'group', 'aria-label': calendar ? 'Calendar period budget' : 'Rolling window budget' },
      h('div', { class: 'period-head' }, h('strong', {}, calendar ? 'Calendar period' : 'Rolling window'), h('button', { type: 'button', class: 'secondary', onclick: () => remove(row) }, 'Remove')),
      h('div', { class: 'period-fields' }, fields),
      rowError,
    ),
    focus: () => (inputs.period ?? inputs.window_days).focus(),
    read() {
      const limit_usd = numeric(inputs.limit_usd.value.trim())
      if (!calendar) return { window_days: numeric(inputs.window_days.value.trim()), limit_usd }
      const period = inputs.period.value
      const out = { period, limit_usd, time_zone: inputs.time_zone.value.trim() || BROWSER_ZONE }
      // Only what the period uses: a week's first day, a month's. The server defaults the rest.
      if (period === 'week') out.week_starts = inputs.week_starts.value
      if (period === 'month') out.month_starts_on = numeric(inputs.month_starts_on.value.trim())
      return out
    },
    errorFor: (name) => errors[name] ?? rowError,
    clearErrors() {
      rowError.textContent = ''
      for (const e of Object.values(errors)) e.textContent = ''
    },
  }
  if (calendar) {
    // A day has neither a week's nor a month's first day; a week no month's, a month no week's.
    const shown = () => {
      row.el.querySelector('[data-field="week_starts"]').hidden = inputs.period.value !== 'week'
      row.el.querySelector('[data-field="month_starts_on"]').hidden = inputs.period.value !== 'month'
    }
    inputs.period.addEventListener('change', shown)
    shown()
  }
  return row
}

function select(options, value) {
  return h('select', {}, options.map(([v, text]) => h('option', { value: v, selected: v === value }, text)))
}

/** The zone names this browser knows, offered as the zone field is typed in. */
function zoneNames() {
  const names = ['UTC', ...(Intl.supportedValuesOf?.('timeZone') ?? []).filter((z) => z !== 'UTC')]
  return h('datalist', { id: 'budget-time-zones' }, names.map((z) => h('option', { value: z })))
}
