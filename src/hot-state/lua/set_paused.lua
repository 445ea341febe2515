-- set_paused: POST /config/pause (memory.ts setPaused(), rules.lua manual()).
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, state {key, pv, meters, members}, paused, actor
-- Returns a control answer (state.lua control(): FENCED, FULL, NEEDS_LOAD, STALE), or {transition} (absent
-- when the state already was that).
local closed = journal_closed(true)
if closed then return control(closed) end
local s = A.state
local st = read_state(s.key, s.meters, s.members)
if not st then return control('NEEDS_LOAD', { keys = { s.key } }) end
local outdated = stale({ st, s.pv })
if outdated then return outdated end
move_on(st)
expire_holds(st)
judge(st, s.meters)
local change = manual(st, s.meters, A.paused)
local out = {}
if change then out.transition = transition(st, 'agent', change, st.total, A.actor) end
save_state(st)
touch(st)
return cjson.encode(out)
