import { readFileSync } from 'node:fs'
import { Redis } from 'ioredis'
const lua = (n: string) => readFileSync(`/work/main/src/hot-state/lua/${n}.lua`, 'utf8')
const redis = new Redis('redis://127.0.0.1:6379')
const now = Date.now(), minute = Math.floor(now / 60000)
const meters = [{ id: 'budget', limit: 1e14, from: minute - 1439, minutes: 1440, alert_at: [0.5, 0.6, 0.7, 0.8, 0.9], holds: true }, { id: 'velocity', limit: 1e14, from: minute - 59, minutes: 60, alert_at: [] }]
const A = { now, ttl: 9e7, instance: 'i', stream_rows: 1e8, at: '2026-11-26 10:00:00.000000', grace: 60000, base: 'prof:{p1}:hs:', meters: [meters, meters], rates: [{ key: 'prof:{p1}:rl:events:abc', max: 1e9, window: 60000 }], states: [{ id: 'a'.repeat(32), pv: 0, meters: 1, user: 'u', agent: 'a', budget: 1e14 }, { id: 'f'.repeat(32), pv: 0, meters: 2, user: 'u', agent: '', budget: 1e15, index: 'prof:{p1}:u:x' }], events: [{ agent: 1, fleet: 2, fp: 'abcdef0123456789abcdef01', cost: 1234567, llm_call: true, minute, row: 2, rate: 1 }] }
const arg = JSON.stringify(A)
const pre = `local K = { journal = KEYS[1], fenced = KEYS[2], ids = KEYS[3] }\nlocal A = cjson.decode(ARGV[1])\n`
const cases: Record<string, string> = {
  bare: 'return 1',
  decode: pre + 'return 1',
  shared: pre + lua('state') + '\n' + lua('rules') + '\nreturn 1',
  shared_nodecode: `local K = { journal = KEYS[1], fenced = KEYS[2], ids = KEYS[3] }\nlocal A = {now=${now}, ttl=9e7}\n` + lua('state') + '\n' + lua('rules') + '\nreturn 1',
}
for (const [name, code] of Object.entries(cases)) {
  const sha = await redis.script('LOAD', code) as string
  for (let i = 0; i < 200; i++) await redis.evalsha(sha, 3, 'prof:{p1}:j', 'prof:{p1}:f', 'prof:{p1}:ids', arg, 'row')
  await redis.config('RESETSTAT')
  const n = 3000
  const p = redis.pipeline()
  for (let i = 0; i < n; i++) p.evalsha(sha, 3, 'prof:{p1}:j', 'prof:{p1}:f', 'prof:{p1}:ids', arg, 'row')
  await p.exec()
  const stats = (await redis.info('commandstats')).match(/cmdstat_evalsha:calls=\d+,usec=(\d+)/)!
  console.log(name.padEnd(16), (Number(stats[1]) / n).toFixed(2), 'µs per call', `(arg ${arg.length} B)`)
}
redis.disconnect()
