// Where the money went (GET /costs): cost grouped by one or two dimensions (an agent, a model,
// a UTC day or hour, a run, or a metadata key the range's events carry: GET /costs/dimensions
// offers them), over whole UTC hours, filtered by agent, model and a metadata value. The top
// groups as a chart, every group in a table a page at a time (next_cursor), and the same query
// as a CSV file, fetched with the key as a header and saved from memory.

import { api, ApiError } from './api.js'
import { groupsChart, TOP_GROUPS } from './chart.js'
import { h, int, notice, usd } from './dom.js'

export const COSTS_PAGE = 50
const HOUR = 3_600_000
const METADATA = 'metadata.'

const RANGES = [
  ['24h', 'Last 24 h'],
  ['7d', 'Last 7 days'],
  ['30d', 'Last 30 days'],
  ['month', 'This month (UTC)'],
  ['custom', 'Custom range'],
]

const FIXED = [
  ['agent', 'Agent'],
  ['model', 'Model'],
  ['day', 'Day (UTC)'],
  ['hour', 'Hour (UTC)'],
  ['run', 'Run'],
]

const iso = (ms) => new Date(ms).toISOString()
/** A datetime-local field's value read as UTC ("2026-03-01T10:00"); null when it is not one. */
const fromField = (value) => (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(value) ? Date.parse(`${value}:00Z`) : null)
const toField = (ms) => iso(ms).slice(0, 16)

/**
 * The range a choice stands for at `now`, [from, to) in epoch ms: the presets are whole UTC
 * hours that end with the current one (as GET /costs counts them); a custom range is what its
 * fields say, null until both are filled in.
 */
export function rangeOf(choice, now, custom) {
  const end = Math.floor(now / HOUR) * HOUR + HOUR
  const last = (hours) => ({ from: end - hours * HOUR, to: end })
  switch (choice) {
    case '24h':
      return last(24)
    case '7d':
      return last(7 * 24)
    case '30d':
      return last(30 * 24)
    case 'month': {
      const d = new Date(now)
      return { from: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1), to: end }
    }
    default: {
      const from = fromField(custom.from)
      const to = fromField(custom.to)
      return from === null || to === null ? null : { from, to }
    }
  }
}

/** A dimension as a column heading: "Agent", "Day (UTC)", or the metadata key itself. */
function dimensionTitle(name) {
  return FIXED.find(([value]) => value === name)?.[1] ?? name.slice(METADATA.length)
}

/** A group's values as one label: "acme · gpt-4o"; "(none)" for the events without a value. */
const labelOf = (group, names) => names.map((n) => group[n] ?? '(none)').join(' · ')

export function costsView() {
  let choice = '24h'
  let groupBy = ['agent', '']
  // What the filters and the custom range were when last applied (the fields may differ while edited).
  let applied = { from: '', to: '', agent: '', model: '', key: '', value: '' }
  // The cursor of each page reached so far (the first has none), and the page on screen.
  let cursors = [null]
  let page = 0
  // Answers of an older question (a choice changed since) are not shown.
  let asked = 0
  // The metadata keys of the range, [{key, events}], most used first.
  let keys = []
  let last = null

  const rangeChoice = picker(RANGES, (value) => {
    choice = value
    custom.hidden = value !== 'custom'
    if (value === 'custom' && last) {
      // The range on screen, to edit from.
      fromInput.value = applied.from = toField(Date.parse(last.from))
      toInput.value = applied.to = toField(Date.parse(last.to))
    }
    restart()
  })
  const fromInput = h('input', { type: 'datetime-local', step: 3600 })
  const toInput = h('input', { type: 'datetime-local', step: 3600 })
  const custom = h('span', { class: 'custom-range', hidden: true }, field('From (UTC)', fromInput), field('To (UTC)', toInput))
  const first = h('select', { onchange: () => setGroupBy([first.value, second.value === first.value ? '' : second.value]) })
  const second = h('select', { onchange: () => setGroupBy([first.value, second.value]) })
  const agentInput = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'any' })
  const modelInput = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'any' })
  const keyInput = h('select', {})
  const valueInput = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false' })
  const csvButton = h('button', { type: 'button', class: 'secondary', onclick: () => download() }, 'Download CSV')
  const csvStatus = h('div', { class: 'csv-status' })
  const status = h('div')
  const rangeText = h('p', { class: 'summary', 'aria-live': 'polite' })
  const chart = groupsChart()
  const head = h('tr')
  const tbody = h('tbody')
  const pager = h('nav', { class: 'pager', 'aria-label': 'Group pages' })

  const form = h(
    'form',
    {
      class: 'costs-query',
      method: 'post',
      action: '#',
      onsubmit: (event) => {
        event.preventDefault()
        applied = { from: fromInput.value, to: toInput.value, agent: agentInput.value.trim(), model: modelInput.value.trim(), key: keyInput.value, value: valueInput.value }
        restart()
      },
    },
    h('div', { class: 'query-line' }, field('Range', rangeChoice), custom, field('Group by', first), field('Then by', second)),
    h('div', { class: 'query-line' }, field('Agent', agentInput), field('Model', modelInput), field('Metadata key', keyInput), field('Value', valueInput), h('button', { type: 'submit' }, 'Apply'), csvButton),
  )

  const el = h(
    'section',
    { class: 'costs' },
    h('div', { class: 'heading' }, h('h1', {}, 'Costs'), h('span', { class: 'muted' }, 'where the money went, by whole UTC hours')),
    form,
    csvStatus,
    rangeText,
    status,
    h('div', { class: 'panel' }, h('h2', {}, 'Top groups by cost'), chart.el),
    h('div', { class: 'panel' }, h('table', { class: 'list groups' }, h('thead', {}, head), tbody), pager),
  )
  fillDimensions()

  function setGroupBy(next) {
    groupBy = next
    fillDimensions()
    restart()
  }

  /** The dimension choices: the fixed ones, then the range's metadata keys (and a chosen key the range lacks). */
  function fillDimensions() {
    const known = keys.map((k) => k.key)
    const chosen = [...groupBy, applied.key ? METADATA + applied.key : ''].filter((d) => d.startsWith(METADATA)).map((d) => d.slice(METADATA.length))
    const all = [...known, ...chosen.filter((k) => !known.includes(k))]
    const events = new Map(keys.map((k) => [k.key, k.events]))
    const options = (exclude) => {
      const fixed = FIXED.filter(([value]) => value !== exclude).map(([value, text]) => h('option', { value }, text))
      const metadata = all.filter((k) => METADATA + k !== exclude)
      if (metadata.length === 0) return fixed
      const text = (k) => (events.has(k) ? `${k} (${int(events.get(k))} events)` : k)
      return [...fixed, h('optgroup', { label: 'Metadata keys' }, metadata.map((k) => h('option', { value: METADATA + k }, text(k))))]
    }
    first.replaceChildren(...options(''))
    first.value = groupBy[0]
    second.replaceChildren(h('option', { value: '' }, 'Nothing else'), ...options(groupBy[0]))
    second.value = groupBy[1]
    const key = keyInput.value
    keyInput.replaceChildren(h('option', { value: '' }, 'None'), ...all.map((k) => h('option', { value: k }, k)))
    keyInput.value = all.includes(key) ? key : ''
  }

  /** group_by and the applied filters, as [name, value] pairs. */
  function queryPairs() {
    const pairs = groupBy.filter(Boolean).map((d) => ['group_by', d])
    if (applied.agent) pairs.push(['agent_id', applied.agent])
    if (applied.model) pairs.push(['model', applied.model])
    if (applied.key) pairs.push([METADATA + applied.key, applied.value])
    return pairs
  }

  const currentRange = () => rangeOf(choice, Date.now(), applied)

  async function load() {
    const question = ++asked
    const range = currentRange()
    if (!range) {
      status.replaceChildren(notice('Choose the range: both From and To.', 'info'))
      return
    }
    // A later page goes on with its cursor, which keeps the first page's range.
    const where = page === 0 ? [['from', iso(range.from)], ['to', iso(range.to)]] : [['cursor', cursors[page]]]
    let answer, dimensions
    try {
      ;[answer, dimensions] = await Promise.all([
        api.costs([...queryPairs(), ...where, ['limit', COSTS_PAGE]]),
        page === 0 ? api.costDimensions({ from: iso(range.from), to: iso(range.to) }) : null,
      ])
    } catch (err) {
      if (question !== asked) return
      // A range or a filter the API refuses: its own words, and nothing shown for it.
      if (!(err instanceof ApiError) || err.status !== 400) throw err
      status.replaceChildren(notice(`Not shown: ${err.message}`))
      chart.update([], '')
      tbody.replaceChildren()
      pager.replaceChildren()
      return
    }
    if (question !== asked) return
    status.replaceChildren()
    if (dimensions && JSON.stringify(dimensions.keys) !== JSON.stringify(keys)) {
      keys = dimensions.keys
      fillDimensions()
    }
    render(answer)
  }

  function render(answer) {
    last = answer
    cursors[page + 1] = answer.next_cursor
    const names = answer.group_by
    rangeText.replaceChildren(`${iso(Date.parse(answer.from)).slice(0, 16).replace('T', ' ')} to ${iso(Date.parse(answer.to)).slice(0, 16).replace('T', ' ')} UTC`)
    if (page === 0) {
      const top = answer.groups.slice(0, TOP_GROUPS).map((g) => ({ label: labelOf(g.group, names), cost_usd: g.cost_usd }))
      chart.update(top, names.map(dimensionTitle).join(' · '))
    }
    head.replaceChildren(
      ...names.map((n) => h('th', { scope: 'col' }, dimensionTitle(n))),
      ...['Cost', 'LLM calls', 'Input tokens', 'Output tokens', 'Events'].map((c) => h('th', { scope: 'col', class: 'num' }, c)),
    )
    tbody.replaceChildren(
      ...(answer.groups.length
        ? answer.groups.map((g) => groupRow(g, names))
        : [h('tr', {}, h('td', { colspan: names.length + 5, class: 'empty' }, 'No events in this range.'))]),
    )
    const firstRow = page * COSTS_PAGE
    pager.replaceChildren(
      h('button', { type: 'button', disabled: page === 0, onclick: () => go(page - 1) }, '← Previous'),
      h('span', { class: 'range' }, answer.groups.length ? `groups ${int(firstRow + 1)}–${int(firstRow + answer.groups.length)}` : 'no groups'),
      h('button', { type: 'button', disabled: !answer.next_cursor, onclick: () => go(page + 1) }, 'Next →'),
    )
  }

  async function download() {
    const range = currentRange()
    if (!range) {
      csvStatus.replaceChildren(notice('Choose the range first: both From and To.', 'info'))
      return
    }
    csvButton.disabled = true
    csvStatus.replaceChildren()
    try {
      const { blob, name, more } = await api.costsCsv([...queryPairs(), ['from', iso(range.from)], ['to', iso(range.to)]])
      // Saved from memory: the key went as a header, and no URL holds it or the data.
      const url = URL.createObjectURL(blob)
      h('a', { href: url, download: name }).click()
      setTimeout(() => URL.revokeObjectURL(url), 60_000)
      csvStatus.replaceChildren(notice(more ? `Saved ${name}: its first 100,000 groups; narrow the range or the filters for the rest.` : `Saved ${name}.`, 'ok'))
    } catch (err) {
      csvStatus.replaceChildren(notice(`Not saved: ${err.message}`))
    } finally {
      csvButton.disabled = false
    }
  }

  function go(p) {
    page = p
    load().catch(console.error)
  }

  function restart() {
    cursors = [null]
    page = 0
    load().catch(console.error)
  }

  return {
    el,
    refresh: load,
    // Fields changed and not applied yet: the 10 s refresh leaves them alone.
    editing: () =>
      (choice === 'custom' && (fromInput.value !== applied.from || toInput.value !== applied.to)) ||
      agentInput.value.trim() !== applied.agent ||
      modelInput.value.trim() !== applied.model ||
      keyInput.value !== applied.key ||
      (keyInput.value !== '' && valueInput.value !== applied.value),
    dispose: () => chart.dispose(),
  }
}

/** A control with its label above it, tied by id (one Costs page is shown at a time). */
function field(label, control) {
  control.id = `costs-${label.toLowerCase().replace(/[^a-z]+/g, '-')}`
  return h('span', { class: 'query-field' }, h('label', { for: control.id }, label), control)
}

/** A select of [value, text] options; `onchange` gets the value chosen. */
function picker(options, onchange) {
  const el = h('select', { onchange: () => onchange(el.value) }, options.map(([value, text]) => h('option', { value }, text)))
  return el
}

function groupRow(g, names) {
  return h(
    'tr',
    {},
    ...names.map((n, i) => valueCell(n, g.group[n], i === 0)),
    h('td', { class: 'num' }, usd(g.cost_usd)),
    h('td', { class: 'num' }, int(g.llm_calls)),
    h('td', { class: 'num' }, int(g.input_tokens)),
    h('td', { class: 'num' }, int(g.output_tokens)),
    h('td', { class: 'num' }, int(g.events)),
  )
}

/** A group's value: an agent or a run links to its page; the events without a value say so. */
function valueCell(name, value, isRowHeader) {
  const tag = isRowHeader ? 'th' : 'td'
  const props = isRowHeader ? { scope: 'row' } : {}
  if (value === null) return h(tag, { ...props, class: 'none', title: 'the events without a value for it' }, '(none)')
  if (name === 'agent') return h(tag, props, h('a', { href: `#/agents/${encodeURIComponent(value)}` }, value))
  if (name === 'run') return h(tag, props, h('a', { href: `#/runs/${encodeURIComponent(value)}` }, value))
  return h(tag, props, value)
}
