import { z } from 'zod'
import { Problem } from '../errors.ts'
import { EXPORT_FORMATS, type ExportFormat } from '../storage/exports.ts'

/** The longest range one export may cover. */
export const MAX_EXPORT_DAYS = 366
const DAY_US = 86_400_000_000
/** The range an export covers without `from`: the day before `to`. */
const DEFAULT_SPAN_US = DAY_US

/**
 * An instant of ISO 8601, in microseconds since the epoch (stored times have microseconds):
 * a date and time with `Z` or an offset (`2026-11-01T00:00:00Z`, `…+01:00`, a fraction of up
 * to nine digits, cut to six), or a date alone, its midnight UTC. A time without a zone is
 * refused: it would be a different instant on every machine.
 */
const NOT_AN_INSTANT = 'must be an ISO 8601 date (2026-11-01) or date and time with Z or an offset (2026-11-01T00:00:00Z)'
const instant = z
  .union([z.iso.datetime({ offset: true, error: NOT_AN_INSTANT }), z.iso.date({ error: NOT_AN_INSTANT })])
  .transform((text, ctx) => {
    const us = microsOf(text)
    if (us === null) {
      ctx.addIssue({ code: 'custom', message: 'must be an instant between the years 1970 and 9999' })
      return z.NEVER
    }
    return us
  })

function microsOf(text: string): number | null {
  if (!text.includes('T')) return checked(Date.parse(`${text}T00:00:00Z`) * 1000)
  const m = /^(.*T[^.]+?)(?:\.(\d+))?(Z|[+-]\d{2}:?\d{2})$/i.exec(text)
  if (!m) return null
  const whole = Date.parse(`${m[1]}${m[3]}`)
  return checked(whole * 1000 + Number((m[2] ?? '').padEnd(6, '0').slice(0, 6)))
}

function checked(us: number): number | null {
  return Number.isSafeInteger(us) && us >= 0 && us < Date.UTC(10000, 0) * 1000 ? us : null
}

/** GET /export's query (and `burnrate export`'s options). */
export const exportQuery = z.strictObject({
  from: instant.optional().describe('the first instant of the range, inclusive (ISO 8601; default: a day before to)'),
  to: instant.optional().describe('the end of the range, exclusive (ISO 8601; default: now); at most 366 days after from'),
  format: z
    .enum(EXPORT_FORMATS, { error: `must be one of ${EXPORT_FORMATS.join(', ')}` })
    .default('csv')
    .describe('csv (text/csv with a header row), ndjson (application/x-ndjson) or parquet (application/vnd.apache.parquet)'),
})

export interface ExportRange {
  fromUs: number
  toUs: number
  format: ExportFormat
}

/**
 * The range asked for, with its defaults (`to` now, `from` a day before `to`), or a 400
 * naming `from`: at or after `to`, or more than MAX_EXPORT_DAYS before it.
 */
export function exportRange(q: z.output<typeof exportQuery>, nowMs: number): ExportRange {
  const toUs = q.to ?? nowMs * 1000
  const fromUs = q.from ?? toUs - DEFAULT_SPAN_US
  const refuse = (message: string) => {
    throw new Problem('invalid_query', `from: ${message}`, { errors: [{ field: 'from', message }] })
  }
  if (fromUs >= toUs) refuse(q.to === undefined ? 'must be before now (to, when not given)' : 'must be before to')
  if (toUs - fromUs > MAX_EXPORT_DAYS * DAY_US) refuse(`must be at most ${MAX_EXPORT_DAYS} days before to`)
  return { fromUs, toUs, format: q.format }
}
