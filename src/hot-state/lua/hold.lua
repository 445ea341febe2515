-- hold: POST /holds (memory.ts hold(), rules.lua step_hold()): an open hold of another agent
-- of the user is refused before anything; then the relaxing rules apply (journaled), and the
-- hold is granted and added to the agent and its fleet when the rules allow it.
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, agent and fleet {key, pv, meters, members},
--   hold {id, amount, expires (ms), key_id (the agent's name in key names), agent_id}
-- Returns a control answer (state.lua control(): FENCED, NEEDS_LOAD, STALE,
-- HOLD_OF_ANOTHER_AGENT), or {refusal (absent: granted), agent and fleet {pause {paused,
-- reason, override}, spent [per meter], held}, transitions}.
local closed = journal_closed(false)
if closed then return control(closed) end
local a, f = A.agent, A.fleet
local agent = read_state(a.key, a.meters, a.members)
if not agent then return control('NEEDS_LOAD', { keys = { a.key } }) end
local fleet = read_state(f.key, f.meters, f.members)
if not fleet then return control('NEEDS_LOAD', { keys = { f.key } }) end
local outdated = stale({ agent, a.pv }, { fleet, f.pv })
if outdated then return outdated end
move_on(agent)
move_on(fleet)
expire_holds(agent)
expire_holds(fleet)
local h = A.hold
local mine = open_hold(agent, h.id)
if not mine and open_hold(fleet, h.id) then
  save_state(agent)
  save_state(fleet)
  return control('HOLD_OF_ANOTHER_AGENT', { hold = h.id })
end
judge(agent, a.meters)
judge(fleet, f.meters)
local step = step_hold(agent, fleet, { agent = a.meters, fleet = f.meters }, h.amount, mine ~= nil)
local transitions = {}
if step.agent then transitions[#transitions + 1] = transition(agent, 'agent', step.agent, agent.total) end
if step.fleet then transitions[#transitions + 1] = transition(fleet, 'fleet', step.fleet, fleet.total) end
if not step.refusal and not mine then
  local entry = hold_entry(h.amount, h.key_id, h.agent_id)
  put_hold(agent, h.id, h.amount, h.expires, entry)
  put_hold(fleet, h.id, h.amount, h.expires, entry)
end
save_state(agent)
save_state(fleet)
local function told(st)
  local spent = {}
  for i, x in ipairs(st.spent) do spent[i] = fmt(x) end
  return { pause = { paused = st.pause.paused, reason = st.pause.reason, override = st.pause.override }, spent = spent, held = fmt(st.held) }
end
return cjson.encode({ refusal = step.refusal, agent = told(agent), fleet = told(fleet), transitions = transitions })
