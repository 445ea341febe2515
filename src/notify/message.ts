/**
 * The chat message sent when an agent is auto-paused: a Slack incoming-webhook payload, which
 * Mattermost, Rocket.Chat and Discord's Slack-compatible endpoint (/slack) accept as well.
 * Only `text` is used: it is the one field all four render; Slack `blocks` are ignored or
 * rejected by some of the others.
 */

export interface PauseNotice {
  /** Names this notification on every attempt (the Idempotency-Key header): the same pause, the same id. */
  id: string
  userId: string
  /** null: the user's fleet, its budget over all of their agents. */
  agentId: string | null
  /** Rolling 24 h total that crossed the threshold, in USD. */
  totalUsd: number
  thresholdUsd: number
  /** A velocity pause: the spend within the last `windowMinutes`, over `limitUsd`. */
  velocity?: { spentUsd: number; limitUsd: number; windowMinutes: number }
  /**
   * A period budget's pause (`resumed` false) or its end by itself (true): the period
   * (`month`, `window_30d`), what it held and its limit.
   */
  period?: { name: string; spentUsd: number; limitUsd: number; resumed: boolean }
  /** The open budget holds counted with the total, when there were any. */
  heldUsd?: number
  at: Date
}

/** An alert level crossed: sent before the pause, once per crossing. */
export interface AlertNotice {
  /** Names this notification on every attempt: the same alert, the same id. */
  id: string
  userId: string
  /** null: the user's fleet. */
  agentId: string | null
  /** The level crossed, a fraction of the threshold. */
  level: number
  totalUsd: number
  thresholdUsd: number
  /** When the total reaches the threshold at the last hour's rate (projection.ts), or null. */
  exhaustionAt: Date | null
  /** A period budget's level: its period (`month`, `window_30d`); absent: the daily budget's. */
  period?: string
  at: Date
}

/** An agent that went on calling the model after its pause and its grace period, once per pause. */
export interface IgnoredNotice {
  /** Names this notification on every attempt. */
  id: string
  userId: string
  agentId: string
  pausedAt: Date
  /** Its llm_calls after the grace period, and their cost, up to this notice. */
  calls: number
  spentUsd: number
  at: Date
}

/** A run stopped by its agent's run budget: its other runs go on. */
export interface RunStopNotice {
  /** Names this notification on every attempt. */
  id: string
  userId: string
  agentId: string
  runId: string
  /** What the run's events cost, with the call that stopped it, its open holds, and its budget. */
  spentUsd: number
  heldUsd: number
  budgetUsd: number
  at: Date
}

export type Notice = PauseNotice | AlertNotice | IgnoredNotice | RunStopNotice

export interface ChatMessage {
  text: string
}

// Fixed locale, so the message does not depend on the host's; up to 6 decimals, so a total just
// over the threshold (e.g. $10.0004 against $10.00) does not read as equal to it.
const usd = new Intl.NumberFormat('en-US', {
  style: 'currency',
  currency: 'USD',
  minimumFractionDigits: 2,
  maximumFractionDigits: 6,
})

/** "$12.50", "$10.0004", "$1,234.00". */
export function formatUsd(amount: number): string {
  return usd.format(amount)
}

/**
 * Slack requires &, < and > in message text to be escaped and shows them back as typed; left as
 * they are, an agent id such as "<!channel>" would notify a whole channel or forge a link.
 * https://api.slack.com/reference/surfaces/formatting#escaping
 */
function escapeSlack(text: string): string {
  return text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;')
}

/** An id as inline code, so * _ ~ in it are not read as formatting. */
function label(id: string): string {
  const escaped = escapeSlack(id)
  // A backtick would end the code span early; such ids are shown plain.
  return id.includes('`') ? escaped : `\`${escaped}\``
}

/** What a notice is about: an agent, or a user's fleet. */
function subject(notice: Notice): string {
  return notice.agentId === null ? `the fleet of user ${label(notice.userId)}` : `agent ${label(notice.agentId)}`
}

/** ISO 8601 UTC to the second. */
function utcSeconds(at: Date): string {
  return at.toISOString().replace(/\.\d{3}Z$/, 'Z')
}

export function pauseMessage(notice: PauseNotice): ChatMessage {
  const what = notice.agentId === null ? `every agent of user ${label(notice.userId)}: the fleet's` : `agent ${label(notice.agentId)}: its`
  const p = notice.period
  if (p) return periodMessage(notice, p)
  const v = notice.velocity
  if (v) {
    const minutes = v.windowMinutes === 1 ? 'minute' : `${v.windowMinutes} minutes`
    return {
      text:
        `burnrate paused ${what} spend of the last ${minutes}, ${formatUsd(v.spentUsd)}, went over its limit of ` +
        `${formatUsd(v.limitUsd)} per ${minutes}: it stays paused until resumed by hand (${utcSeconds(notice.at)}).`,
    }
  }
  return {
    text:
      `burnrate paused ${what} 24 h spend ${formatUsd(notice.totalUsd)} ` +
      (notice.heldUsd ? `and ${formatUsd(notice.heldUsd)} held for calls in flight ` : '') +
      `exceeded its daily budget of ${formatUsd(notice.thresholdUsd)} (${utcSeconds(notice.at)}).`,
  }
}

/** "this month" or "the last 30 days" (periods.ts periodName). */
function periodPhrase(name: string): string {
  const days = /^window_(\d+)d$/.exec(name)
  if (days) return days[1] === '1' ? 'the last day' : `the last ${days[1]} days`
  return `this ${name}`
}

function periodMessage(notice: PauseNotice, p: NonNullable<PauseNotice['period']>): ChatMessage {
  const when = utcSeconds(notice.at)
  const rolling = p.name.startsWith('window_')
  if (p.resumed) {
    const who = notice.agentId === null ? `every agent of user ${label(notice.userId)} (the fleet's period budget)` : `agent ${label(notice.agentId)}`
    const why = rolling
      ? `its spend of ${periodPhrase(p.name)}, ${formatUsd(p.spentUsd)}, is back within its limit of ${formatUsd(p.limitUsd)}`
      : `a new ${p.name} began, with its budget of ${formatUsd(p.limitUsd)}`
    return { text: `burnrate resumed ${who}: ${why} (${when}).` }
  }
  const what = notice.agentId === null ? `every agent of user ${label(notice.userId)}: the fleet's` : `agent ${label(notice.agentId)}: its`
  const until = rolling ? 'until that spend is back within the limit' : `until the next ${p.name} begins`
  return {
    text: `burnrate paused ${what} spend of ${periodPhrase(p.name)}, ${formatUsd(p.spentUsd)}, went over its budget of ${formatUsd(p.limitUsd)}: it stays paused ${until} (${when}).`,
  }
}

export function alertMessage(notice: AlertNotice): ChatMessage {
  const left = notice.thresholdUsd - notice.totalUsd
  const budget = notice.period === undefined ? 'daily budget' : `budget for ${periodPhrase(notice.period)}`
  const within = notice.period === undefined ? 'the last 24 h' : periodPhrase(notice.period)
  const horizon = notice.period === undefined ? 'within a day' : notice.period.startsWith('window_') ? `within ${periodPhrase(notice.period).slice(9)}` : `this ${notice.period}`
  const runsOut =
    notice.exhaustionAt === null
      ? `at its spend rate of the last hour it would not run out ${horizon}`
      : `at its spend rate of the last hour it runs out at ${utcSeconds(notice.exhaustionAt)}`
  return {
    text:
      `burnrate: ${subject(notice)} reached ${Math.round(notice.level * 100)} % of its ${budget}: ` +
      `${formatUsd(notice.totalUsd)} of ${formatUsd(notice.thresholdUsd)} in ${within}, ${formatUsd(Math.max(0, left))} left; ` +
      `${runsOut} (${utcSeconds(notice.at)}).`,
  }
}

export function ignoredMessage(notice: IgnoredNotice): ChatMessage {
  return {
    text:
      `burnrate: agent ${label(notice.agentId)} keeps calling the model after it was paused at ${utcSeconds(notice.pausedAt)}: ` +
      `${notice.calls} ${notice.calls === 1 ? 'call' : 'calls'} (${formatUsd(notice.spentUsd)}) after the grace period; ` +
      `its client does not stop on paused: true (${utcSeconds(notice.at)}).`,
  }
}

export function runStopMessage(notice: RunStopNotice): ChatMessage {
  const held = notice.heldUsd > 0 ? `, with ${formatUsd(notice.heldUsd)} held for calls in flight,` : ''
  return {
    text:
      `burnrate: run ${label(notice.runId)} of agent ${label(notice.agentId)} was stopped by its run budget: ` +
      `it spent ${formatUsd(notice.spentUsd)}${held} over its ${formatUsd(notice.budgetUsd)}; the agent's other runs go on (${utcSeconds(notice.at)}).`,
  }
}

/** The message of a notice: pause, alert, ignored pause or stopped run. */
export function chatMessage(notice: Notice): ChatMessage {
  if ('runId' in notice) return runStopMessage(notice)
  return 'level' in notice ? alertMessage(notice) : 'pausedAt' in notice ? ignoredMessage(notice) : pauseMessage(notice)
}
