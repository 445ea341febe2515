-- hold: POST /holds (issue 13, memory.ts hold()): grants a budget hold when the agent and its
-- fleet run and its worst case stays within their budgets with their open holds counted
-- (policy.ts holdRefusal()), and adds it to both; the relaxing rules apply first, journaled.
-- KEYS as record.lua's: KEYS[1..6] (lib.lua), KEYS[7] the partition's event ids (unused here),
-- KEYS[8..10] the fleet's :a :w :m, KEYS[11..14] the agent's :hz :h and the fleet's :hz :h
-- ARGV[1..7] (lib.lua)  ARGV[8] the hold id  ARGV[9] its worst case (nano-USD integer)
-- ARGV[10] when it expires (ms)  ARGV[11] the fleet's JSON members
-- Returns NEEDS_LOAD, NEEDS_FLEET_LOAD, FENCED, HOLD_OF_ANOTHER_AGENT, or {refusal ('' when granted), then of the
-- agent and of its fleet each: pause reason ('' when running), override (0|1), total, held,
-- threshold, {transition or false}}.
local closed = journal_closed(false)
if closed then return closed end
local st = read_state(A, W, M, ARGV[5])
if not st then return NEEDS_LOAD end
local fleet = read_state(KEYS[8], KEYS[9], KEYS[10], ARGV[11])
if not fleet then return 'NEEDS_FLEET_LOAD' end
local now_minute = minute_of(NOW)
expire(st, now_minute)
expire(fleet, now_minute)
read_held(st, KEYS[11], KEYS[12])
read_held(fleet, KEYS[13], KEYS[14])

-- What the expiry relaxed comes first: an auto-resumed agent may hold again.
local function relax(s)
  local relaxed = evaluate(s, false)
  if s.dirty or relaxed then save_state(s) end
  return relaxed and transition(s, relaxed) or false
end
local agent_t, fleet_t = relax(st), relax(fleet)

-- policy.ts holdRefusal(), branch for branch.
local cost = tonumber(ARGV[9])
local function over(s)
  return not s.override and s.total + s.held + cost > s.threshold
end
local refusal = ''
-- A retry of a hold still open is that hold, granted again and held once.
local again = has_hold(st, ARGV[8])
if not again and has_hold(fleet, ARGV[8]) then return 'HOLD_OF_ANOTHER_AGENT' end
if again then
  refusal = ''
elseif st.paused or fleet.paused then
  refusal = 'paused'
elseif over(st) then
  refusal = 'budget'
elseif over(fleet) then
  refusal = 'fleet_budget'
else
  put_hold(st, ARGV[8], cost, ARGV[10], ARGV[9])
  put_hold(fleet, ARGV[8], cost, ARGV[10], ARGV[9] .. ':' .. ARGV[7])
end
local function reply(s, t)
  return { s.reason, s.override and 1 or 0, fmt(s.total), fmt(s.held), s.threshold_s, t }
end
return { refusal, reply(st, agent_t), reply(fleet, fleet_t) }
