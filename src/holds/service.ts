import { randomUUID } from 'node:crypto'
import type { Clock } from '../clock.ts'
import { Problem } from '../errors.ts'
import type { HoldRefusal, HotState, PausedReason } from '../hot-state/types.ts'
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
  /** The call's worst case: all of its input and max_output_tokens of output, at its model's prices. */
  worstCaseNano: Nano
  remainingNano: Nano
  /** Epoch ms; null when refused. */
  expiresAt: number | null
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

  async hold(userId: string, body: HoldBody): Promise<HoldReply> {
    const now = this.#d.clock.now()
    // Cache tokens only make a call cheaper: every input token at the input price is the worst case.
    const { costNano } = this.#d.prices.cost(body.model, { input_tokens: body.input_tokens, output_tokens: body.max_output_tokens })
    const holdId = body.hold_id ?? randomUUID()
    const expiresAt = now + body.ttl_seconds * 1000
    const r = await this.#d.hotState.hold({ userId, agentId: body.agent_id }, { holdId, costNano, expiresAt }, now)
    this.#d.onHold?.(r.refusal)
    const granted = r.refusal === null
    return {
      holdId: granted ? holdId : null,
      refusal: r.refusal,
      paused: r.paused,
      pausedReason: r.pausedReason,
      worstCaseNano: costNano,
      remainingNano: r.remainingNano,
      expiresAt: granted ? expiresAt : null,
    }
  }

  /** DELETE /holds/{id}: 404 unless it is an open hold of the user. */
  async release(userId: string, holdId: string): Promise<{ agentId: string; costNano: Nano }> {
    const released = await this.#d.hotState.release(userId, holdId, this.#d.clock.now())
    if (!released) throw new Problem('hold_not_found', `no open hold ${holdId} for this API key's user: settled, released, expired or never granted`)
    return released
  }
}
