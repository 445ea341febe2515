// DOM helpers. Every value from the API reaches the page as a text node or an attribute
// value, never as markup: agent ids are arbitrary strings. No innerHTML anywhere,
// and no style attribute (the CSP forbids inline styles; sizes go through the CSSOM).

/**
 * h('a', {href, class, onclick}, child…): an element. Strings become text nodes; null,
 * undefined and false children are skipped; `on…` props become listeners.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag)
  for (const [name, value] of Object.entries(props ?? {})) {
    if (value === null || value === undefined || value === false) continue
    if (name === 'style' || name === 'innerHTML') throw new Error(`h(): ${name} is not allowed`)
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value)
    else if (name === 'class') el.className = value
    else if (name === 'dataset') Object.assign(el.dataset, value)
    else if (name === 'value' || name === 'checked' || name === 'disabled') el[name] = value
    else el.setAttribute(name, value === true ? '' : String(value))
  }
  append(el, children)
  return el
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue
    el.append(child instanceof Node ? child : String(child))
  }
}

/** Rounds to the nano-dollar, the unit burnrate accounts in (sums of JSON floats drift). */
export const nano = (usd) => Math.round(usd * 1e9) / 1e9

/** A number when the text is one; the text itself otherwise, for the server to name what is wrong with it. */
export function numeric(text) {
  const n = Number(text)
  return text !== '' && Number.isFinite(n) ? n : text
}

const usdFormat = new Intl.NumberFormat(undefined, { style: 'currency', currency: 'USD', minimumFractionDigits: 2, maximumFractionDigits: 4 })
const intFormat = new Intl.NumberFormat()

export const usd = (n) => (n === null || n === undefined ? '—' : usdFormat.format(n))
export const int = (n) => (n === null || n === undefined ? '—' : intFormat.format(n))
export const pct = (fraction) => `${Math.round(fraction * 100)} %`

/** A length of time for people: "850 ms", "12 s", "41 min 10 s", "2 h 5 min", "3 d 4 h". */
export function duration(ms) {
  if (ms === null || ms === undefined) return '—'
  if (ms < 1000) return `${Math.round(ms)} ms`
  const s = Math.floor(ms / 1000)
  const [d, hr, min, sec] = [Math.floor(s / 86_400), Math.floor(s / 3600) % 24, Math.floor(s / 60) % 60, s % 60]
  if (d) return hr ? `${d} d ${hr} h` : `${d} d`
  if (hr) return min ? `${hr} h ${min} min` : `${hr} h`
  if (min) return sec ? `${min} min ${sec} s` : `${min} min`
  return `${sec} s`
}

/** A time for people (local), with the exact UTC instant in its title. */
export function time(iso, { seconds = false } = {}) {
  if (!iso) return h('span', {}, '—')
  const d = new Date(iso)
  const text = d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: seconds ? 'medium' : 'short' })
  return h('time', { datetime: d.toISOString(), title: d.toISOString() }, text)
}

/** A spend bar: what is spent against the budget, its colour by how close it is. */
export function spendBar(spent, budget, { alerted = false } = {}) {
  const ratio = budget > 0 ? spent / budget : spent > 0 ? Infinity : 0
  const level = ratio > 1 ? 'over' : ratio >= 1 || alerted ? 'warn' : 'ok'
  const fill = h('span', { class: `fill ${level}` })
  // The CSSOM, not a style attribute: the CSP (style-src 'self') allows it.
  fill.style.width = `${Math.min(100, Math.max(0, ratio * 100))}%`
  return h(
    'span',
    {
      class: 'bar',
      role: 'meter',
      'aria-valuemin': 0,
      'aria-valuemax': budget,
      'aria-valuenow': spent,
      'aria-label': `${usd(spent)} of ${usd(budget)}`,
    },
    fill,
  )
}

/** The pause state as a badge: "running", or "paused" with its reason ("paused: month budget" for a period's). */
export function pauseBadge(isPaused, reason, period = null) {
  if (!isPaused) return h('span', { class: 'badge running' }, 'running')
  return h('span', { class: 'badge paused', title: reasonText(reason, period) }, reason ? `paused: ${reasonName(reason, period)}` : 'paused')
}

/** A pause's state as a sentence's worth: "paused (month budget: its spend this month went over …)". */
export function pauseState(isPaused, reason, period = null) {
  return isPaused ? `paused (${reasonName(reason, period)}: ${reasonText(reason, period)})` : 'running'
}

const REASONS = {
  budget: 'its 24 h spend went over its budget',
  velocity: 'it spent faster than its velocity limit',
  manual: 'paused by hand',
  fleet_budget: "its fleet's 24 h spend went over the fleet budget",
  fleet_velocity: 'its fleet spent faster than the fleet velocity limit',
  fleet_manual: 'its fleet was paused by hand',
}

// A pause by a period budget names its period (paused_period); the others are named by their reason.
function reasonName(reason, period) {
  if (period && reason === 'period_budget') return `${periodName(period)} budget`
  if (period && reason === 'fleet_period_budget') return `fleet ${periodName(period)} budget`
  return reason
}

function reasonText(reason, period) {
  if (period && reason === 'period_budget') return `its spend ${periodSpan(period)} went over its ${periodName(period)} budget`
  if (period && reason === 'fleet_period_budget') return `the fleet's spend ${periodSpan(period)} went over its ${periodName(period)} budget`
  return REASONS[reason] ?? ''
}

/** A period as the API names it ("day", "week", "month", "window_30d"), for people: "month", "30-day window". */
export function periodName(period) {
  const days = windowDays(period)
  return days === null ? period : `${days}-day window`
}

/** The span of spend a period holds: "this month", "in the last 30 days". */
export function periodSpan(period) {
  const days = windowDays(period)
  if (days === null) return period === 'day' ? 'today' : `this ${period}`
  return days === 1 ? 'in the last day' : `in the last ${days} days`
}

/** A rolling window's length in days ("window_30d": 30); null for a calendar period. */
export function windowDays(period) {
  const m = /^window_(\d+)d$/.exec(period)
  return m ? Number(m[1]) : null
}

/** A definition list of [label, value] pairs; a value may be a node. */
export function stats(pairs) {
  return h(
    'dl',
    { class: 'stats' },
    pairs.filter(Boolean).map(([label, value]) => h('div', {}, h('dt', {}, label), h('dd', {}, value))),
  )
}

/** A message line: role=alert for errors. */
export function notice(text, kind = 'error') {
  return h('p', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text)
}

/**
 * Runs what a button does: the button disabled meanwhile, the outcome in `status`: `done`, or
 * why not (a problem+json detail, or the network's own error when burnrate is unreachable).
 */
export async function act(button, status, action, done) {
  button.disabled = true
  status.replaceChildren()
  try {
    await action()
    status.replaceChildren(notice(done, 'ok'))
  } catch (err) {
    status.replaceChildren(notice(`Not done: ${err.message}`))
  } finally {
    button.disabled = false
  }
}
