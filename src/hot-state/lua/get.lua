-- get: the agent's window and state after expiry; only the relaxing rules apply (reads never
-- pause), and what they change is journaled. KEYS[1..6], ARGV[1..7] (lib.lua)
-- KEYS[7..8] the agent's :hz :h (its open budget holds, lib.lua)
-- ARGV[8] 1: with what the projection reads (a listing leaves them out: 0)
-- Returns NEEDS_LOAD, FENCED, or {{total, calls, paused, reason, override, threshold,
-- auto_resume, webhook, configured, active, alert_at, vlimit, vwindow, paused_at, ign_since,
-- ign_calls, ign_nano, ign_flag (0|1), held}, transition or false,
-- spend (lib.lua) or false}.
local closed = journal_closed(false)
if closed then return closed end
local st = read_state(A, W, M, ARGV[5])
if not st then return NEEDS_LOAD end
local now_minute = minute_of(NOW)
expire(st, now_minute)
read_held(st, KEYS[7], KEYS[8])
local relaxed = evaluate(st, false)
local out = false
if relaxed then out = transition(st, relaxed) end
-- A read writes only what expiry and the relaxing rules changed, and does not refresh the
-- TTL: an agent that is only read still expires and is loaded again on demand.
if st.dirty or relaxed then save_state(st) end
return {
  { fmt(st.total), fmt(st.calls), st.paused and 1 or 0, st.reason, st.override and 1 or 0,
    st.threshold_s, st.auto_resume and 1 or 0, st.webhook or false, st.configured and 1 or 0,
    redis.call('LLEN', M) > 0 and 1 or 0, st.alert_at, fmt(st.vlimit), st.vwindow, fmt(st.since),
    fmt(st.ign.since), fmt(st.ign.calls), fmt(st.ign.nano), st.ign.flagged and 1 or 0, fmt(st.held) },
  out,
  ARGV[8] == '1' and spend(st, now_minute) or false,
}
