-- set_paused: POST /config/pause (memory.ts setPaused(), rules.lua manual()).
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, base, meters, states (one: state.lua read_states),
--   paused, actor
-- Returns a control answer (state.lua control(): FENCED, FULL, NEEDS_LOAD, STALE), or
-- {transition} (absent when the state already was that).
local closed = journal_closed(true)
if closed then return control(closed) end
local states, answer_now = read_states()
if not states then return answer_now end
local st = judge(states[1], states[1].meters)
local change = manual(st, st.meters, A.paused)
local out = {}
if change then out.transition = transition(st, 'agent', change, st.total, A.actor) end
save_state(st)
touch(st)
return cjson.encode(out)
