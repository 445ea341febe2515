-- set_policy: POST /config (memory.ts setPolicy(), rules.lua change_policy()): store the
-- policy and journal its agent_configs row; a changed limit ends a manual override.
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, base, meters, states (one, with the meters of the
--   policy it replaces: state.lua read_states), policy (the new one's JSON), new_meters (its
--   meters), version (its row's), shown (the config as the audit log shows it), actor
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
-- The tallies of windows the new policy no longer has go (a tally is kept only while a meter
-- reads it: one taken up again restarts); change_policy() carried the alert bits over.
local kept = {}
for _, w in ipairs(tallies_of(A.new_meters)) do kept[w.minutes] = true end
for _, w in ipairs(st.windows) do
  if not kept[w.minutes] then st.tallies[w.minutes] = nil end
end
journal('agent_configs', string.sub(ARGV[2], 1, -2) .. ',"replaced":' .. cjson.encode(replaced) .. '}')
local out = { pv = fmt(st.pv) }
if change then out.transition = transition(st, 'agent', change, st.total, A.actor) end
save_state(st)
touch(st)
return cjson.encode(out)
