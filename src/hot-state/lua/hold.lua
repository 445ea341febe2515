-- hold: POST /holds (memory.ts hold(), rules.lua step_hold()): an open hold of another agent
-- of the user is refused before anything; then the relaxing rules apply (journaled), and the
-- hold is granted and added to the agent and its fleet when the rules allow it.
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, base, meters, states (the agent's, then its
--   fleet's: state.lua read_states), hold {id, amount, expires (ms), key_id (the agent's
--   name in key names), agent_id, run (its run id, or absent)}, rate (its charge: state.lua
--   charge(), or absent), run_idle (ms: state.lua read_run())
-- Returns a control answer (state.lua control(): FENCED, NEEDS_LOAD, STALE,
-- HOLD_OF_ANOTHER_AGENT), {limited = its budget}, or {refusal (absent: granted), agent and
-- fleet {pause {paused, reason, override}, spent [per meter], held}, transitions, rate,
-- run_stopped (its run is stopped by its budget)}.
local closed = journal_closed(false)
if closed then return control(closed) end
local states, answer_now = read_states()
if not states then return answer_now end
local rate = A.rate and charge(A.rate)
if rate and rate.current > rate.max then
  save_budgets()
  return cjson.encode({ limited = rate })
end
local agent, fleet = states[1], states[2]
local h = A.hold
local mine = open_hold(agent, h.id)
if not mine and open_hold(fleet, h.id) then
  save_state(agent)
  save_state(fleet)
  save_budgets()
  return control('HOLD_OF_ANOTHER_AGENT', { hold = h.id })
end
judge(agent, agent.meters)
judge(fleet, fleet.meters)
local run = h.run and agent.run_budget and read_run(agent, h.run)
local step = step_hold(agent, fleet, { agent = agent.meters, fleet = fleet.meters }, h.amount, mine ~= nil, run)
local transitions = {}
if step.agent then transitions[#transitions + 1] = transition(agent, 'agent', step.agent, agent.total) end
if step.fleet then transitions[#transitions + 1] = transition(fleet, 'fleet', step.fleet, fleet.total) end
if not step.refusal and not mine then
  local entry = hold_entry(h.amount, h.key_id, h.agent_id)
  put_hold(agent, h.id, h.amount, h.expires, entry)
  put_hold(fleet, h.id, h.amount, h.expires, entry)
  if run then
    redis.call('HSET', agent.rh, h.id, run.id)
    redis.call('PEXPIRE', agent.rh, redis.call('PTTL', agent.hz))
  end
end
if run then save_run(agent, run) end
save_state(agent)
save_state(fleet)
save_budgets()
local function told(st)
  local spent = {}
  for i, x in ipairs(st.spent) do spent[i] = fmt(x) end
  return { pause = { paused = st.pause.paused, reason = st.pause.reason, override = st.pause.override }, spent = spent, held = fmt(st.held) }
end
return cjson.encode({ refusal = step.refusal, agent = told(agent), fleet = told(fleet), transitions = transitions, rate = rate, run_stopped = run and run.s.stopped or nil })
