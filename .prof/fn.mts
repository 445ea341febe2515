import { readFileSync } from 'node:fs'
import { Redis } from 'ioredis'
const lua = (n: string) => readFileSync(`/work/main/src/hot-state/lua/${n}.lua`, 'utf8')
const redis = new Redis('redis://127.0.0.1:6379')
const now = Date.now()
// state.lua reads A at top level: give it one at load.
const lib = `#!lua name=proflib\nlocal K = {}\nlocal A = {now=${now}, ttl=9e7}\n` + lua('state') + '\n' + lua('rules') + `\nredis.register_function('prof_noop', function(keys, args) return 1 end)\nredis.register_function('prof_decode', function(keys, args) local a = cjson.decode(args[1]) return 1 end)`
await redis.call('FUNCTION', 'LOAD', 'REPLACE', lib)
const arg = 'x'.repeat(1000)
const n = 3000
for (const fn of ['prof_noop']) {
  for (let i = 0; i < 200; i++) await redis.call('FCALL', fn, 3, 'prof:{p1}:j', 'prof:{p1}:f', 'prof:{p1}:ids', arg, 'row')
  await redis.config('RESETSTAT')
  const p = redis.pipeline()
  for (let i = 0; i < n; i++) p.call('FCALL', fn, 3, 'prof:{p1}:j', 'prof:{p1}:f', 'prof:{p1}:ids', arg, 'row')
  await p.exec()
  const stats = (await redis.info('commandstats')).match(/cmdstat_fcall:calls=\d+,usec=(\d+)/)!
  console.log(fn.padEnd(16), (Number(stats[1]) / n).toFixed(2), 'µs per call')
}
await redis.call('FUNCTION', 'DELETE', 'proflib')
redis.disconnect()
