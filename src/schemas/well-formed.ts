import { Problem } from '../errors.ts'

/** How deep a request's JSON may nest: the body itself is one level, `metadata` another (DECISIONS.md "Value rules"). */
export const MAX_DEPTH = 32

/**
 * Checks request data at the edge (issue 9), before any schema: every string, object keys
 * included, must be well-formed Unicode (a lone UTF-16 surrogate, which JSON's \u escapes
 * can carry, is refused: ClickHouse, Redis key names and URLs cannot hold it as it is), and
 * objects and arrays nest at most MAX_DEPTH levels. Iterative, so no depth of input reaches
 * the stack. Throws a 400 problem naming the first field at fault.
 */
export function assertWellFormed(data: unknown, code: 'invalid_body' | 'invalid_query'): void {
  const stack: Array<{ value: unknown; path: string[]; depth: number }> = [{ value: data, path: [], depth: 1 }]
  while (stack.length > 0) {
    const { value, path, depth } = stack.pop()!
    if (typeof value === 'string') {
      if (!value.isWellFormed()) refuse(code, path, 'must be well-formed Unicode (it holds a lone UTF-16 surrogate)')
      continue
    }
    if (value === null || typeof value !== 'object') continue
    if (depth > MAX_DEPTH) refuse(code, path, `nests deeper than ${MAX_DEPTH} levels`)
    for (const [key, child] of Object.entries(value)) {
      const at = [...path, key]
      if (!key.isWellFormed()) refuse(code, at, 'is a key that is not well-formed Unicode (it holds a lone UTF-16 surrogate)')
      stack.push({ value: child, path: at, depth: depth + 1 })
    }
  }
}

function refuse(code: 'invalid_body' | 'invalid_query', path: readonly string[], message: string): never {
  // A lone surrogate in a field's name is shown escaped (\ud800): the answer stays valid JSON text.
  const field = path.map((k) => JSON.stringify(k).slice(1, -1)).join('.') || '(body)'
  throw new Problem(code, `${field}: ${message}`, { errors: [{ field, message }] })
}
