import { createHash, randomUUID } from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { filesHoldingAny, removedCounts, userView, victimActivity, victimIds, victimNeedles, type Victim } from './helpers/erasure.ts'
import { api, cleanup, createKey, drained, freshDataDir, runCli, startServe, waitFor } from './helpers/process.ts'

// `burnrate users erase` beside a real `burnrate serve` on an embedded DATA_DIR (chDB, the
// in-process hot state, the segment log): the CLI goes through the admin socket and the
// server erases while another user's events keep arriving.

afterEach(() => cleanup())

/** What docs/erasure.md says the record is filed under: sha256:<hex of the user id>. */
const erasureSubject = (user: string) => `sha256:${createHash('sha256').update(user).digest('hex')}`

describe('burnrate users erase, a server running on DATA_DIR', () => {
  it('leaves nothing of the user in any file, route or restart, and nothing of the others changed', { timeout: 240_000 }, async () => {
    const dataDir = freshDataDir()
    const ids = victimIds()
    const victimKey = await createKey(dataDir, ids.user, ['--name', `${ids.marker}key`, '--rate-limit', '999999999'])
    const bystander = await createKey(dataDir, `bystander-${randomUUID()}`)
    const busy = await createKey(dataDir, `busy-${randomUUID()}`)
    let server = await startServe(dataDir)
    const from = new Date(Date.now() - 3_600_000).toISOString()

    const partial = { ...ids, key: victimKey.key, keyId: victimKey.keyId }
    const victim: Victim = { ...partial, eventIds: await victimActivity(server.url, partial) }
    for (let i = 0; i < 3; i++) {
      const res = await api(server.url, 'POST', '/events', bystander.key, { event_id: randomUUID(), agent_id: 'bystander-agent', event_type: 'llm_call', model: 'gpt-4o', input_tokens: 100 + i, output_tokens: 10 })
      expect(res.status).toBe(200)
    }
    await api(server.url, 'POST', '/config', bystander.key, { agent_id: 'bystander-agent', cost_threshold_usd: 5 })
    await drained(server.url)
    const range = { from, to: new Date(Date.now() + 60_000).toISOString() }
    const before = await userView(server.url, bystander.key, 'bystander-agent', range)

    // The grep can fail: before the erasure it finds the victim's ids in the data files.
    const beforeFound = filesHoldingAny(dataDir, victimNeedles(victim))
    // (The second agent has only a hold: hot state, never on disk.)
    for (const id of [victim.user, victim.agents[0]!, victim.agents[2]!, victim.runs[0]!, victim.marker]) expect(beforeFound[id], id).toBeDefined()

    // Another user's events keep arriving during the erasure, each acknowledged one kept once.
    const acked: string[] = []
    let sending = true
    const sender = (async () => {
      while (sending) {
        const eventId = randomUUID()
        const res = await api(server.url, 'POST', '/events', busy.key, { event_id: eventId, agent_id: 'busy-agent', event_type: 'tool_call', tool_name: 't' })
        if (res.status === 200) acked.push(eventId)
      }
    })()

    // The victim keeps sending too, until its first refusal: accepted until its key is revoked
    // (then 401), and what was accepted goes with the rest. (It stops there: a client that goes
    // on presenting a refused key is answered 429 for the minute, auth/failures.ts.)
    const victimStatuses: number[] = []
    const victimSender = (async () => {
      while (sending && victimStatuses.at(-1) !== 401) {
        const eventId = randomUUID()
        victim.eventIds.push(eventId)
        victimStatuses.push((await api(server.url, 'POST', '/events', victim.key, { event_id: eventId, agent_id: victim.agents[0], event_type: 'tool_call', tool_name: 't' })).status)
      }
    })()

    const erased = await runCli(['users', 'erase', '--user', victim.user], { DATA_DIR: dataDir }, 180_000)
    sending = false
    await sender
    await victimSender
    expect(victimStatuses.at(-1)).toBe(401)
    expect(victimStatuses.slice(0, -1).every((s) => s === 200)).toBe(true)
    expect(erased.stderr).toBe('')
    expect(erased.code).toBe(0)
    expect(erased.stdout.split('\n')[0]).toBe(`erased user ${victim.user}; the audit log records it as ${erasureSubject(victim.user)}`)
    const removed = removedCounts(erased.stdout)
    const acceptedFromVictim = victimStatuses.filter((s) => s === 200).length
    expect(removed).toMatchObject({ api_keys_revoked: 1, events: victim.eventIds.length - victimStatuses.length + acceptedFromVictim, agent_configs: 1, budget_alerts: 1, run_stops: 0 })
    const needles = victimNeedles(victim)
    expect(removed.pause_transitions).toBe(2) // the budget's pause of one agent, the manual pause of another
    expect(removed.runs).toBeGreaterThanOrEqual(1)
    expect(removed.hot_state).toBeGreaterThanOrEqual(4) // three agents, the fleet, the hold's book
    expect(removed.audit_log).toBeGreaterThanOrEqual(4) // config, pauses, alert, key created and revoked
    expect(acked.length).toBeGreaterThan(0)

    // Refused at once: its key is revoked, and reads have nothing of it.
    for (const [method, path, body] of [
      ['POST', '/events', { agent_id: victim.agents[0], event_type: 'agent_end' }],
      ['GET', '/agents', undefined],
    ] as const) {
      expect((await api(server.url, method, path, victim.key, body)).status).toBe(401)
    }

    await drained(server.url)
    const busyEvents = (await api(server.url, 'GET', '/agents/events?limit=1000', busy.key)).body.events as Array<{ event_id: string }>
    expect(busyEvents.map((e) => e.event_id).sort()).toEqual([...acked].sort())
    expect(await userView(server.url, bystander.key, 'bystander-agent', range)).toEqual(before)

    // Nothing comes back with a restart, and no file holds any id of the victim.
    server.kill('SIGTERM')
    expect((await server.exited).code).toBe(0)
    expect(filesHoldingAny(dataDir, needles)).toEqual({})
    // The one record of it, under the hash: an operator finds it by hashing the id.
    expect(Object.keys(filesHoldingAny(dataDir, [erasureSubject(victim.user)]))).toHaveLength(1)

    server = await startServe(dataDir)
    expect((await api(server.url, 'POST', '/events', victim.key, { agent_id: victim.agents[0], event_type: 'agent_end' })).status).toBe(401)
    expect(await userView(server.url, bystander.key, 'bystander-agent', range)).toEqual(before)
    await waitFor(async () => ((await api(server.url, 'GET', '/readyz', null)).status === 200 ? true : undefined))
    server.kill('SIGTERM')
    expect((await server.exited).code).toBe(0)
    expect(filesHoldingAny(dataDir, needles)).toEqual({})
  })

  it('erases by itself when no server runs on DATA_DIR, and a server started after knows nothing of the user', { timeout: 180_000 }, async () => {
    const dataDir = freshDataDir()
    const ids = victimIds()
    const victimKey = await createKey(dataDir, ids.user)
    const other = await createKey(dataDir, `other-${randomUUID()}`)
    let server = await startServe(dataDir)
    const partial = { ...ids, key: victimKey.key, keyId: victimKey.keyId }
    const victim: Victim = { ...partial, eventIds: await victimActivity(server.url, partial) }
    const kept = randomUUID()
    expect((await api(server.url, 'POST', '/events', other.key, { event_id: kept, agent_id: 'other-agent', event_type: 'agent_start' })).status).toBe(200)
    // Stopped at once, kill -9: the journal keeps rows not yet shipped, which the erasure ships first.
    server.kill('SIGKILL')
    await server.exited

    const erased = await runCli(['users', 'erase', '--user', victim.user], { DATA_DIR: dataDir }, 150_000)
    expect(erased.stderr).toBe('')
    expect(erased.code).toBe(0)
    expect(removedCounts(erased.stdout)).toMatchObject({ api_keys_revoked: 1, events: victim.eventIds.length })
    expect(filesHoldingAny(dataDir, victimNeedles(victim))).toEqual({})

    server = await startServe(dataDir)
    expect((await api(server.url, 'GET', '/agents', victim.key)).status).toBe(401)
    await drained(server.url)
    const events = (await api(server.url, 'GET', '/agents/events', other.key)).body.events as Array<{ event_id: string }>
    expect(events.map((e) => e.event_id)).toEqual([kept])
  })
})
