-- release: DELETE /holds/{id} (issue 13, memory.ts release()): releases an open hold early
-- from its agent and its fleet. The caller found the agent in the fleet's :h entry; it is
-- checked again here, as the hold may have been settled, released or expired since.
-- KEYS[1..3] the fleet's :a :hz :h  KEYS[4..6] the agent's :a :hz :h (lib.lua)
-- ARGV[1] now (ms)  ARGV[2] the hold id  ARGV[3] the agent id the caller found
-- Returns the amount released (nano-USD, text), or false when no such hold is open.
local function holds_of(a, hz, h)
  local held = redis.call('HGET', a, 'held')
  local st = { a = a, held = tonumber(held or '0'), holds = held ~= false }
  read_held(st, hz, h)
  return st
end
local fleet = holds_of(KEYS[1], KEYS[2], KEYS[3])
if not has_hold(fleet, ARGV[2]) then return false end
local v = redis.call('HGET', KEYS[3], ARGV[2])
if string.sub(v, string.find(v, ':', 1, true) + 1) ~= ARGV[3] then return false end
take_hold(fleet, ARGV[2])
take_hold(holds_of(KEYS[4], KEYS[5], KEYS[6]), ARGV[2])
return string.match(v, '^%d+')
