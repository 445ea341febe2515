-- agents: the user's agents with an event in the window (HotState.activeAgents).
-- KEYS[1] {p}:u:<user>  sorted set: agent id scored by the minute of its last event, and
--   the member '' scored +inf once the set holds every agent of the user (agents_load.lua)
-- ARGV[1] now (ms)
-- Returns NEEDS_LOAD (the set was lost or expired: it is loaded from ClickHouse), or the ids.
if not redis.call('ZSCORE', KEYS[1], '') then return 'NEEDS_LOAD' end
local now_minute = math.floor(tonumber(ARGV[1]) / 60000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_minute - 1440)
return redis.call('ZRANGEBYSCORE', KEYS[1], now_minute - 1440, '(+inf')
