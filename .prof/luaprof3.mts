import { readFileSync } from 'node:fs'
import { Redis } from 'ioredis'
const lua = (n: string) => readFileSync(`/work/main/src/hot-state/lua/${n}.lua`, 'utf8')
const redis = new Redis('redis://127.0.0.1:6379')
const base = 'prof:{p1}:hs:'
const ids = Array.from({ length: 50 }, (_, i) => String(i).padStart(32, 'a'))
const fid = 'f'.repeat(32)
const now = Date.now()
const minute = Math.floor(now / 60000)
const meters = [{ id: 'budget', limit: 1e14, from: minute - 1439, minutes: 1440, alert_at: [0.5, 0.6, 0.7, 0.8, 0.9], holds: true }, { id: 'velocity', limit: 1e14, from: minute - 59, minutes: 60, alert_at: [] }]
const A = { now, ttl: 9e7, instance: 'i', stream_rows: 1e8, at: 'x', grace: 60000, base, meters: [meters, meters], states: [...ids.map((id) => ({ id, pv: 0, meters: 1, user: 'u', agent: 'a', budget: 1e14 })), { id: fid, pv: 0, meters: 2, user: 'u', agent: '', budget: 1e15, index: 'prof:{p1}:u:x' }], events: [] as unknown[] }
for (const k of [...ids, fid]) await redis.eval(`redis.call('HSET', KEYS[1], 'n', struct.pack('<dddddddddd', ${minute - 1439}, 123456789, 17, ${minute}, 7500000, 1, 0, 60, ${minute - 59}, 12345)) return 1`, 1, `${base}${k}:s`)
const body = (code: string, n: number) => `local K = { journal = KEYS[1], fenced = KEYS[2], ids = KEYS[3] }\nlocal A = cjson.decode(ARGV[1])\n${lua('state')}\n${lua('rules')}\nlocal n = ${n}\n${code}\nreturn 1`
const cases: Record<string, [string, number]> = {
  read_states_51: [`for i = 1, n do local s = read_states() end`, 51],
  read_state: [`for i = 1, n do local st = read_state(A.base .. A.states[1].id .. ':s', A.meters[1], 'u', 'a') end`, 1],
  hmget6: [`for i = 1, n do local v = redis.call('HMGET', A.base .. A.states[1].id .. ':s', 'n', 'pause', 'held', 'ign', 'al:budget', 'al:velocity') end`, 1],
  unpack10: [`local v = redis.call('HGET', A.base .. A.states[1].id .. ':s', 'n') for i = 1, n do local x = { struct.unpack('<dddddddddd', v) } end`, 1],
  table25gc: [`collectgarbage('stop') for i = 1, n do local st = { s = 1, base = 2, w = 3, user = 4, agent = 5, from = 6, from_read = 7, total = 8, calls = 9, cm = 10, cc = 11, cn = 12, pv = 13, pause = {}, pause_read = false, held = 0, holds = false, ign = 1, ign_read = false, windows = 1, tallies = {}, alerted = {}, alerted_read = {}, dirty = false } end collectgarbage('restart')`, 1],
  read_state_gc: [`collectgarbage('stop') for i = 1, n do local st = read_state(A.base .. A.states[1].id .. ':s', A.meters[1], 'u', 'a') end collectgarbage('restart')`, 1],
  table25: [`for i = 1, n do local st = { s = 1, base = 2, w = 3, user = 4, agent = 5, from = 6, from_read = 7, total = 8, calls = 9, cm = 10, cc = 11, cn = 12, pv = 13, pause = {}, pause_read = false, held = 0, holds = false, ign = 1, ign_read = false, windows = 1, tallies = {}, alerted = {}, alerted_read = {}, dirty = false } end`, 1],
  move_on: [`local s = read_states() for i = 1, n do move_on(s[1]) end`, 1],
  expire_holds: [`local s = read_states() for i = 1, n do expire_holds(s[1]) end`, 1],
  save_state: [`local s = read_states() for i = 1, n do s[1].dirty = true save_state(s[1]) end`, 1],
  judge_step: [`local s = read_states() for i = 1, n do judge(s[1], s[1].meters) judge(s[51], s[51].meters) local step = step_event(s[1], s[51], { agent = s[1].meters, fleet = s[51].meters }, { cost = 1, llm_call = true, grace = 60000 }) end`, 1],
  exhaustion: [`local s = read_states() for i = 1, n do local x = exhaustion(s[1], 1e14) end`, 1],
  tx: [`local s = read_states() for i = 1, n do local t = {} local f = {} for _, x in ipairs({ { s[1], 'agent', 1 }, { s[51], 'fleet', 2 } }) do local a = x[1] end end`, 1],
}
for (const [name, [code, per]] of Object.entries(cases)) {
  await redis.config('RESETSTAT')
  const n = 4000
  await redis.eval(body(code, n), 3, 'prof:{p1}:j', 'prof:{p1}:f', 'prof:{p1}:ids', JSON.stringify(A))
  const stats = (await redis.info('commandstats')).match(/cmdstat_eval:calls=\d+,usec=(\d+)/)!
  console.log(name.padEnd(16), (Number(stats[1]) / n / per).toFixed(2), 'µs', per > 1 ? `per state (${per} per call)` : '')
}
await redis.del(...(await redis.keys('prof:*')))
redis.disconnect()
