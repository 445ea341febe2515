-- release: DELETE /holds/{id} (issue 13, memory.ts release()): releases an open hold early
-- from its agent and its fleet. The caller found the agent in the fleet's :h entry; it is
-- checked again here, as the hold may have been settled, released or expired since.
-- KEYS[1..2] the fleet's :hz :h  KEYS[3..4] the agent's :hz :h (lib.lua)
-- ARGV[1] now (ms)  ARGV[2] the hold id  ARGV[3] the agent id the caller found
-- Returns the amount released (nano-USD, text), or false when no such hold is open.
local fleet, st = {}, {}
read_held(fleet, KEYS[1], KEYS[2])
local v = redis.call('HGET', KEYS[2], ARGV[2])
if not v or string.sub(v, string.find(v, ':', 1, true) + 1) ~= ARGV[3] then return false end
read_held(st, KEYS[3], KEYS[4])
take_hold(fleet, ARGV[2])
take_hold(st, ARGV[2])
return string.match(v, '^%d+')
