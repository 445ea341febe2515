/**
 * Money is accounted in integer nano-USD end to end, so a 24 h
 * total is the exact sum of the per-event costs it covers. JSON shows USD numbers.
 * A JS number holds nano-USD exactly up to 2^53 (about 9 million USD), far above any
 * per-agent daily total; larger sums are refused by the callers that could produce them.
 */
export type Nano = number

export const NANO_PER_USD = 1_000_000_000

export function usdToNano(usd: number): Nano {
  return Math.round(usd * NANO_PER_USD)
}

export function nanoToUsd(nano: Nano): number {
  return nano / NANO_PER_USD
}
