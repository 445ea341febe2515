import type { AgentPolicy, AgentRef, Transition } from '../hot-state/types.ts'
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
  /** Stores transitions decided outside ingestion (reads, a rebuild) and sends their notifications. */
  persistTransitions(transitions: readonly Transition[]): Promise<void>
  /** POST /config: the agent's new policy, stored and in force; a changed threshold ends a manual override. */
  configure(ref: AgentRef, policy: AgentPolicy): Promise<void>
  /** POST /config/pause: a manual pause or resume, stored and in force. */
  setPaused(ref: AgentRef, paused: boolean): Promise<void>
  /** Finishes what is under way and takes no more. */
  close(): Promise<void>
}
