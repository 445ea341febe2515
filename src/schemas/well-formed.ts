import { Problem } from '../errors.ts'

/** How deep a request's JSON may nest: the body itself is one level, `metadata` another. */
export const MAX_DEPTH = 32

/**
 * Checks request data at the edge, before any schema: every string, object keys
 * included, must be well-formed Unicode (a lone UTF-16 surrogate, which JSON's \u escapes
 * can carry, is refused: ClickHouse, Redis key names and URLs cannot hold it as it is), and
 * objects and arrays nest at most MAX_DEPTH levels. Throws a 400 problem naming the first
 * field at fault. The walk recurses at most MAX_DEPTH + 1 deep, whatever the input, and
 * allocates nothing unless it finds a fault (a path per value was 6 % of what a request
 * allocated: bench/).
 */
export function assertWellFormed(data: unknown, code: 'invalid_body' | 'invalid_query'): void {
  const fault = faultIn(data, 1)
  if (fault) refuse(code, fault.path.reverse(), fault.message)
}

/** The first fault under `value`, its path innermost key first. */
function faultIn(value: unknown, depth: number): { path: string[]; message: string } | null {
  if (typeof value === 'string') return value.isWellFormed() ? null : { path: [], message: 'must be well-formed Unicode (it holds a lone UTF-16 surrogate)' }
  if (value === null || typeof value !== 'object') return null
  if (depth > MAX_DEPTH) return { path: [], message: `nests deeper than ${MAX_DEPTH} levels` }
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue
    if (!key.isWellFormed()) return { path: [key], message: 'is a key that is not well-formed Unicode (it holds a lone UTF-16 surrogate)' }
    const fault = faultIn((value as Record<string, unknown>)[key], depth + 1)
    if (fault) {
      fault.path.push(key)
      return fault
    }
  }
  return null
}

function refuse(code: 'invalid_body' | 'invalid_query', path: readonly string[], message: string): never {
  // A lone surrogate in a field's name is shown escaped (\ud800): the answer stays valid JSON text.
  const field = path.map((k) => JSON.stringify(k).slice(1, -1)).join('.') || '(body)'
  throw new Problem(code, `${field}: ${message}`, { errors: [{ field, message }] })
}
