-- record: events' atomic step (HotState.record; memory.ts #count does the same in the same
-- order): for each event in turn, dedup its id, settle the hold it names, step the rules of
-- its agent and its fleet (rules.lua step_event), add its cost to both windows, and append
-- its row, the transitions, the alerts and the ignoring-pause flag to this instance's
-- journal stream. All of a call's events are applied together or not at all; each is
-- answered as it would have been alone, in the order given.
-- K: journal, fenced, ids (state.lua)
-- A: now, ttl, instance, stream_rows, at (now as ClickHouse text), grace (ms), base, meters,
--   states (state.lua read_states), events: [{agent, fleet (indices into A.states), fp (the
--   id's fingerprint), cost, llm_call, minute, hold (the hold it settles, or absent), row
--   (the ARGV index of its row's JSON), rate (its charge: an index into A.rates, the
--   budgets charged (state.lua charge()), or absent), run (its run id, or absent), ends (true:
--   the run's agent_end)}], run_idle (ms: state.lua read_run())
-- Returns a control answer before any change (state.lua control(): FENCED, FULL,
-- NEEDS_LOAD, STALE), or {events = [answer…]}: each {limited = its budget} (over its
-- budget: nothing else of it was done), {error = 'HOLD_OF_ANOTHER_AGENT'} (nothing of it was
-- applied), or {counted, cost, total, reason, fleet_reason, exhausts, transitions, alerts,
-- ignored, fleet_exhausts and fleet_last_hour (with fleet alerts), rate (its budget), periods and last_hour (the
-- agent's period budgets after it, as read.lua answers them), run_stopped (its run's budget
-- stopped it), run_stop {spent, held, version} (this event stopped it)}.
local closed = journal_closed(true)
if closed then return control(closed) end
local states, answer_now = read_states()
if not states then return answer_now end
local ids = id_tables()

-- projection.ts, for a state with a daily budget.
local function exhausts(st)
  if st.budget then return exhaustion(st, st.budget) end
  return nil
end

-- What counting an event changed in a state (rules.lua count_event), journaled and added to
-- the event's answer `out` (its transitions and alerts lists, made when needed).
local function changes(out, st, scope, before)
  if st.relaxed or st.crossed then
    out.transitions = out.transitions or {}
    if st.relaxed then out.transitions[#out.transitions + 1] = transition(st, scope, st.relaxed, before) end
    if st.crossed then out.transitions[#out.transitions + 1] = transition(st, scope, st.crossed, st.total) end
  end
  if #st.fired > 0 then
    out.alerts = out.alerts or {}
    for _, f in ipairs(st.fired) do out.alerts[#out.alerts + 1] = alert(st, scope, st.meters, f) end
  end
end

-- One event's answer, once charged; `agent`, `fleet`: its states.
local function answer(e, agent, fleet)
  local h = h32(e.fp)
  local seen = seen_cost(ids, e.fp, h)
  local cost = fmt(e.cost)
  if seen then
    -- A retry, or an event that a load from ClickHouse already counted: nothing changes.
    local out = { counted = false, cost = seen, total = fmt(agent.total), reason = agent.pause.reason, fleet_reason = fleet.pause.reason, exhausts = exhausts(agent) }
    if e.run and agent.run_budget and run_stopped(agent, e.run) then out.run_stopped = true end
    if agent.windows.periods then
      local periods = period_answer(judge(agent, agent.meters))
      out.periods, out.last_hour = periods, fmt(spent_of(agent, LAST_HOUR, NOW_MINUTE - LAST_HOUR + 1))
    end
    return out
  end
  -- The hold this call settles is released before its real cost is counted (a retry was a
  -- repeat above; an unknown or expired hold releases nothing). An open hold of another
  -- agent of the user (its fleet holds it, the agent does not) is refused before anything.
  if e.hold then
    if not open_hold(agent, e.hold) and open_hold(fleet, e.hold) then return { error = 'HOLD_OF_ANOTHER_AGENT' } end
    if take_hold(agent, e.hold) then take_hold(fleet, e.hold) end
  end
  remember(ids, e.fp, h, cost, e.minute)
  journal('events', ARGV[e.row])
  local run = e.run and agent.run_budget and read_run(agent, e.run)
  judge(agent, agent.meters)
  judge(fleet, fleet.meters)
  local agent_before, fleet_before = agent.total, fleet.total
  local ignored, raised = step_event(agent, fleet, agent.meters, fleet.meters, e.cost, e.llm_call, A.grace)
  local calls = e.llm_call and 1 or 0
  add(agent, e.minute, e.cost, calls)
  add(fleet, e.minute, e.cost, calls)
  agent.ign = ignored
  local out = { counted = true, cost = cost, total = fmt(agent.total), reason = agent.pause.reason, fleet_reason = fleet.pause.reason, exhausts = exhausts(agent) }
  -- The agent's, then its fleet's: a relaxing change at the total before the event, the
  -- pause at the total after it, then the alerts.
  changes(out, agent, 'agent', agent_before)
  changes(out, fleet, 'fleet', fleet_before)
  if raised then
    local g = ignored
    local version = next_version(agent)
    journal('ignored_pauses', '{' .. members(agent) .. ',"at":"' .. A.at .. '","version":' .. fmt(version) ..
      ',"paused_at_ms":' .. fmt(g.since) .. ',"calls":' .. fmt(g.calls) .. ',"cost_nano":' .. fmt(g.nano) .. '}')
    out.ignored = { since = fmt(g.since), calls = fmt(g.calls), nano = fmt(g.nano), version = fmt(version) }
  end
  if run then
    if count_run(run, e.cost, e.llm_call) then
      local version = next_version(agent)
      journal('run_stops', '{' .. members(agent) .. ',"run_id":' .. cjson.encode(run.id) .. ',"at":"' .. A.at .. '","version":' .. fmt(version) ..
        ',"spent_nano":' .. fmt(run.s.spent) .. ',"held_nano":' .. fmt(run.s.held) .. ',"budget_nano":' .. fmt(run.budget) .. '}')
      out.run_stop = { spent = fmt(run.s.spent), held = fmt(run.s.held), version = fmt(version) }
    end
    -- A run that ends unstopped is done with; a stopped one is kept, to answer its late events.
    if e.ends and not run.s.stopped then forget_run(agent, run) else save_run(agent, run) end
    if run.s.stopped then out.run_stopped = true end
  end
  if #fleet.fired > 0 then out.fleet_exhausts, out.fleet_last_hour = exhausts(fleet), fmt(spent_of(fleet, LAST_HOUR, NOW_MINUTE - LAST_HOUR + 1)) end
  local periods = period_answer(agent)
  if periods then out.periods, out.last_hour = periods, fmt(spent_of(agent, LAST_HOUR, NOW_MINUTE - LAST_HOUR + 1)) end
  -- The index scores an agent by its newest minute: only a new bucket can raise it.
  if agent.pushed then
    redis.call('ZADD', fleet.index, 'GT', e.minute, agent.agent)
    redis.call('PEXPIRE', fleet.index, TTL)
  end
  return out
end

local answers = {}
for i, e in ipairs(A.events) do
  local rate = e.rate and charge(A.rates[e.rate])
  if rate and rate.current > rate.max then
    answers[i] = { limited = rate }
  else
    local agent, fleet = states[e.agent], states[e.fleet]
    agent.pushed = false
    answers[i] = answer(e, agent, fleet)
    if not answers[i].error then answers[i].rate = rate end
  end
end
save_budgets()
save_ids(ids)
for _, st in ipairs(states) do
  save_state(st)
  if st.touched then touch(st) end
end
return cjson.encode({ events = answers })
