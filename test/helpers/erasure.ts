import { execFileSync } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { expect } from 'vitest'
import { api } from './process.ts'

/**
 * A user to erase and what they left: every id distinctive (a random hex tail), so that a
 * grep of the data files or of Redis for any of them finds only what is theirs.
 */
export interface Victim {
  user: string
  agents: string[]
  runs: string[]
  eventIds: string[]
  /** A value of their events' metadata and of a key's name. */
  marker: string
  key: string
  keyId: string
}

export function victimIds(): Omit<Victim, 'key' | 'keyId' | 'eventIds'> {
  const tail = randomBytes(6).toString('hex')
  return {
    user: `erasevictim${tail}`,
    agents: [`victimagenta${tail}`, `victimagentb${tail}`, `victimagentc${tail}`],
    runs: [`victimrun${tail}`],
    marker: `victimmarker${tail}`,
  }
}

/**
 * What a victim does through the API: a config with a low budget, events of a run that take
 * the agent over it (a pause, an alert), a tool call, a hold left open on another agent, a
 * manual pause of a third. Returns the event ids it sent (each acknowledged).
 */
export async function victimActivity(url: string, v: Omit<Victim, 'eventIds'>): Promise<string[]> {
  const [a, b, c] = v.agents as [string, string, string]
  const ok = async (path: string, body: unknown, status = 200) => {
    const res = await api(url, 'POST', path, v.key, body)
    expect(res.status, `${path}: ${JSON.stringify(res.body)}`).toBe(status)
    return res.body
  }
  await ok('/config', { agent_id: a, cost_threshold_usd: 0.01 })
  const eventIds: string[] = []
  const send = async (event: Record<string, unknown>) => {
    const id = randomUUID()
    eventIds.push(id)
    await ok('/events', { event_id: id, ...event })
  }
  await send({ agent_id: a, event_type: 'agent_start', run_id: v.runs[0] })
  for (let i = 0; i < 2; i++) {
    await send({ agent_id: a, event_type: 'llm_call', model: 'gpt-4o', input_tokens: 1000, output_tokens: 500, run_id: v.runs[0], metadata: { team: v.marker } })
  }
  await send({ agent_id: a, event_type: 'tool_call', tool_name: `${v.marker}tool`, run_id: v.runs[0] })
  const hold = await ok('/holds', { agent_id: b, model: 'gpt-4o', input_tokens: 10, max_output_tokens: 10 })
  expect(hold.allowed).toBe(true)
  await ok('/config/pause', { agent_id: c, is_paused: true })
  return eventIds
}

/** Every id of the victim a grep looks for. */
export function victimNeedles(v: Victim): string[] {
  return [v.user, ...v.agents, ...v.runs, ...v.eventIds, v.marker, v.keyId]
}

/**
 * The files under `dir` (binary ones too) that hold `needle`. grep exits 1 when it finds
 * nothing, the answer wanted; and 2 when a file went away while it read the directory (a
 * running ClickHouse replaces its files), which greps of a stopped process's files never meet.
 */
export function filesHolding(dir: string, needle: string): string[] {
  let out: string
  try {
    out = execFileSync('grep', ['-r', '-a', '-l', '-s', '-F', needle, dir, '--exclude=*.sock'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
  } catch (err) {
    const { status, stdout } = err as { status?: number; stdout?: string }
    if (status !== 1 && status !== 2) throw err
    out = stdout ?? ''
  }
  return out.trim() === '' ? [] : out.trim().split('\n')
}

/** For each of `needles` that some file under `dir` holds: those files. */
export function filesHoldingAny(dir: string, needles: readonly string[]): Record<string, string[]> {
  const found: Record<string, string[]> = {}
  for (const needle of needles) {
    const files = filesHolding(dir, needle)
    if (files.length > 0) found[needle] = files
  }
  return found
}

/** The raw bytes of a GET, as text: what a before/after comparison compares. */
export async function rawGet(url: string, path: string, key: string): Promise<string> {
  const res = await fetch(`${url}${path}`, { headers: { 'x-api-key': key } })
  const text = await res.text()
  expect(res.status, `${path}: ${text}`).toBe(200)
  return text
}

/**
 * What another user sees: their agents, events, audit log, costs and an export of a fixed
 * range, each as the bytes the server sent.
 */
export async function userView(url: string, key: string, agentId: string, range: { from: string; to: string }): Promise<Record<string, string>> {
  const paths = [
    '/agents',
    '/agents/events?limit=1000',
    `/agents/${agentId}`,
    `/agents/${agentId}/hourly`,
    '/audit',
    `/costs?from=${range.from}&to=${range.to}`,
    `/export?from=${range.from}&to=${range.to}&format=ndjson`,
  ]
  const view: Record<string, string> = {}
  for (const path of paths) view[path] = await rawGet(url, path, key)
  return view
}

/** The KIND/REMOVED table `burnrate users erase` prints, by kind. */
export function removedCounts(stdout: string): Record<string, number> {
  const lines = stdout.trimEnd().split('\n')
  const header = lines.findIndex((l) => l === 'KIND\tREMOVED')
  expect(header, stdout).toBeGreaterThan(0)
  return Object.fromEntries(lines.slice(header + 1).map((l) => l.split('\t')).map(([k, n]) => [k!, Number(n)]))
}
