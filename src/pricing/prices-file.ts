/**
 * PRICES_FILE: an operator's own prices, which win over the bundled catalogue. Read once at
 * start-up; a bad file stops the start with an error naming the file and the field, because
 * silently mispricing is worse than not starting.
 */
import { readFile } from 'node:fs/promises'
import { z } from 'zod'

/** Model names follow the event value rules: at most 256 characters. */
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
  /**
   * Any other quantity, by the price library's price keys: USD per 1M tokens for
   * a `_mtok` key (input_audio_mtok, cache_write_1h_mtok, …), per 1,000 for a `_kcount` key
   * (web_searches_kcount, requests_kcount). Used for events that carry a usage object.
   */
  quantities: z.record(z.string().regex(/^[a-z0-9_]+_(mtok|kcount)$/, 'must be a price key of the price library, e.g. input_audio_mtok or web_searches_kcount'), usdPerMillion).optional(),
})

export const pricesFileSchema = z.strictObject({
  default_model: modelName.optional(),
  models: z.record(modelName, modelPriceSchema).default({}),
  /**
   * Multipliers of a provider's service tiers, by the name the provider reports:
   * e.g. {"batch": 0.5, "flex": 0.5, "priority": 1.8}. The price data has none of its own.
   */
  service_tiers: z.record(z.string().min(1).max(64), z.number().positive().max(100)).optional(),
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
