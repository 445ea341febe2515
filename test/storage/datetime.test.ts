import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { chDateTimeToMs, toChDateTime, toChDateTime64us } from '../../src/storage/clickhouse.ts'

/** ClickHouse's DateTime64 text, formatted from a cached second: the same as a Date's, in any order of calls. */
describe('ClickHouse date-time text', () => {
  const reference = (ms: number) => new Date(ms).toISOString().replace('T', ' ').replace('Z', '')

  it('formats any instant of 1970-9999 as the Date does, whatever instant came before', () => {
    const instant = fc.integer({ min: 0, max: Date.UTC(9999, 11, 31, 23, 59, 59, 999) })
    fc.assert(
      fc.property(fc.array(fc.oneof(instant, fc.integer({ min: 1_795_000_000_000, max: 1_795_000_003_000 })), { minLength: 1, maxLength: 20 }), (list) => {
        for (const ms of list) {
          expect(toChDateTime(ms)).toBe(reference(ms))
          expect(chDateTimeToMs(toChDateTime(ms))).toBe(ms)
        }
      }),
      { numRuns: 2_000 },
    )
  })

  it('keeps the microseconds of a DateTime64(6)', () => {
    expect(toChDateTime64us(1_795_488_969_445_123)).toBe(`${reference(1_795_488_969_445)}123`)
    expect(toChDateTime64us(1_795_488_969_000_007)).toBe(`${reference(1_795_488_969_000)}007`)
  })
})
