// The dashboard's charts, uPlot served by burnrate from its npm package: the hourly cost
// chart (GET /agents/{id}/hourly), a bar per UTC hour, the empty hours included; and the
// top groups of GET /costs, a bar per group.

import uPlot from './uPlot.esm.js'
import { h, usd } from './dom.js'

const HEIGHT = 220

export function hourlyChart() {
  const el = h('div', { class: 'chart', role: 'img', 'aria-label': 'Cost per hour, last 24 h' })
  let plot = null

  const resize = new ResizeObserver(() => {
    if (plot && el.clientWidth > 0) plot.setSize({ width: el.clientWidth, height: HEIGHT })
  })
  resize.observe(el)

  return {
    el,
    /** buckets: [{hour, cost_usd, …}], oldest first. */
    update(buckets) {
      const data = [buckets.map((b) => Date.parse(b.hour) / 1000), buckets.map((b) => b.cost_usd)]
      const total = buckets.reduce((sum, b) => sum + b.cost_usd, 0)
      el.setAttribute('aria-label', `Cost per hour over the last ${buckets.length} h: ${usd(total)} in all`)
      if (plot) return plot.setData(data)
      plot = new uPlot(options(Math.max(el.clientWidth, 300)), data, el)
    },
    dispose() {
      resize.disconnect()
      plot?.destroy()
    },
  }
}

function options(width) {
  return {
    width,
    height: HEIGHT,
    // Buckets are UTC hours (docs/api.md): the axis says so rather than shifting them to local time.
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
    cursor: { drag: { x: false, y: false } },
    scales: {
      // Half an hour either side, so the first and the current hour show their whole bar.
      x: { time: true, range: (_u, min, max) => [min - 1800, max + 1800] },
      y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.15 : 0.01] },
    },
    legend: { live: true },
    series: [
      { label: 'Hour (UTC)', value: '{YYYY}-{MM}-{DD} {HH}:00' },
      {
        label: 'Cost',
        stroke: '#c2410c',
        fill: 'rgba(234, 88, 12, 0.35)',
        width: 1,
        paths: uPlot.paths.bars({ size: [0.8, 48] }),
        points: { show: false },
        value: (_u, v) => (v === null || v === undefined ? '—' : usd(v)),
      },
    ],
    axes: [
      { values: (_u, ticks) => ticks.map((t) => new Date(t * 1000).toISOString().slice(11, 16)) },
      { size: 72, values: (_u, ticks) => ticks.map((t) => usd(t)) },
    ],
  }
}

/** Of a page of GET /costs, the groups the chart shows: the most expensive. */
export const TOP_GROUPS = 10
const LABEL_CHARS = 18

/** Cost by group (GET /costs): a bar per group, most expensive first, labelled by its values. */
export function groupsChart() {
  const el = h('div', { class: 'chart', role: 'img', 'aria-label': 'No cost in this range' })
  let plot = null
  // The names of the bars on screen, read by the axis and the legend as they are drawn.
  let labels = []

  const resize = new ResizeObserver(() => {
    if (plot && el.clientWidth > 0) plot.setSize({ width: el.clientWidth, height: HEIGHT })
  })
  resize.observe(el)

  return {
    el,
    /** bars: [{label, cost_usd}], most expensive first; `what` names the grouping ("agent", "model · day"). */
    update(bars, what) {
      labels = bars.map((b) => b.label)
      const data = [bars.map((_, i) => i), bars.map((b) => b.cost_usd)]
      // The figures drawn, as text: for people who do not see the chart, and for its tests.
      el.setAttribute('aria-label', bars.length ? `Cost by ${what}, top ${bars.length}: ${bars.map((b) => `${b.label} ${usd(b.cost_usd)}`).join(', ')}` : 'No cost in this range')
      if (plot) {
        plot.setData(data)
        return
      }
      plot = new uPlot(groupOptions(Math.max(el.clientWidth, 300), () => labels), data, el)
    },
    dispose() {
      resize.disconnect()
      plot?.destroy()
    },
  }
}

const short = (label) => (label.length > LABEL_CHARS ? `${label.slice(0, LABEL_CHARS - 1)}…` : label)

function groupOptions(width, labels) {
  return {
    width,
    height: HEIGHT,
    cursor: { drag: { x: false, y: false } },
    scales: {
      // A bar per index, half a bar's room either side.
      x: { time: false, range: (_u, _min, max) => [-0.5, Math.max(max ?? 0, 0) + 0.5] },
      y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.15 : 0.01] },
    },
    legend: { live: true },
    series: [
      { label: 'Group', value: (_u, i) => (i === null || i === undefined ? '—' : (labels()[i] ?? '—')) },
      {
        label: 'Cost',
        stroke: '#c2410c',
        fill: 'rgba(234, 88, 12, 0.35)',
        width: 1,
        paths: uPlot.paths.bars({ size: [0.7, 80] }),
        points: { show: false },
        value: (_u, v) => (v === null || v === undefined ? '—' : usd(v)),
      },
    ],
    axes: [
      {
        splits: () => labels().map((_, i) => i),
        values: (_u, ticks) => ticks.map((i) => short(labels()[i] ?? '')),
        gap: 6,
      },
      { size: 72, values: (_u, ticks) => ticks.map((t) => usd(t)) },
    ],
  }
}
