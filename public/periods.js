// Period budgets as the reads show them (`periods` of GET /agents/{id}, GET /fleet and the
// GET /agents rows): a spend line each beside the 24 h one, and the tightest one as a badge.

import { h, pct, periodName, periodSpan, spendBar, time, usd, windowDays } from './dom.js'

/**
 * One line per period: its name, spent against its limit, and when it ends (or that it
 * rolls). `alertAt`, the config's alert levels, apply to every period's limit as to the
 * daily one: a period past one is drawn as alerted.
 */
export function periodLines(periods, { alertAt = [] } = {}) {
  return periods.map((p) => {
    const alerted = alertAt.some((level) => p.spent_usd >= level * p.limit_usd)
    const days = windowDays(p.period)
    return h(
      'div',
      { class: 'period-line', dataset: { period: p.period } },
      h('span', { class: 'period-name' }, capitalized(periodName(p.period))),
      spendBar(p.spent_usd, p.limit_usd, { alerted }),
      h('span', { class: 'amount' }, `${usd(p.spent_usd)} of ${usd(p.limit_usd)} ${periodSpan(p.period)}`),
      h(
        'span',
        { class: 'period-end' },
        days === null ? ['ends ', time(p.ends_at)] : `rolling ${days} ${days === 1 ? 'day' : 'days'}`,
        p.projected_exhaustion_at && p.remaining_usd > 0 ? [' · runs out at ', time(p.projected_exhaustion_at)] : null,
      ),
    )
  })
}

/** The period nearest to (or furthest over) its limit, as a badge: "month 45 %"; null without periods. */
export function tightestPeriod(periods) {
  if (!periods?.length) return null
  // A limit is > 0 (POST /config refuses 0).
  const share = (p) => p.spent_usd / p.limit_usd
  const p = periods.reduce((a, b) => (share(b) > share(a) ? b : a))
  const ends = p.ends_at ? `, ends ${new Date(p.ends_at).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' })}` : ''
  return h(
    'span',
    { class: `badge period${share(p) > 1 ? ' over' : ''}`, title: `${usd(p.spent_usd)} of its ${usd(p.limit_usd)} ${periodName(p.period)} budget ${periodSpan(p.period)}${ends}` },
    `${periodName(p.period)} ${pct(share(p))}`,
  )
}

const capitalized = (text) => text.charAt(0).toUpperCase() + text.slice(1)
