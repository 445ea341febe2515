import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { EventIdSet, fingerprint } from '../../src/hot-state/dedup.ts'
import { WINDOW_MINUTES } from '../../src/rolling-day.ts'

const M0 = 29_000_000 // a minute number (2025)

describe('the in-process event-id set', () => {
  it('finds every id it was given at its own cost, and no id it was not (property over 50,000 random ids)', () => {
    const set = new EventIdSet()
    const given = Array.from({ length: 50_000 }, (_, i) => ({ user: `u${i % 7}`, agent: `a${i % 101}`, id: randomUUID(), cost: i * 1_000_003, minute: M0 + (i % 180) }))
    for (const g of given) set.add(fingerprint(g.user, g.agent, g.id), g.cost, g.minute)
    const now = M0 + 180
    for (const g of given) expect(set.get(fingerprint(g.user, g.agent, g.id), now)).toBe(g.cost)
    // The same event id is another event for another agent or user; fresh ids are unknown.
    for (const g of given.slice(0, 5_000)) {
      expect(set.get(fingerprint(g.user, `${g.agent}x`, g.id), now)).toBeUndefined()
      expect(set.get(fingerprint(`${g.user}x`, g.agent, g.id), now)).toBeUndefined()
      expect(set.get(fingerprint(g.user, g.agent, randomUUID()), now)).toBeUndefined()
    }
    expect(set.size).toBe(50_000)
  })

  it('holds at most 64 bytes per remembered id, here 1,000 events a second for 10 minutes', () => {
    const set = new EventIdSet()
    for (let i = 0; i < 600_000; i++) set.add(fingerprint('fleet', `agent-${i % 1000}`, randomUUID()), 7_500_000, M0 + Math.floor(i / 60_000))
    expect(set.bytes / set.size).toBeLessThanOrEqual(64)
  })

  it('forgets an id exactly when its minute leaves the window, and frees its hour once the whole hour has', () => {
    const set = new EventIdSet()
    const hour = Math.floor(M0 / 60) * 60
    const early = fingerprint('u', 'a', 'early') // the hour's first minute
    const late = fingerprint('u', 'a', 'late') // its last
    set.add(early, 1, hour)
    set.add(late, 2, hour + 59)
    const lastMinuteOfEarly = hour + WINDOW_MINUTES - 1
    expect(set.get(early, lastMinuteOfEarly)).toBe(1)
    expect(set.get(early, lastMinuteOfEarly + 1)).toBeUndefined()
    expect(set.get(late, lastMinuteOfEarly + 1)).toBe(2)
    set.expire(lastMinuteOfEarly + 59)
    expect(set.size).toBe(2)
    set.expire(lastMinuteOfEarly + 60)
    expect(set.size).toBe(0)
    expect(set.bytes).toBe(0)
  })
})
