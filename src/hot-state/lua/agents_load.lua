-- agents_load: install the user's agents as ClickHouse has them (agents.lua), merged with
-- those recorded meanwhile (a score only grows), and mark the set complete.
-- KEYS[1] {p}:u:<user>  ARGV[1] agent TTL (ms)  ARGV[2] a minute in the window  ARGV[3..] agent ids
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], 'GT', ARGV[2], ARGV[i]) end
redis.call('ZADD', KEYS[1], '+inf', '')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
