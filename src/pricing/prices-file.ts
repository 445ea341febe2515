/**
 * PRICES_FILE: an operator's own prices, which win over the bundled catalogue
 * (DECISIONS.md "Prices"). Read once at start-up; a bad file stops the start with an
 * error naming the file and the field, because silently mispricing is worse than not starting.
 */
import { readFile } from 'node:fs/promises'
import { z } from 'zod'

/** Model names follow the event value rules (DECISIONS.md: model ≤ 256 characters). */
const modelName = z.string().min(1).max(256)

/**
 * USD per 1M tokens. The upper bound is a unit-mistake guard ($1 per token is already
 * absurd) and keeps every price exactly representable once scaled to pico-USD per token.
 */
const usdPerMillion = z.number().nonnegative().max(1_000_000)

/** strictObject: a typo such as "cache_reads" is an error, not a silently ignored field. */
const modelPriceSchema = z.strictObject({
  input: usdPerMillion,
  output: usdPerMillion,
  cache_read: usdPerMillion.optional(),
  cache_write: usdPerMillion.optional(),
})

export const pricesFileSchema = z.strictObject({
  default_model: modelName.optional(),
  models: z.record(modelName, modelPriceSchema),
})

export type PricesFile = z.infer<typeof pricesFileSchema>
export type PricesFileModel = z.infer<typeof modelPriceSchema>

/** `models["gpt-4o"].input` — the field as an operator would find it in the file. */
function formatPath(path: readonly PropertyKey[]): string {
  let out = ''
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`
    else if (typeof key === 'string' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) out += out ? `.${key}` : key
    else out += `[${JSON.stringify(String(key))}]`
  }
  return out || '(top level)'
}

/** Parses an already-read PRICES_FILE body; `source` names the file in errors. */
export function parsePricesFile(text: string, source: string): PricesFile {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (err) {
    throw new Error(`PRICES_FILE ${source}: not valid JSON: ${(err as Error).message}`, { cause: err })
  }
  const parsed = pricesFileSchema.safeParse(json)
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${formatPath(i.path)}: ${i.message}`)
    throw new Error(`PRICES_FILE ${source}: invalid: ${problems.join('; ')}`)
  }
  return parsed.data
}

export async function loadPricesFile(path: string): Promise<PricesFile> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (err) {
    throw new Error(`PRICES_FILE ${path}: cannot read: ${(err as Error).message}`, { cause: err })
  }
  return parsePricesFile(text, path)
}
