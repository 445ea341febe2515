-- release: DELETE /holds/{id} (memory.ts release()): releases an open hold of the user early,
-- from its fleet and its agent, whose keys the fleet's entry names.
-- K: fleet (the user's fleet's :s)
-- A: now, hold (its id), agent_base (the agent keys' name up to the agent's key id), rate
--   (its charge: state.lua charge(), or absent)
-- Returns {limited = its budget}, or {released = {amount, agent_id} (absent when the user has
-- no such open hold: settled, released, expired, never granted, or another user's), rate}.
local function holds_of(key)
  local held = redis.call('HGET', key, 'held')
  local base = string.sub(key, 1, -3)
  local st = { s = key, hz = base .. ':hz', h = base .. ':h', held = tonumber(held or '0'), holds = held ~= false }
  expire_holds(st)
  return st
end
local rate = A.rate and charge(A.rate)
save_budgets()
if rate and rate.current > rate.max then return cjson.encode({ limited = rate }) end
local entry = take_hold(holds_of(K.fleet), A.hold)
if not entry then return cjson.encode({ rate = rate }) end
local amount, key_id, agent = parse_hold(entry)
take_hold(holds_of(A.agent_base .. key_id .. ':s'), A.hold)
return cjson.encode({ released = { amount = fmt(amount), agent_id = agent }, rate = rate })
