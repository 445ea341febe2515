import { randomUUID } from 'node:crypto'
import type { Clock } from '../clock.ts'
import type { HoldRefusal, HotState, PausedReason, RateCharge, RateState, ReleasedHold } from '../hot-state/types.ts'
import type { Nano } from '../money.ts'
import type { PriceTable } from '../pricing/price-table.ts'
import type { HoldBody } from '../schemas/hold.ts'

export interface HoldServiceDeps {
  hotState: HotState
  prices: PriceTable
  clock: Clock
  /** Told each hold asked for, granted or refused (a metric). */
  onHold?: (refusal: HoldRefusal | null) => void
}

/** The answer to POST /holds, in nano-USD until the route formats it. */
export interface HoldReply {
  /** null when refused: nothing is held then. */
  holdId: string | null
  refusal: HoldRefusal | null
  paused: boolean
  pausedReason: PausedReason | null
  pausedPeriod: string | null
  /** The call's worst case: all of its input and max_output_tokens of output, at its model's prices. */
  worstCaseNano: Nano
  remainingNano: Nano
  /** Epoch ms; null when refused. */
  expiresAt: number | null
  /** Its API key's budget of events after this request. */
  rate: RateState | null
}

/**
 * Budget holds: before a call, an agent reserves its worst case against its
 * budget and its fleet's, so parallel calls cannot each pass the check and together overshoot
 * it; the llm_call that reports the call settles the hold (IngestService, the hot state's
 * record step). The hot state decides and keeps them, atomically with every event.
 */
export class HoldService {
  readonly #d: HoldServiceDeps

  constructor(deps: HoldServiceDeps) {
    this.#d = deps
  }

  async hold(userId: string, body: HoldBody, rate?: RateCharge): Promise<HoldReply> {
    const now = this.#d.clock.now()
    // Cache tokens only make a call cheaper: every input token at the input price is the worst case.
    const { costNano } = this.#d.prices.cost(body.model, { input_tokens: body.input_tokens, output_tokens: body.max_output_tokens })
    const holdId = body.hold_id ?? randomUUID()
    const expiresAt = now + body.ttl_seconds * 1000
    const r = await this.#d.hotState.hold({ userId, agentId: body.agent_id }, { holdId, costNano, expiresAt, rate, runId: body.run_id }, now)
    this.#d.onHold?.(r.refusal)
    const granted = r.refusal === null
    return {
      holdId: granted ? holdId : null,
      refusal: r.refusal,
      paused: r.paused,
      pausedReason: r.pausedReason,
      pausedPeriod: r.pausedPeriod,
      worstCaseNano: costNano,
      remainingNano: r.remainingNano,
      expiresAt: granted ? expiresAt : null,
      rate: r.rate,
    }
  }

  /** DELETE /holds/{id}: the hold released (null unless it was an open hold of the user), and the key's budget. */
  async release(userId: string, holdId: string, rate?: RateCharge): Promise<{ released: ReleasedHold | null; rate: RateState | null }> {
    const { hold, rate: after } = await this.#d.hotState.release(userId, holdId, this.#d.clock.now(), rate)
    return { released: hold, rate: after }
  }
}
