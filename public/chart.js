// The hourly cost chart (GET /agents/{id}/hourly): uPlot, served by burnrate from its npm
// package. Bars, one per UTC hour, the empty hours included.

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
