-- agents_load: install the user's agents as ClickHouse has them (agents.lua), merged with
-- those recorded meanwhile (a score only grows), and mark the set complete.
-- K: index (agents.lua)
-- A: now, ttl, agents [id…] (their events are in the window)
-- Returns {}.
for _, agent in ipairs(A.agents) do redis.call('ZADD', K.index, 'GT', NOW_MINUTE, agent) end
redis.call('ZADD', K.index, '+inf', '')
redis.call('PEXPIRE', K.index, TTL)
return '{}'
