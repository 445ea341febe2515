// The expansion test/grafana-dashboard.test.ts relies on, checked against what
// grafana-clickhouse-datasource 4.x documents and does (test/helpers/grafana-macros.ts cites
// the files): instants and intervals worked out by hand.
import { describe, expect, it } from 'vitest'
import { ALL, applyConditionalAll, expandMacros, interpolate, replaceVariables, type GrafanaRequest } from './helpers/grafana-macros.ts'

describe('expanding as Grafana and the plugin do', () => {
  const r: GrafanaRequest = {
    from: Date.UTC(2026, 0, 2, 3, 4, 5, 678),
    to: Date.UTC(2026, 0, 3, 3, 4, 5, 999),
    intervalMs: 90_000,
    variables: {
      user: { current: "o'neil" },
      agent: { current: ['x', "y'z"], options: ['x', "y'z", 'w'] },
      every: { current: [ALL], options: ['p', 'q'] },
      top: { current: '10' },
    },
  }
  // Go's time.Unix() truncates: 05.999 is second 05, not 06.
  const from = 1767323045 // 2026-01-02 03:04:05 UTC
  const to = 1767409445 // 2026-01-03 03:04:05 UTC

  it('time macros: seconds for $__timeFilter/$__fromTime/$__toTime, milliseconds for the _ms ones', () => {
    expect(expandMacros('$__timeFilter(ts)', r)).toBe(`ts >= toDateTime(${from}) AND ts <= toDateTime(${to})`)
    expect(expandMacros('$__timeFilter( ts )', r)).toBe(`ts >= toDateTime(${from}) AND ts <= toDateTime(${to})`)
    expect(expandMacros('a >= $__fromTime AND a <= $__toTime', r)).toBe(`a >= toDateTime(${from}) AND a <= toDateTime(${to})`)
    expect(expandMacros('$__fromTime_ms $__toTime_ms', r)).toBe('fromUnixTimestamp64Milli(1767323045678) fromUnixTimestamp64Milli(1767409445999)')
    expect(expandMacros('$__dateFilter(d)', r)).toBe("d >= toDate('2026-01-02') AND d <= toDate('2026-01-03')")
  })

  it('interval macros: whole seconds, at least one', () => {
    expect(expandMacros('$__timeInterval(ts)', r)).toBe('toStartOfInterval(toDateTime(ts), INTERVAL 90 second)')
    expect(expandMacros('$__timeInterval_ms(ts)', r)).toBe('toStartOfInterval(toDateTime64(ts, 3), INTERVAL 90000 millisecond)')
    expect(expandMacros('$__interval_s', r)).toBe('90')
    expect(expandMacros('$__interval_s', { ...r, intervalMs: 400 })).toBe('1')
    expect(expandMacros('$__timeInterval(ts)', { ...r, intervalMs: 1500 })).toBe('toStartOfInterval(toDateTime(ts), INTERVAL 1 second)')
    expect(expandMacros('$__noSuchMacro(x)', r)).toBe('$__noSuchMacro(x)')
  })

  it('variables: the plugin default, :singlequote escaping quotes, All as every option', () => {
    expect(replaceVariables('${user:singlequote} $user [[user]] LIMIT $top', r.variables)).toBe("'o\\'neil' o'neil o'neil LIMIT 10")
    expect(replaceVariables('IN (${agent:singlequote})', r.variables)).toBe("IN ('x','y\\'z')")
    expect(replaceVariables('IN (${every:singlequote})', r.variables)).toBe("IN ('p','q')")
    expect(replaceVariables('$__timeFilter(ts) $unknown', r.variables)).toBe('$__timeFilter(ts) $unknown')
    // :percentencode leaves only letters, digits, -_.~ and %: no quote or backslash to end a literal.
    expect(replaceVariables("'${user:percentencode}'", r.variables)).toBe("'o%27neil'")
    expect(replaceVariables('${k:percentencode}', { k: { current: 'a\\\' b,(c)*!~é🚀' } })).toBe('a%5C%27%20b%2C%28c%29%2A%21~%C3%A9%F0%9F%9A%80')
    expect(replaceVariables('${agent:percentencode}', r.variables)).toBe('%7Bx%2Cy%27z%7D')
  })

  it('$__conditionalAll: the condition, or 1=1 for All', () => {
    const sql = 'WHERE $__conditionalAll(agent_id IN (${agent:singlequote}), $agent) AND $__conditionalAll(k IN (${every:singlequote}), $every)'
    expect(applyConditionalAll(sql, r.variables)).toBe('WHERE agent_id IN (${agent:singlequote}) AND 1=1')
    expect(interpolate(sql, r)).toBe("WHERE agent_id IN ('x','y\\'z') AND 1=1")
  })
})
