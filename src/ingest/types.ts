import type { Transition } from '../hot-state/types.ts'
import type { Nano } from '../money.ts'
import type { EventBody } from '../schemas/event.ts'

/** The answer to POST /events (SPEC.md 4.1), in nano-USD until the route formats it. */
export interface IngestReply {
  eventId: string
  costNano: Nano
  paused: boolean
  totalNano: Nano
  duplicate: boolean
}

/** The write path as the routes and the agent service see it. */
export interface Ingest {
  ingest(userId: string, event: EventBody): Promise<IngestReply>
  /** Stores transitions decided outside ingestion (config, reads, a rebuild) and sends their notifications. */
  persistTransitions(transitions: readonly Transition[]): Promise<void>
  /** Finishes what is under way and takes no more. */
  close(): Promise<void>
}
