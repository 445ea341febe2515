-- record: one event's atomic step (HotState.record, memory.ts record()): dedup its id, add its
-- cost to its agent and to its fleet (issue 12), evaluate the budget rules of each, flip their
-- pause flags, and append its row, the transitions and the alerts to this instance's journal
-- stream, all or nothing.
-- KEYS[1..6] (lib.lua)  KEYS[7] {p}:e  the partition's event-id tables (lib.lua)
-- KEYS[8..10] the fleet's :a :w :m (the agent '' of the user: types.ts FLEET)
-- KEYS[11..14] the agent's :hz :h and the fleet's :hz :h (its open budget holds, lib.lua)
-- ARGV[1..7] (lib.lua)  ARGV[8] cost (nano-USD integer)  ARGV[9] llm calls (0|1)
-- ARGV[10] the event's minute  ARGV[11] the event's row (JSON)  ARGV[12] its id's fingerprint
-- ARGV[13] the fleet's JSON members  ARGV[14] the grace period of a pause (ms, issue 13)
-- ARGV[15] the hold the event settles ('' for none)
-- Returns NEEDS_LOAD, NEEDS_FLEET_LOAD, FENCED, FULL, HOLD_OF_ANOTHER_AGENT, or {counted (0|1), total, pause reason
-- ('' when running), cost, threshold, spend (lib.lua), {level, version, …} of the alerts fired,
-- webhook or false, fleet, ignored, transition...} where cost is the one the id was first
-- counted at, ignored is false or {paused_at, calls, nano, version} (the flag raised),
-- and fleet is {pause reason, total, threshold, webhook or false, {transition...}, {level,
-- version, …}, spend or false (only with alerts: their projection)}.
local st = read_state(A, W, M, ARGV[5])
if not st then return NEEDS_LOAD end
local fleet = read_state(KEYS[8], KEYS[9], KEYS[10], ARGV[13])
if not fleet then return 'NEEDS_FLEET_LOAD' end
local closed = journal_closed(true)
if closed then return closed end
local now_minute = minute_of(NOW)
expire(st, now_minute)
expire(fleet, now_minute)
read_held(st, KEYS[11], KEYS[12])
read_held(fleet, KEYS[13], KEYS[14])

local function fleet_reply(transitions, alerts, with_spend)
  return { fleet.reason, fmt(fleet.total), fleet.threshold_s, fleet.webhook or false,
    transitions, alerts, with_spend and spend(fleet, now_minute) or false }
end

-- Seen: a retry, or an event that a load from ClickHouse already counted. Nothing changes.
local ids = id_tables(KEYS[7], now_minute)
local seen = seen_cost(KEYS[7], ids, ARGV[12], now_minute)
if seen then
  if st.dirty then save_state(st) end
  if fleet.dirty then save_state(fleet) end
  return { 0, fmt(st.total), st.reason, seen, st.threshold_s, spend(st, now_minute), {}, false, fleet_reply({}, {}, false), false }
end
-- The hold this call settles is released before its real cost is counted (a retry was a
-- repeat above; an unknown or expired hold releases nothing). An open hold of another agent
-- of the user (its fleet holds it, the agent does not) is refused before anything is written
-- but what expiry changed.
local hold = ARGV[15]
if hold ~= '' and not has_hold(st, hold) and has_hold(fleet, hold) then
  if st.dirty then save_state(st) end
  if fleet.dirty then save_state(fleet) end
  return 'HOLD_OF_ANOTHER_AGENT'
end
if hold ~= '' and take_hold(st, hold) then take_hold(fleet, hold) end
remember(KEYS[7], ids, ARGV[12], ARGV[8], ARGV[10])
journal('events', ARGV[11])

-- policy.ts countIgnored(), against the pause its client was told of before this event (the
-- agent's own, else its fleet's): an llm_call after the pause and its grace is counted, and
-- the first of a pause raises the flag (journaled). Returns the reply's `ignored`.
local function count_ignored()
  if ARGV[9] ~= '1' then return false end
  local since = 0
  if st.paused then since = st.since elseif fleet.paused then since = fleet.since end
  local ign = st.ign
  if since == 0 then
    if ign.since ~= 0 then st.ign, st.ign_dirty = { since = 0, calls = 0, nano = 0, flagged = false }, true end
    return false
  end
  if ign.since ~= since then
    ign = { since = since, calls = 0, nano = 0, flagged = false }
    st.ign, st.ign_dirty = ign, true
  end
  if NOW <= since + tonumber(ARGV[14]) then return false end
  local raised = not ign.flagged
  ign.calls, ign.nano, ign.flagged = ign.calls + 1, ign.nano + tonumber(ARGV[8]), true
  st.ign_dirty = true
  if not raised then return false end
  local version = next_version(st)
  journal('ignored_pauses', '{' .. st.members .. ',"at":"' .. ARGV[6] .. '","version":' .. fmt(version) ..
    ',"paused_at_ms":' .. fmt(since) .. ',"calls":' .. fmt(ign.calls) .. ',"cost_nano":' .. fmt(ign.nano) .. '}')
  return { fmt(since), fmt(ign.calls), fmt(ign.nano), fmt(version) }
end
local ignored = count_ignored()

-- memory.ts #add(): the event added to a state (the agent's, its fleet's) and the rules applied;
-- the transitions go to `transitions`, the alerts' {level, version} to `alerts`.
local function step(s, transitions, alerts)
  -- What the expiry relaxed comes first (an override ends when the total fell back under
  -- the threshold, even if this event takes it over again), then this event's crossing.
  local relaxed = evaluate(s, false)
  if relaxed then table.insert(transitions, transition(s, relaxed)) end
  -- Levels the expiry took the total below re-arm first, so this event can fire them again.
  evaluate_alerts(s, false)
  add(s, ARGV[10], ARGV[8], ARGV[9])
  local crossed = evaluate(s, true)
  if crossed then table.insert(transitions, transition(s, crossed)) end
  for _, level in ipairs(evaluate_alerts(s, true)) do
    for _, x in ipairs(alert(s, level)) do table.insert(alerts, x) end
  end
  save_state(s)
  if s.pushed then touch(s) end
end

local out = { 1, '', 0, ARGV[8], st.threshold_s, false, {}, st.webhook or false, false, ignored }
if st.ign_dirty then
  redis.call('HSET', A, 'ign_since', fmt(st.ign.since), 'ign_calls', fmt(st.ign.calls), 'ign_nano', fmt(st.ign.nano), 'ign_flag', b01(st.ign.flagged))
end
step(st, out, out[7])
local fleet_transitions, fleet_alerts = {}, {}
step(fleet, fleet_transitions, fleet_alerts)
-- The index scores an agent by its newest minute: only a new bucket can raise it.
if st.pushed then
  redis.call('ZADD', KEYS[6], 'GT', ARGV[10], ARGV[7])
  redis.call('PEXPIRE', KEYS[6], TTL)
end
out[2], out[3], out[6] = fmt(st.total), st.reason, spend(st, now_minute)
out[9] = fleet_reply(fleet_transitions, fleet_alerts, #fleet_alerts > 0)
return out
