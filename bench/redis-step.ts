/**
 * The Redis hot state's record step alone, without HTTP: what one event costs Redis and
 * burnrate's side of the call. A redis-server of its own (AOF on, appendfsync everysec, as
 * production runs it), one user's `--agents` agents each configured with every rule (five
 * alert levels, a daily budget, a velocity limit) and the user's fleet the same, then
 * `--events` events with a fresh event id each, `--concurrency` in flight, the agents in
 * turn. A second user's agents and fleet have the same rules and two period budgets more (a
 * calendar month in America/New_York and a rolling 30 days); a third user's have the same rules
 * and a run budget, and each of its events names a run (ten events of an agent a run). The
 * rounds take the three users in turn, so each figure with periods or runs has one without
 * beside it, measured in the same run.
 * Between the warmup and the measured events Redis's counters are reset, so:
 *
 * - Redis µs per event: INFO commandstats, the usec of every script call (EVALSHA, EVAL)
 *   divided by the events recorded;
 * - Redis CPU µs per event: redis-server's user + system time from /proc, which also counts
 *   the AOF writes and the sockets;
 * - client CPU µs per event: this process's, the hot state's TypeScript and ioredis.
 *
 *   node bench/redis-step.ts [--agents 1000] [--events 40000] [--concurrency 50] [--rounds 3]
 *
 * Several rounds print each one's figures: compare figures of the same run.
 */
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { RedisHotState } from '../src/hot-state/redis.ts'
import { DEFAULT_POLICY, type AgentPolicy } from '../src/hot-state/meters.ts'
import { type HotState, type RecordEvent } from '../src/hot-state/types.ts'
import { RedisJournal } from '../src/journal/redis-streams.ts'
import { toChDateTime64us } from '../src/storage/clickhouse.ts'
import { startRedis } from '../test/helpers/redis.ts'
import { fmt, table } from './processes.ts'

const { values } = parseArgs({
  options: {
    agents: { type: 'string', default: '1000' },
    events: { type: 'string', default: '40000' },
    concurrency: { type: 'string', default: '50' },
    rounds: { type: 'string', default: '3' },
  },
})
const agents = Number(values.agents)
const events = Number(values.events)
const concurrency = Number(values.concurrency)
const rounds = Number(values.rounds)

const USD = 1_000_000_000
const USER = 'bench'
const PERIODS_USER = 'bench-periods'
const RUNS_USER = 'bench-runs'
const redis = await startRedis()
const journal = new RedisJournal({ redis: redis.redis, instance: 'bench', partitions: 16, maxRows: 100_000_000 })
await journal.register()
const hs = new RedisHotState({
  redis: redis.redis,
  journal,
  loader: async () => ({ minutes: [], seen: [], policy: null, policyVersion: 0, pause: null, ignored: null }),
  userAgents: async () => [],
})

// Every rule, none of which acts during the run: five levels, a budget and a velocity limit.
const every = (thresholdUsd: number): AgentPolicy => ({
  ...DEFAULT_POLICY,
  thresholdNano: thresholdUsd * USD,
  alertAt: [0.5, 0.6, 0.7, 0.8, 0.9],
  velocityLimitNano: thresholdUsd * USD,
  velocityWindowMinutes: 60,
})
// The same with a month and 30 days no load reaches.
const withPeriods = (thresholdUsd: number): AgentPolicy => ({
  ...every(thresholdUsd),
  periodBudgets: [
    { spec: { period: 'month', timeZone: 'America/New_York', weekStarts: 'monday', monthStartsOn: 1 }, limitNano: thresholdUsd * USD },
    { spec: { windowDays: 30 }, limitNano: thresholdUsd * USD },
  ],
})
// The same with a run budget no run reaches.
const withRunBudget = (thresholdUsd: number): AgentPolicy => ({ ...every(thresholdUsd), runBudgetNano: thresholdUsd * USD })
const now = () => Date.now()
for (const [user, policy] of [[USER, every], [PERIODS_USER, withPeriods], [RUNS_USER, withRunBudget]] as const) {
  await hs.setPolicy({ userId: user, agentId: '' }, { ...policy(1_000_000), runBudgetNano: null }, now(), 'bench')
  for (let i = 0; i < agents; i++) await hs.setPolicy({ userId: user, agentId: `agent-${i}` }, policy(100_000), now(), 'bench')
}

let next = 0
function event(user: string): RecordEvent {
  const runId = user === RUNS_USER ? `run-${Math.floor(next / (agents * 10))}` : undefined
  const agentId = `agent-${next++ % agents}`
  const at = now()
  const eventId = randomUUID()
  return {
    userId: user,
    agentId,
    eventId,
    costNano: 7_500_000,
    llmCall: true,
    at,
    runId,
    row: {
      user_id: user,
      agent_id: agentId,
      timestamp: toChDateTime64us(at * 1000),
      event_id: eventId,
      event_type: 'llm_call',
      model: 'gpt-4o',
      input_tokens: 1000,
      output_tokens: 500,
      cache_read_tokens: 0,
      cache_write_tokens: 0,
      tool_name: null,
      metadata: '',
      cost_nano: 7_500_000,
      price_fallback: false,
      ...(runId ? { run_id: runId } : {}),
    },
  }
}

async function drive(state: HotState, user: string, n: number): Promise<number> {
  let left = n
  const started = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) await state.record(event(user), now())
    }),
  )
  return performance.now() - started
}

const info = async (section: string) => (await redis.redis.info(section)) as string
const pid = Number(/process_id:(\d+)/.exec(await info('server'))![1])
const redisCpu = () => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  return (Number(f[11]) + Number(f[12])) / 100
}
const scriptUsec = (stats: string) =>
  [...stats.matchAll(/^cmdstat_(evalsha|eval|evalsha_ro|fcall):calls=(\d+),usec=(\d+)/gm)].reduce((a, m) => ({ calls: a.calls + Number(m[2]), usec: a.usec + Number(m[3]) }), { calls: 0, usec: 0 })

// No AOF rewrite during the rounds (its fork takes a core from the measured server), and
// each round starts from an empty journal: nothing ships it here.
await redis.redis.config('SET', 'auto-aof-rewrite-percentage', '0')
const trimJournal = async () => {
  for (let p = 0; p < 16; p++) await redis.redis.xtrim(journal.streamKey(p), 'MAXLEN', 0)
}
// Warmup: every agent known, the JIT warm.
for (const user of [USER, PERIODS_USER, RUNS_USER]) await drive(hs, user, Math.min(events, agents * 5))
const rows = [['round', 'beside every rule', 'events/s', 'script calls', 'Redis µs/event (commandstats)', 'Redis CPU µs/event', 'client CPU µs/event']]
const users = [USER, PERIODS_USER, RUNS_USER]
const shown: Record<string, string> = { [USER]: 'nothing', [PERIODS_USER]: 'month + 30 d', [RUNS_USER]: 'run budget' }
for (let r = 0; r < rounds * users.length; r++) {
  const user = users[r % users.length]!
  await trimJournal()
  await redis.redis.config('RESETSTAT')
  const cpu0 = redisCpu()
  const client0 = process.cpuUsage()
  const ms = await drive(hs, user, events)
  const client = process.cpuUsage(client0)
  const cpu = redisCpu() - cpu0
  const s = scriptUsec(await info('commandstats'))
  rows.push([String(Math.floor(r / users.length) + 1), shown[user]!, fmt(events / (ms / 1000)), fmt(s.calls), fmt(s.usec / events, 1), fmt((cpu * 1e6) / events, 1), fmt((client.user + client.system) / events, 1)])
}
console.log(table(rows))
await hs.close()
await redis.stop()
process.exit(0)
