-- The budget rules of policy.ts, function for function and branch for branch (read that file
-- for what each rule means). A state here is the table state.lua's read_state() makes, with
-- `spent` set by judge(): st.pause {paused, reason ('' while running), override, since},
-- st.spent (what each meter's window holds, in the meters' order), st.held, st.alerted (each
-- meter's bits, in the meters' order: policy.ts keeps them by meter id). Meters are the resolved meters TypeScript sent (meters.ts): {id,
-- limit, from, auto_resume, alert_at, holds}. A change is {reason, meter (0-based index, -1
-- for none), pause (the state it made)}, as in policy.ts.

local RUNNING = { paused = false, reason = '', override = false, since = 0 }

-- policy.ts over()
local function over(m, spent, held)
  local counted = spent
  if m.holds then counted = spent + held end
  return counted > m.limit
end

-- policy.ts firstOver(): a 0-based index, or -1.
local function first_over(st, meters)
  for i, m in ipairs(meters) do
    if over(m, st.spent[i], st.held) then return i - 1 end
  end
  return -1
end

local function copy_pause(p, override)
  return { paused = p.paused, reason = p.reason, override = override, since = p.since }
end

-- policy.ts relax()
local function relax(st, meters)
  if st.pause.override then
    if first_over(st, meters) >= 0 then return nil end
    st.pause = copy_pause(st.pause, false)
    return { reason = 'override_cleared', meter = -1, pause = st.pause }
  end
  if not st.pause.paused then return nil end
  local found = -1
  for i, m in ipairs(meters) do
    if m.id == st.pause.reason then
      found = i
      break
    end
  end
  if found < 0 or not meters[found].auto_resume or over(meters[found], st.spent[found], st.held) then return nil end
  st.pause = RUNNING
  return { reason = 'auto_resume', meter = found - 1, pause = st.pause }
end

-- policy.ts cross()
local function cross(st, meters)
  if st.pause.paused or st.pause.override then return nil end
  local i = first_over(st, meters)
  if i < 0 then return nil end
  st.pause = { paused = true, reason = meters[i + 1].id, override = false, since = NOW }
  return { reason = meters[i + 1].id, meter = i, pause = st.pause }
end

-- policy.ts alerts(): {meter (0-based), level (0-based index into its alert_at)} of the
-- levels fired, lowest first per meter. Indices, not the levels' values: cjson writes
-- numbers with 14 significant digits, and the caller has the values.
local NONE_FIRED = {}

local function alerts(st, meters, may_fire)
  local fired = NONE_FIRED
  for i, m in ipairs(meters) do
    local bits = st.alerted[i]
    if #m.alert_at > 0 and not (bits == 0 and st.spent[i] < m.alert_at[1] * m.limit) then
      for j, level in ipairs(m.alert_at) do
        local bit = 2 ^ (j - 1)
        local set = math.floor(bits / bit) % 2 == 1
        if st.spent[i] >= level * m.limit then
          if may_fire and not set then
            bits = bits + bit
            if fired == NONE_FIRED then fired = {} end
            fired[#fired + 1] = { meter = i - 1, level = j - 1 }
          end
        elseif set then
          bits = bits - bit
        end
      end
      st.alerted[i] = bits
    end
  end
  return fired
end

-- policy.ts countEvent(). What it answers there is kept on the state here (st.relaxed,
-- st.crossed, st.fired): an event counts in two states, and tables cost.
local function count_event(st, meters, cost)
  st.relaxed = relax(st, meters)
  alerts(st, meters, false)
  for i = 1, #meters do st.spent[i] = st.spent[i] + cost end
  st.crossed = cross(st, meters)
  st.fired = alerts(st, meters, true)
end

-- policy.ts holdingPause(): the pause that holds an agent, its own first; nil while both run.
local function holding_pause(agent, fleet)
  if agent.pause.paused then return agent.pause end
  if fleet.pause.paused then return fleet.pause end
  return nil
end

-- policy.ts countIgnored(): returns the new counts and whether the flag is raised.
local function count_ignored(ign, since, cost, grace)
  if since == 0 then
    if ign.since == 0 then return ign, false end
    return { since = 0, calls = 0, nano = 0, flagged = false }, false
  end
  local base = ign
  if ign.since ~= since then base = { since = since, calls = 0, nano = 0, flagged = false } end
  if NOW <= since + grace then return base, false end
  return { since = since, calls = base.calls + 1, nano = base.nano + cost, flagged = true }, not base.flagged
end

-- policy.ts stepEvent(), its arguments and answer positional (an event's are many, and
-- tables cost): the agent's ignored counts after it and whether its flag is raised; what
-- counting it changed is on each state (count_event()). The agent's ignored counts are agent.ign.
local function step_event(agent, fleet, agent_meters, fleet_meters, cost, llm_call, grace)
  local ignored, raised = agent.ign, false
  if llm_call then
    local holding = holding_pause(agent, fleet)
    local since = 0
    if holding then since = holding.since end
    ignored, raised = count_ignored(agent.ign, since, cost, grace)
  end
  count_event(agent, agent_meters, cost)
  count_event(fleet, fleet_meters, cost)
  return ignored, raised
end

-- policy.ts wouldGoOver(): the first meter (its table) that would go over, or nil.
local function would_go_over(st, meters, cost)
  if st.pause.override then return nil end
  for i, m in ipairs(meters) do
    if m.holds and over(m, st.spent[i] + cost, st.held) then return m end
  end
  return nil
end

-- policy.ts stepHold()
local function step_hold(agent, fleet, meters, cost, retry, run)
  local out = { agent = relax(agent, meters.agent), fleet = relax(fleet, meters.fleet) }
  if retry then return out end
  if holding_pause(agent, fleet) then
    out.refusal = 'paused'
    return out
  end
  local a = would_go_over(agent, meters.agent, cost)
  if a then
    out.refusal = a.tally and 'period_budget' or 'budget'
    return out
  end
  local f = would_go_over(fleet, meters.fleet, cost)
  if f then
    out.refusal = f.tally and 'fleet_period_budget' or 'fleet_budget'
    return out
  end
  if run and (run.s.stopped or run.s.spent + run.s.held + cost > run.budget) then out.refusal = 'run_budget' end
  return out
end

-- policy.ts countRun(): `run` {s = {spent, held, stopped}, budget}; true when this event stopped it.
local function count_run(run, cost, llm_call)
  local s = run.s
  s.spent = s.spent + cost
  if s.stopped or not llm_call or s.spent + s.held <= run.budget then return false end
  s.stopped = true
  return true
end

-- policy.ts manual()
local function manual(st, meters, paused)
  if st.pause.paused == paused and not (paused and st.pause.reason ~= 'manual') then return nil end
  if paused then
    st.pause = { paused = true, reason = 'manual', override = false, since = NOW }
  else
    st.pause = { paused = false, reason = '', override = first_over(st, meters) >= 0, since = 0 }
  end
  return { reason = 'manual', meter = -1, pause = st.pause }
end

-- policy.ts carryAlerts(): the bits of `alerted` over the levels `from` carried to `to`.
local function carry_alerts(alerted, from, to)
  local bits = 0
  for i, level in ipairs(to) do
    for j, old in ipairs(from) do
      if old == level and math.floor(alerted / 2 ^ (j - 1)) % 2 == 1 then bits = bits + 2 ^ (i - 1) end
    end
  end
  return bits
end

-- meters.ts limitsChanged()
local function limits_changed(before, after)
  if #before ~= #after then return true end
  for i, m in ipairs(before) do
    if m.id ~= after[i].id or m.limit ~= after[i].limit or m.minutes ~= after[i].minutes or m.tally ~= after[i].tally then return true end
  end
  return false
end

-- policy.ts changePolicy()
local function change_policy(st, before, after)
  local alerted = {}
  for j, m in ipairs(after) do
    alerted[j] = 0
    for i, old in ipairs(before) do
      if old.id == m.id and #old.alert_at > 0 and #m.alert_at > 0 then alerted[j] = carry_alerts(st.alerted[i], old.alert_at, m.alert_at) end
    end
  end
  st.alerted = alerted
  if not st.pause.override or not limits_changed(before, after) then return nil end
  st.pause = copy_pause(st.pause, false)
  return { reason = 'threshold_changed', meter = -1, pause = st.pause }
end

-- policy.ts levelsReached()
local function levels_reached(m, spent)
  local bits = 0
  for i, level in ipairs(m.alert_at) do
    if spent >= level * m.limit then bits = bits + 2 ^ (i - 1) end
  end
  return bits
end
