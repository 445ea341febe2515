import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

/** RUN_ABANDONED_AFTER set to 90 minutes: a run without an end is abandoned once its last event is older than that. */
const clock = new ManualClock(Date.UTC(2026, 10, 20, 12, 0, 0))
let h: Harness
beforeAll(async () => {
  h = await startHarness({ clock, env: { RUN_ABANDONED_AFTER: '90m' } })
})
afterAll(() => h.close())

describe('RUN_ABANDONED_AFTER', () => {
  it('abandons a run whose last event is older than the setting, and not before', async () => {
    const key = await h.key(unique('u'))
    expect((await h.post('/events', { agent_id: 'a', event_type: 'agent_start', run_id: 'r' }, key)).statusCode).toBe(200)
    clock.advance(60_000)
    expect((await h.post('/events', llmCall('a', { run_id: 'r' }), key)).statusCode).toBe(200)
    const status = async () => {
      const list = (await h.get('/agents/a/runs', key)).json() as { runs: Array<{ status: string }> }
      const run = (await h.get('/runs/r', key)).json() as { status: string; by_agent: Array<{ status: string }> }
      return [list.runs[0]!.status, run.status, run.by_agent[0]!.status]
    }
    clock.advance(90 * 60_000)
    expect(await status()).toEqual(['open', 'open', 'open'])
    clock.advance(1)
    expect(await status()).toEqual(['abandoned', 'abandoned', 'abandoned'])
  })
})
