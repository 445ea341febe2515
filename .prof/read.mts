import { Redis } from 'ioredis'
const redis = new Redis('redis://127.0.0.1:6379')
const N = 1000
const policy = JSON.stringify({ threshold_usd: 10, alert_at: [0.5, 0.6, 0.7, 0.8, 0.9], velocity: { limit_usd: 5, window_minutes: 60 }, note: 'x'.repeat(300) })
const n = Buffer.alloc(104, 7)
const p = redis.pipeline()
for (let i = 0; i < N; i++) {
  p.hset(`rd:{p1}:${i}:s`, 'n', n, 'policy', policy, 'shown', policy, 'version', '1795688088868000')
  p.set(`rd:{p1}:${i}:n`, n)
  p.hset(`rd:{p1}:${i}:h`, 'n', n)
}
await p.exec()
const cases: Record<string, string> = {
  hmget6: `for i = 0, ${N - 1} do local v = redis.call('HMGET', 'rd:{p1}:' .. i .. ':s', 'n', 'pause', 'held', 'ign', 'al:budget', 'al:velocity') end`,
  hget_n_big: `for i = 0, ${N - 1} do local v = redis.call('HGET', 'rd:{p1}:' .. i .. ':s', 'n') end`,
  hget_n_small: `for i = 0, ${N - 1} do local v = redis.call('HGET', 'rd:{p1}:' .. i .. ':h', 'n') end`,
  get: `for i = 0, ${N - 1} do local v = redis.call('GET', 'rd:{p1}:' .. i .. ':n') end`,
  concat_only: `for i = 0, ${N - 1} do local v = 'rd:{p1}:' .. i .. ':n' end`,
  hset_n_big: `for i = 0, ${N - 1} do redis.call('HSET', 'rd:{p1}:' .. i .. ':s', 'n', '${'x'.repeat(104)}') end`,
  set: `for i = 0, ${N - 1} do redis.call('SET', 'rd:{p1}:' .. i .. ':n', '${'x'.repeat(104)}') end`,
}
for (let round = 0; round < 2; round++) for (const [name, code] of Object.entries(cases)) {
  await redis.config('RESETSTAT')
  const reps = 20
  for (let r = 0; r < reps; r++) await redis.eval(code + ' return 1', 0)
  const stats = (await redis.info('commandstats')).match(/cmdstat_eval:calls=\d+,usec=(\d+)/)!
  console.log(name.padEnd(14), (Number(stats[1]) / N / reps).toFixed(2), 'µs')
}
await redis.del(...(await redis.keys('rd:*')))
redis.disconnect()
