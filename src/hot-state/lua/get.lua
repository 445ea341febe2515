-- get: a state's window and pause after the time passed (HotState.get, memory.ts get()): only
-- the relaxing rules apply (reads never pause), and what they change is journaled.
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, state {key, pv, meters, members}, with_spend (what
--   the projection reads; a listing leaves it out)
-- Returns a control answer (state.lua control(): FENCED, NEEDS_LOAD, STALE), or {total, calls, active, pause
-- {paused, reason, override, since}, held, ignored {since, calls, nano, flagged}, transition,
-- spend}.
local closed = journal_closed(false)
if closed then return control(closed) end
local s = A.state
local st = read_state(s.key, s.meters, s.members)
if not st then return control('NEEDS_LOAD', { keys = { s.key } }) end
local outdated = stale({ st, s.pv })
if outdated then return outdated end
move_on(st)
expire_holds(st)
judge(st, s.meters)
local change = relax(st, s.meters)
local out = {
  total = fmt(st.total), calls = fmt(st.calls), active = redis.call('LLEN', st.m) > 0,
  pause = { paused = st.pause.paused, reason = st.pause.reason, override = st.pause.override, since = fmt(st.pause.since) },
  held = fmt(st.held),
  ignored = { since = fmt(st.ign.since), calls = fmt(st.ign.calls), nano = fmt(st.ign.nano), flagged = st.ign.flagged },
}
if change then out.transition = transition(st, 'agent', change, st.total) end
if A.with_spend then out.spend = spend(st) end
-- A read writes only what the time passed and the relaxing rules changed, and does not
-- refresh the TTL: an agent that is only read still expires and is loaded again on demand.
save_state(st)
return cjson.encode(out)
