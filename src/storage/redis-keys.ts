import { hash } from 'node:crypto'
import { agentKey } from '../hot-state/agent-ref.ts'

/**
 * How burnrate names its Redis keys: every key of a user -- its agents' hot state,
 * its own state, the journal streams its rows go to -- carries the hash tag of the user's
 * partition, {p<n>}, so one script can touch them all in one Redis Cluster slot.
 */
export const DEFAULT_PARTITIONS = 16

export function partitionOf(userId: string, partitions: number): number {
  return hash('sha256', userId, 'buffer').readUInt32LE(0) % partitions
}

export function partitionTag(partition: number): string {
  return `{p${partition}}`
}

/**
 * An agent's name in key names: 32 hex characters of SHA-256 of (user, agent), whatever
 * characters the ids hold (no escaping, a fixed length however long the ids).
 */
export function agentKeyId(userId: string, agentId: string): string {
  return hash('sha256', agentKey({ userId, agentId }), 'hex').slice(0, 32)
}

/** A user's name in key names: 32 hex characters of SHA-256 of the user id. */
export function userKeyId(userId: string): string {
  return hash('sha256', userId, 'hex').slice(0, 32)
}

/**
 * An event id as the Redis hot state remembers it: 12 bytes of SHA-256 of (user, agent, event
 * id), as 24 hex characters. Two ids of one partition share one by chance with probability
 * about n²/2⁹⁷ (none in practice), and no user can choose an id that collides with another
 * user's. Text, not bytes: one Buffer among a command's arguments turns ioredis's encoding
 * of the whole command into Buffer concatenation, which cost a tenth of the CPU (bench/).
 */
export function eventFingerprint(userId: string, agentId: string, eventId: string): string {
  return hash('sha256', `${agentKey({ userId, agentId })}\0${eventId}`, 'hex').slice(0, 24)
}
