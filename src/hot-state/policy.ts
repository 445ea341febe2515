import type { Nano } from '../money.ts'
import { limitsChanged, periodOfMeter, shownReason, type Meter, type MeterId, type ResolvedMeter } from './meters.ts'
import { NOT_IGNORED, RUNNING, type HoldRefusal, type Ignored, type PausedReason, type PauseState, type TransitionReason } from './types.ts'

/**
 * The budget rules, as pure functions over one state (an agent's, or its fleet's: a fleet's
 * window sums every agent of its user) and its meters resolved for the moment (meters.ts).
 * Both hot states step their states through these functions, and lua/rules.lua mirrors them
 * function for function and branch for branch, so the two cannot differ in what they decide;
 * the contract suite runs the same random histories through both and compares every answer.
 *
 * - A meter is over when what its window holds (plus the open holds, for a meter that counts
 *   them) is strictly above its limit.
 * - A manual override (a resume by hand while a meter was over) ends once no meter is over.
 * - A pause by a meter with auto_resume ends once that meter is at or under its limit; a
 *   pause by hand holds until a resume by hand.
 * - Only a counted event may pause (reads and holds never start a pause): a running state
 *   without override is paused by the first meter over its limit, in METER_KINDS order.
 * - Alert levels fire once per crossing and re-arm once the spend is below them again.
 */
export interface Judged {
  /** Replaced on every change, never changed in place (snapshots share it). */
  pause: PauseState
  /** What each meter's window holds, in the order of the meters judged with it. */
  spent: Nano[]
  /** The sum of the open budget holds. */
  held: Nano
  /** Per meter, a bit per alert level (bit i: alertAt[i]) that fired and has not re-armed. */
  alerted: Partial<Record<MeterId, number>>
}

/** A change of pause state the rules made: why, the meter that made it (an index into the meters, -1 for none), and the state it made. */
export interface Change {
  reason: TransitionReason
  meter: number
  pause: PauseState
}

/** An alert level crossed: the meter (an index into the meters) and the level. */
export interface Fired {
  meter: number
  level: number
}

/** Whether a meter is over its limit with `spent` in its window and `held` open. */
export function over(m: ResolvedMeter, spent: Nano, held: Nano): boolean {
  return spent + (m.countsHolds ? held : 0) > m.limitNano
}

/** The first meter over its limit, or -1. */
export function firstOver(s: Judged, meters: readonly ResolvedMeter[]): number {
  for (let i = 0; i < meters.length; i++) if (over(meters[i]!, s.spent[i]!, s.held)) return i
  return -1
}

/** The relaxing rules: an override ends, or a pause ends by itself. Reads apply them too. */
export function relax(s: Judged, meters: readonly ResolvedMeter[]): Change | null {
  if (s.pause.override) {
    if (firstOver(s, meters) >= 0) return null
    s.pause = { ...s.pause, override: false }
    return { reason: 'override_cleared', meter: -1, pause: s.pause }
  }
  if (!s.pause.paused) return null
  const i = meters.findIndex((m) => m.id === s.pause.reason)
  if (i < 0 || !meters[i]!.autoResume || over(meters[i]!, s.spent[i]!, s.held)) return null
  s.pause = RUNNING
  return { reason: 'auto_resume', meter: i, pause: s.pause }
}

/** A running state without override is paused by the first meter over its limit. */
export function cross(s: Judged, meters: readonly ResolvedMeter[], now: number): Change | null {
  if (s.pause.paused || s.pause.override) return null
  const i = firstOver(s, meters)
  if (i < 0) return null
  s.pause = { paused: true, reason: meters[i]!.id, override: false, since: now }
  return { reason: meters[i]!.id, meter: i, pause: s.pause }
}

/**
 * The alert levels: a level fires when its meter's spend is at or above its share of the
 * limit and its bit is clear (only when `mayFire`: an event counted), and re-arms once the
 * spend is below it. Holds never count. Returns the levels fired, lowest first per meter.
 */
export function alerts(s: Judged, meters: readonly ResolvedMeter[], mayFire: boolean): readonly Fired[] {
  let fired: Fired[] | undefined
  for (let i = 0; i < meters.length; i++) {
    const m = meters[i]!
    if (m.alertAt.length === 0) continue
    let bits = s.alerted[m.id] ?? 0
    // Below the lowest level with none fired: nothing fires, nothing re-arms (most events).
    if (bits === 0 && s.spent[i]! < m.alertAt[0]! * m.limitNano) continue
    for (let j = 0; j < m.alertAt.length; j++) {
      const bit = 1 << j
      if (s.spent[i]! >= m.alertAt[j]! * m.limitNano) {
        if (mayFire && (bits & bit) === 0) {
          bits |= bit
          ;(fired ??= []).push({ meter: i, level: m.alertAt[j]! })
        }
      } else {
        bits &= ~bit
      }
    }
    s.alerted[m.id] = bits
  }
  // Almost every event fires none: no array of its own for it.
  return fired ?? NONE_FIRED
}

const NONE_FIRED: readonly Fired[] = Object.freeze([])

/** What counting one event changed in one state: before its cost was added, and after. */
export interface Counted {
  /** What the passing of time relaxed, judged before the event's cost. */
  relaxed: Change | null
  /** The pause the event's cost caused. */
  crossed: Change | null
  fired: readonly Fired[]
}

/**
 * One event counted in one state: what the passing of time relaxed comes first (an override
 * ends when the spend fell back, even if this event takes it over again), then the levels
 * the spend fell below re-arm, then the event's cost is added to every meter (its minute is
 * in every window), then the pause and the alerts it causes.
 */
export function countEvent(s: Judged, meters: readonly ResolvedMeter[], costNano: Nano, now: number): Counted {
  const relaxed = relax(s, meters)
  alerts(s, meters, false)
  for (let i = 0; i < meters.length; i++) s.spent[i]! += costNano
  const crossed = cross(s, meters, now)
  return { relaxed, crossed, fired: alerts(s, meters, true) }
}

/** What an event did to its agent and to its fleet. */
export interface EventStep {
  agent: Counted
  fleet: Counted
  /** The agent's llm_calls after the pause that holds it (countIgnored). */
  ignored: Ignored
  /** Whether this event raised the ignoring-pause flag. */
  raised: boolean
}

/**
 * One counted event's rules, in their order: an llm_call is judged against the pause its
 * client was told of before it (the agent's own, else its fleet's: countIgnored), then the
 * event is counted in the agent's state and in its fleet's.
 */
export function stepEvent(
  agent: Judged,
  fleet: Judged,
  meters: { agent: readonly ResolvedMeter[]; fleet: readonly ResolvedMeter[] },
  e: { costNano: Nano; llmCall: boolean; ignored: Ignored; graceMs: number },
  now: number,
): EventStep {
  const { ignored, raised } = e.llmCall ? countIgnored(e.ignored, holdingPause(agent.pause, fleet.pause)?.pause.since ?? 0, now, e.costNano, e.graceMs) : { ignored: e.ignored, raised: false }
  return { ignored, raised, agent: countEvent(agent, meters.agent, e.costNano, now), fleet: countEvent(fleet, meters.fleet, e.costNano, now) }
}

/** What a hold request did: the relaxing rules of the agent and of its fleet, and the verdict. */
export interface HoldStep {
  agent: Change | null
  fleet: Change | null
  refusal: HoldRefusal | null
}

/**
 * A budget hold of `costNano` asked for: the relaxing rules apply first (an auto-resumed
 * agent may hold again), then the hold is refused while a pause holds the agent, or when a
 * meter that counts holds (of the agent, or of its fleet) would go over its limit with it. A
 * state in override is not held to its limits: a manual resume over budget lets the agent
 * run. A retry of a hold still open is that hold again, never refused.
 */
export function stepHold(
  agent: Judged,
  fleet: Judged,
  meters: { agent: readonly ResolvedMeter[]; fleet: readonly ResolvedMeter[] },
  costNano: Nano,
  retry: boolean,
  run?: BudgetedRun,
): HoldStep {
  const relaxed = { agent: relax(agent, meters.agent), fleet: relax(fleet, meters.fleet) }
  if (retry) return { ...relaxed, refusal: null }
  if (holdingPause(agent.pause, fleet.pause)) return { ...relaxed, refusal: 'paused' }
  const a = wouldGoOver(agent, meters.agent, costNano)
  if (a >= 0) return { ...relaxed, refusal: meters.agent[a]!.period ? 'period_budget' : 'budget' }
  const f = wouldGoOver(fleet, meters.fleet, costNano)
  if (f >= 0) return { ...relaxed, refusal: meters.fleet[f]!.period ? 'fleet_period_budget' : 'fleet_budget' }
  if (run && (run.s.stopped || run.s.spent + run.s.held + costNano > run.budgetNano)) return { ...relaxed, refusal: 'run_budget' }
  return { ...relaxed, refusal: null }
}

/**
 * A run of an agent whose policy has a run budget, as the rules judge it: what its events
 * cost, the open holds asked for it, and whether its budget stopped it. A stop holds that
 * run only, for good: its later events are answered paused, the agent's other runs go on.
 */
export interface RunJudged {
  spent: Nano
  held: Nano
  stopped: boolean
}

/** A run and the budget it is held to. */
export interface BudgetedRun {
  s: RunJudged
  budgetNano: Nano
}

/**
 * One counted event of a run: its cost is added, and the first llm_call that takes the
 * run's spend, with its open holds, strictly over its budget stops it. Returns whether this
 * event stopped it.
 */
export function countRun(run: BudgetedRun, costNano: Nano, llmCall: boolean): boolean {
  const s = run.s
  s.spent += costNano
  if (s.stopped || !llmCall || s.spent + s.held <= run.budgetNano) return false
  s.stopped = true
  return true
}

/** The first meter that counts holds and would go over its limit with `costNano` more, or -1. */
function wouldGoOver(s: Judged, meters: readonly ResolvedMeter[], costNano: Nano): number {
  if (s.pause.override) return -1
  for (let i = 0; i < meters.length; i++) if (meters[i]!.countsHolds && over(meters[i]!, s.spent[i]! + costNano, s.held)) return i
  return -1
}

/** What further holds could take: the least room any meter that counts holds has left, of the agent or its fleet. */
export function holdRoom(states: ReadonlyArray<{ s: Judged; meters: readonly ResolvedMeter[] }>): Nano {
  let room = Infinity
  for (const { s, meters } of states) {
    for (let i = 0; i < meters.length; i++) if (meters[i]!.countsHolds) room = Math.min(room, meters[i]!.limitNano - s.spent[i]! - s.held)
  }
  return room
}

/**
 * A pause or resume by hand. A manual pause holds until a manual resume (pausing an agent a
 * meter paused makes the pause manual: auto-resume no longer ends it); a resume while a
 * meter is over starts an override (relax says until when). Null when nothing changes.
 */
export function manual(s: Judged, meters: readonly ResolvedMeter[], paused: boolean, now: number): Change | null {
  if (s.pause.paused === paused && !(paused && s.pause.reason !== 'manual')) return null
  s.pause = paused ? { paused: true, reason: 'manual', override: false, since: now } : { paused: false, reason: null, override: firstOver(s, meters) >= 0, since: 0 }
  return { reason: 'manual', meter: -1, pause: s.pause }
}

/**
 * A new policy: each meter kept keeps the state of the alert levels it keeps (a new level
 * starts armed), and an override ends when a limit changed, as the override was granted
 * against the limits in force.
 */
export function changePolicy(s: Judged, before: readonly Meter[], after: readonly Meter[]): Change | null {
  const alerted: Judged['alerted'] = {}
  for (const m of after) {
    const old = before.find((b) => b.id === m.id)
    if (old && old.alertAt.length > 0 && m.alertAt.length > 0) alerted[m.id] = carryAlerts(s.alerted[m.id] ?? 0, old.alertAt, m.alertAt)
  }
  s.alerted = alerted
  if (!s.pause.override || !limitsChanged(before, after)) return null
  s.pause = { ...s.pause, override: false }
  return { reason: 'threshold_changed', meter: -1, pause: s.pause }
}

/** The bits of `alerted` (over `from`'s levels) carried to `to`'s levels: a level kept keeps its state. */
export function carryAlerts(alerted: number, from: readonly number[], to: readonly number[]): number {
  return to.reduce((bits, level, i) => {
    const j = from.indexOf(level)
    return j >= 0 && (alerted & (1 << j)) !== 0 ? bits | (1 << i) : bits
  }, 0)
}

/** The bits of the levels `spent` is at or above (a loaded or rebuilt state starts from them: they fired when the spend got there). */
export function levelsReached(m: Pick<Meter, 'alertAt' | 'limitNano'>, spent: Nano): number {
  let bits = 0
  for (let i = 0; i < m.alertAt.length; i++) if (spent >= m.alertAt[i]! * m.limitNano) bits |= 1 << i
  return bits
}

/**
 * An agent is paused when its own state or its fleet's says so; its own pause comes first,
 * as it outlasts the fleet's (a fleet resumed leaves a paused agent paused). Returns the
 * pause that holds, null while both run.
 */
export function holdingPause<T extends Told>(agent: T, fleet: T): { pause: T; fleet: boolean } | null {
  if (agent.paused) return { pause: agent, fleet: false }
  if (fleet.paused) return { pause: fleet, fleet: true }
  return null
}

/** Why the pause that holds (holdingPause) holds, as the API says it; null when none does. */
export function pausedReasonOf(holding: { pause: Told; fleet: boolean } | null): PausedReason | null {
  if (!holding || holding.pause.reason === null) return null
  const reason = shownReason(holding.pause.reason)
  return holding.fleet ? `fleet_${reason}` : reason
}

/** The period of the period budget whose pause holds (`month`, `window_30d`); null for any other pause or none. */
export function pausedPeriodOf(holding: { pause: Told } | null): string | null {
  return holding?.pause.reason ? periodOfMeter(holding.pause.reason) : null
}

/**
 * Whether an agent, or the run an answer is about, is paused (holdingPause), why as the API
 * says it, and the period of a period budget's pause. A pause of the agent or its fleet
 * comes before its run's stop: it holds every run.
 */
export function pausedBy(agent: Told, fleet: Told, runStopped = false): { paused: boolean; pausedReason: PausedReason | null; pausedPeriod: string | null } {
  const holding = holdingPause(agent, fleet)
  if (holding) return { paused: true, pausedReason: pausedReasonOf(holding), pausedPeriod: pausedPeriodOf(holding) }
  return runStopped ? RUN_STOPPED : NOT_PAUSED
}

const NOT_PAUSED = Object.freeze({ paused: false, pausedReason: null, pausedPeriod: null })
const RUN_STOPPED = Object.freeze({ paused: true, pausedReason: 'run_budget' as const, pausedPeriod: null })

/** What an answer tells of a pause state. */
type Told = Pick<PauseState, 'paused' | 'reason'>

/**
 * Agents that ignore their pause: an llm_call arriving at `now` while a pause holds
 * (`since`, when it began; 0: none) and more than `graceMs` after it began (a call already
 * in flight at the pause is forgiven) is ignored: counted, and the first such call of that
 * pause raises the flag. Counts of an earlier pause start again; with no pause holding,
 * there is nothing to count.
 */
export function countIgnored(ign: Ignored, since: number, now: number, costNano: Nano, graceMs: number): { ignored: Ignored; raised: boolean } {
  if (since === 0) return { ignored: ign.since === 0 ? ign : NOT_IGNORED, raised: false }
  const base = ign.since === since ? ign : { ...NOT_IGNORED, since }
  if (now <= since + graceMs) return { ignored: base, raised: false }
  return { ignored: { since, calls: base.calls + 1, nano: base.nano + costNano, flagged: true }, raised: !base.flagged }
}

/** Whether the ignoring-pause flag holds: raised against the pause that holds now (`since`); a resume clears it. */
export function ignoring(ign: Ignored, since: number): boolean {
  return ign.flagged && since !== 0 && ign.since === since
}
