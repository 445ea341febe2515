import { Redis } from 'ioredis'
const redis = new Redis('redis://127.0.0.1:6379')
const now = Date.now(), minute = Math.floor(now / 60000)
const meters = [{ id: 'budget', limit: 1e14, from: minute - 1439, minutes: 1440, alert_at: [0.5, 0.6, 0.7, 0.8, 0.9], holds: true }, { id: 'velocity', limit: 1e14, from: minute - 59, minutes: 60, alert_at: [] }]
const A = { now, ttl: 9e7, instance: 'i', stream_rows: 1e8, at: '2026-11-26 10:00:00.000000', grace: 60000, base: 'prof:{p1}:hs:', meters: [meters, meters], rates: [{ key: 'prof:{p1}:rl:events:abc', max: 1e9, window: 60000 }], states: [{ id: 'a'.repeat(32), pv: 0, meters: 1, user: 'u', agent: 'a', budget: 1e14 }, { id: 'f'.repeat(32), pv: 0, meters: 2, user: 'u', agent: '', budget: 1e15, index: 'prof:{p1}:u:x' }], events: [{ agent: 1, fleet: 2, fp: 'abcdef0123456789abcdef01', cost: 1234567, llm_call: true, minute, row: 2, rate: 1 }] }
const arg = JSON.stringify(A)
const n = 5000
for (const [name, code] of Object.entries({
  cjson: `for i = 1, ${n} do local a = cjson.decode(ARGV[1]) end return 1`,
  cmsgpack: `local p = cmsgpack.pack(cjson.decode(ARGV[1])) for i = 1, ${n} do local a = cmsgpack.unpack(p) end return #p`,
  cjson_small: `local s = '{"now":1,"ttl":2,"events":[{"agent":1,"fleet":2,"fp":"abcdef0123456789abcdef01","cost":1234567,"llm_call":true,"minute":123,"row":2,"rate":1}]}' for i = 1, ${n} do local a = cjson.decode(s) end return #s`,
  cjson_meters: `local s = cjson.encode(cjson.decode(ARGV[1]).meters) for i = 1, ${n} do local a = cjson.decode(s) end return #s`,
})) {
  await redis.config('RESETSTAT')
  const r = await redis.eval(code, 0, arg)
  const stats = (await redis.info('commandstats')).match(/cmdstat_eval:calls=\d+,usec=(\d+)/)!
  console.log(name.padEnd(14), (Number(stats[1]) / n).toFixed(2), 'µs', r)
}
redis.disconnect()
