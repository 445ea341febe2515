-- set_policy: POST /config (memory.ts setPolicy(), rules.lua change_policy()): store the
-- policy and journal its agent_configs row; a changed limit ends a manual override.
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, base, meters, states (one, with the meters of the
--   policy it replaces: state.lua read_states), policy (the new one's JSON), new_meters (its
--   meters), version (its row's), shown (the config as the audit log shows it), actor,
--   history (when the new policy starts counting a period: {cut (a minute), quarters (flat
--   [quarter, cost, …]: what the stored events spent per quarter hour before it)})
-- ARGV[2] the config's row (JSON, without "replaced": the config it replaces is appended here)
-- Returns a control answer (state.lua control(): FENCED, FULL, NEEDS_LOAD, STALE), or {pv
-- (the version now stored), transition}.
local closed = journal_closed(true)
if closed then return control(closed) end
local states, answer_now = read_states()
if not states then return answer_now end
local st = states[1]
local replaced = redis.call('HGET', st.s, 'shown') or ''
local change = change_policy(st, st.meters, A.new_meters)
-- Versions only grow, whatever the callers' clocks do: every instance's cache tells them apart.
st.pv = math.max(A.version, st.pv + 1)
redis.call('HSET', st.s, 'policy', A.policy, 'shown', A.shown)
-- The tallies of windows and periods the new policy no longer has go (a tally is kept only
-- while a meter reads it: one taken up again restarts); change_policy() carried the alert
-- bits over.
local kept = {}
for _, w in ipairs(tallies_of(A.new_meters)) do kept[w.minutes] = true end
for _, m in ipairs(A.new_meters) do
  if m.tally then kept[m.tally] = true end
end
for key in pairs(st.tallies) do
  if not kept[key] then st.tallies[key] = nil end
end

-- The periods it starts counting begin from the stored spend before the history's cut and
-- the buckets from the cut on (the day's window holds every minute from it). A rolling window
-- among them has :d made anew: the stored hours and the buckets' (the newest bucket is added
-- to :d when a newer one starts, add()).
local history = A.history or { cut = 0, quarters = {} }
local new_windows = windows_of(A.new_meters)
local oldest, starting = nil, {}
for _, m in ipairs(A.new_meters) do
  if m.tally and not st.tallies[m.tally] then starting[#starting + 1] = m end
  if m.rolling and (not oldest or m.from < oldest) then oldest = m.from end
end
if #starting > 0 then
  local q = history.quarters
  if oldest then
    local hours = {}
    for i = 1, #q, 2 do
      if q[i] * 15 >= oldest and q[i] * 15 < history.cut then
        local h = math.floor(q[i] / 4)
        hours[h] = (hours[h] or 0) + q[i + 1]
      end
    end
    for minute, b in pairs(buckets_between(st, math.max(oldest, history.cut), st.cm)) do
      if minute ~= st.cm then hours[hour_of(minute)] = (hours[hour_of(minute)] or 0) + b[1] end
    end
    -- :d holds the buckets before the newest: a newest one before the cut is in the stored
    -- spend, and comes to :d when it is written.
    if st.cm >= oldest and st.cm < history.cut and st.cc ~= 0 then hours[hour_of(st.cm)] = (hours[hour_of(st.cm)] or 0) - st.cc end
    redis.call('DEL', st.d)
    local flat = {}
    for h, cost in pairs(hours) do
      flat[#flat + 1], flat[#flat + 2] = h, cost
    end
    if #flat > 0 then redis.call('HSET', st.d, unpack(flat)) end
  end
  for _, m in ipairs(starting) do
    local spent = 0
    if m.rolling then
      spent = hours_cost(st, hour_of(m.from), math.max(hour_of(NOW_MINUTE), hour_of(st.cm)))
    else
      for i = 1, #q, 2 do
        if q[i] * 15 >= m.from and q[i] * 15 < history.cut then spent = spent + q[i + 1] end
      end
      for _, b in pairs(buckets_between(st, math.max(m.from, history.cut), st.cm)) do spent = spent + b[1] end
    end
    st.tallies[m.tally] = { from = m.from, spent = spent }
  end
end
if not new_windows.rolling then redis.call('DEL', st.d) end
st.windows = new_windows
journal('agent_configs', string.sub(ARGV[2], 1, -2) .. ',"replaced":' .. cjson.encode(replaced) .. '}')
local out = { pv = fmt(st.pv) }
if change then out.transition = transition(st, 'agent', change, st.total, A.actor) end
save_state(st)
touch(st)
return cjson.encode(out)
