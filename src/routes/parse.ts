import type { FastifyRequest } from 'fastify'
import type { z } from 'zod'
import type { Principal } from '../auth/api-keys.ts'
import { Problem, type FieldError } from '../errors.ts'

/** Validates input against a zod schema, or throws a 400 problem naming every bad field. */
export function parse<S extends z.ZodType>(schema: S, input: unknown, code: 'invalid_body' | 'invalid_query'): z.output<S> {
  const result = schema.safeParse(input)
  if (result.success) return result.data
  const errors = fieldErrors(result.error.issues, [], input)
  throw new Problem(code, errors.map((e) => `${e.field}: ${e.message}`).join('; '), { errors })
}

/**
 * Issues as field errors. A value that matches no option of a union is told what the option
 * it comes nearest to (the fewest issues; the first on a tie) finds wrong with it, not that
 * it is "invalid input".
 */
function fieldErrors(issues: readonly z.core.$ZodIssue[], base: readonly PropertyKey[], input: unknown): FieldError[] {
  return issues.flatMap((issue) => {
    const path = [...base, ...issue.path]
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((k) => ({ field: [...path, k].join('.'), message: 'is not a known field' }))
    }
    if (issue.code === 'invalid_union' && issue.errors.length > 0) {
      const nearest = issue.errors.reduce((a, b) => (b.length < a.length ? b : a))
      return fieldErrors(nearest, path, input)
    }
    const field = path.join('.') || '(body)'
    const missing = issue.code === 'invalid_type' && valueAt(input, path) === undefined
    return [{ field, message: missing ? 'is required' : issue.message }]
  })
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input
  for (const key of path) {
    if (value === null || typeof value !== 'object' || !Object.hasOwn(value, key)) return undefined
    value = (value as Record<PropertyKey, unknown>)[key]
  }
  return value
}

/** The verified principal of an authenticated request (set by the auth hook). */
export function principal(request: FastifyRequest): Principal {
  if (!request.principal) throw new Problem('unauthorized', 'missing x-api-key header')
  return request.principal
}

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal
  }
}
