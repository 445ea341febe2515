/** An agent of a user, or the user's fleet (agentId FLEET). */
export interface AgentRef {
  userId: string
  agentId: string
}

/**
 * The fleet of a user, the budget of all of their agents together, is kept as the agent of
 * id '' of that user, which no event can name (an agent id has 1 to 128 characters): its
 * window sums every agent's events, its config, transitions and alerts are rows of the same
 * tables with agent_id '', its Redis keys are named as an agent's. Only its default policy
 * (no budget, no alert levels) and the API's words for it differ.
 */
export const FLEET = ''

export function fleetOf(userId: string): AgentRef {
  return { userId, agentId: FLEET }
}

export function isFleet(ref: AgentRef): boolean {
  return ref.agentId === FLEET
}

/** The key of an agent (or a fleet) in maps and caches: one home for how a (user, agent) pair is joined. */
export function agentKey(ref: AgentRef): string {
  return `${ref.userId}\0${ref.agentId}`
}

/** The pair agentKey() joined. */
export function refOf(key: string): AgentRef {
  const i = key.indexOf('\0')
  return { userId: key.slice(0, i), agentId: key.slice(i + 1) }
}
