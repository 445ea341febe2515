-- read: states of one user as they are now (RedisHotState.get: one, with the projection;
-- listAgents: up to 500), in the order of A.states. Only the relaxing rules apply (reads
-- never pause), and what they change is journaled.
-- K: journal, fenced
-- A: now, ttl, instance, stream_rows, at, base, meters, states (state.lua read_states),
--   with_projection (when each daily budget runs out)
-- Returns a control answer (state.lua control(): FENCED, NEEDS_LOAD naming every missing
-- state, STALE), or {states = [{total, calls, active, last_minute (the newest bucket's),
-- pause {paused, reason, override, since}, held, ignored {since, calls, nano, flagged},
-- transition, exhausts, periods (what each period budget's period holds, in the meters'
-- order, absent without any), last_hour (with periods: the last 60 minutes' spend)}…]}.
local closed = journal_closed(false)
if closed then return control(closed) end
local states, answer_now = read_states()
if not states then return answer_now end
local out = {}
for i, s in ipairs(states) do
  local st = judge(s, s.meters)
  local change = relax(st, st.meters)
  local one = {
    total = fmt(st.total), calls = fmt(st.calls), active = st.cm >= DAY_FROM, last_minute = fmt(st.cm),
    pause = { paused = st.pause.paused, reason = st.pause.reason, override = st.pause.override, since = fmt(st.pause.since) },
    held = fmt(st.held),
    ignored = { since = fmt(st.ign.since), calls = fmt(st.ign.calls), nano = fmt(st.ign.nano), flagged = st.ign.flagged },
  }
  if change then one.transition = transition(st, 'agent', change, st.total) end
  if A.with_projection and st.budget then one.exhausts = exhaustion(st, st.budget) end
  local periods = period_answer(st)
  if periods then one.periods, one.last_hour = periods, fmt(spent_of(st, LAST_HOUR, NOW_MINUTE - LAST_HOUR + 1)) end
  -- A read writes only what the time passed and the relaxing rules changed, and does not
  -- refresh the TTL: an agent that is only read still expires and is loaded again on demand.
  save_state(st)
  out[i] = one
end
return cjson.encode({ states = out })
