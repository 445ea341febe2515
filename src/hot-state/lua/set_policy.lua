-- set_policy: POST /config (memory.ts setPolicy(), rules.lua change_policy()): store the
-- policy and journal its agent_configs row; a changed limit ends a manual override.
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, state {key, pv, meters (the policy's it replaces),
--   members}, policy (the new one's JSON), meters (the new one's), version (its row's), shown
--   (the config as the audit log shows it), actor
-- ARGV[2] the config's row (JSON, without "replaced": the config it replaces is appended here)
-- Returns a control answer (state.lua control(): FENCED, FULL, NEEDS_LOAD, STALE), or {pv (the version now
-- stored), transition}.
local closed = journal_closed(true)
if closed then return control(closed) end
local s = A.state
local st = read_state(s.key, s.meters, s.members)
if not st then return control('NEEDS_LOAD', { keys = { s.key } }) end
local outdated = stale({ st, s.pv })
if outdated then return outdated end
local replaced = redis.call('HGET', st.s, 'shown') or ''
local change = change_policy(st, s.meters, A.meters)
-- Versions only grow, whatever the callers' clocks do: every instance's cache tells them apart.
local pv = math.max(A.version, st.pv + 1)
redis.call('HSET', st.s, 'pv', fmt(pv), 'policy', A.policy, 'shown', A.shown)
-- Alert bits of meters the new policy no longer has go.
for _, m in ipairs(s.meters) do
  if st.alerted[m.id] == nil and st.alerted_read[m.id] ~= 0 then redis.call('HDEL', st.s, 'al:' .. m.id) end
end
for id in pairs(st.alerted) do st.alerted_read[id] = st.alerted_read[id] or 0 end
journal('agent_configs', string.sub(ARGV[2], 1, -2) .. ',"replaced":' .. cjson.encode(replaced) .. '}')
local out = { pv = fmt(pv) }
if change then out.transition = transition(st, 'agent', change, st.total, A.actor) end
save_state(st)
touch(st)
return cjson.encode(out)
