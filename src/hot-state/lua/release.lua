-- release: DELETE /holds/{id} (memory.ts release()): releases an open hold of the user early,
-- from its fleet and its agent, whose keys the fleet's entry names.
-- K: fleet (the user's fleet's :s)
-- A: now, hold (its id), agent_base (the agent keys' name up to the agent's key id), rate
--   (its charge: state.lua charge(), or absent)
-- Returns {limited = its budget}, or {released = {amount, agent_id} (absent when the user has
-- no such open hold: settled, released, expired, never granted, or another user's), rate}.

-- The state of `key` with its expired holds dropped; nil when it is not loaded (it holds nothing).
local function holds_of(key)
  local st = read_state(key)
  if st then expire_holds(st) end
  return st
end

-- Takes the hold from the state, and saves it: the hold's entry, or nil.
local function release_from(st)
  if not st then return nil end
  local entry = take_hold(st, A.hold)
  save_state(st)
  return entry
end

local rate = A.rate and charge(A.rate)
save_budgets()
if rate and rate.current > rate.max then return cjson.encode({ limited = rate }) end
local entry = release_from(holds_of(K.fleet))
if not entry then return cjson.encode({ rate = rate }) end
local amount, key_id, agent = parse_hold(entry)
release_from(holds_of(A.agent_base .. key_id .. ':s'))
return cjson.encode({ released = { amount = fmt(amount), agent_id = agent }, rate = rate })
