-- agents: the user's agents with an event in the window (RedisHotState.activeAgents).
-- K: index, the user's {p}:u:<user>: a sorted set of agent ids scored by the minute of their
--   last event, and the member '' scored +inf once it holds every agent of the user
--   (agents_load.lua)
-- A: now
-- Returns a NEEDS_LOAD control answer (the set was lost or expired: it is loaded from
-- ClickHouse), or {agents = [id…]}.
if not redis.call('ZSCORE', K.index, '') then return control('NEEDS_LOAD', { keys = { K.index } }) end
redis.call('ZREMRANGEBYSCORE', K.index, '-inf', NOW_MINUTE - WINDOW)
return cjson.encode({ agents = redis.call('ZRANGEBYSCORE', K.index, NOW_MINUTE - WINDOW, '(+inf') })
