import { Heap } from 'heap-js'
import { Problem } from '../errors.ts'
import type { Nano } from '../money.ts'

/** An open budget hold of one agent, as the in-process hot state keeps it. */
export interface OpenHold {
  id: string
  agentId: string
  costNano: Nano
  /** Epoch ms; the hold is gone at and after this instant. */
  expiresAt: number
  /** The run it is held for, when its agent has a run budget. */
  runId?: string | undefined
}

/**
 * One user's open holds (memory.ts): by id, and by expiry so expired ones leave from the
 * head, each once (amortised O(log n) per hold). A hold settled or released early leaves the
 * heap only when its expiry comes; the heap holds at most the holds of the last hour (a
 * hold lives at most 3600 s).
 */
export class HoldBook {
  readonly #open = new Map<string, OpenHold>()
  readonly #byExpiry = new Heap<OpenHold>((a, b) => a.expiresAt - b.expiresAt)

  get size(): number {
    return this.#open.size
  }

  get(id: string): OpenHold | undefined {
    return this.#open.get(id)
  }

  add(hold: OpenHold): void {
    this.#open.set(hold.id, hold)
    this.#byExpiry.push(hold)
  }

  /** Removes the hold and answers it; undefined when it is not open. */
  take(id: string): OpenHold | undefined {
    const hold = this.#open.get(id)
    if (hold) this.#open.delete(id)
    return hold
  }

  /** Removes the holds expired at `now`, telling `gone` of each that was still open. */
  expire(now: number, gone: (hold: OpenHold) => void): void {
    for (let head = this.#byExpiry.peek(); head && head.expiresAt <= now; head = this.#byExpiry.peek()) {
      this.#byExpiry.pop()
      if (this.#open.get(head.id) === head) {
        this.#open.delete(head.id)
        gone(head)
      }
    }
  }
}

/** An llm_call naming an open hold of another agent of its user. */
export function holdOfAnotherAgent(holdId: string): Problem {
  return new Problem('hold_not_found', `hold ${holdId} is not a hold of this agent`, { errors: [{ field: 'hold_id', message: 'names an open hold of another agent' }] })
}