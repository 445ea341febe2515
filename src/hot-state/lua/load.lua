-- load: install a state as ClickHouse has it, ONLY IF it is not loaded, so two instances
-- loading at once, or a load racing a record, never count twice: a load replaces a lost
-- state exactly once and never adds on top of live counters. The rules do not run: what a
-- load finds is what was decided, and the next event is judged as usual.
-- K: ids (the partition's event ids, state.lua)
-- A: now, ttl, key (the state's :s), minutes [[minute, cost, calls]] oldest first, seen
--   [[cost, minute]], pv, policy (JSON, absent: the default), shown (absent: none), pause
--   {paused, reason ('' while running), override, since}, ignored {since, calls, nano,
--   flagged} (absent: none), alerted {[meter id] = bits} (the levels the loaded spend is at,
--   which count as fired)
-- ARGV[2..] the fingerprints of seen[1..]
-- Returns {installed = true}, or {installed = false} when the state was loaded already.
if redis.call('HGET', A.key, 'loaded') == '1' then return '{"installed":false}' end
local base = string.sub(A.key, 1, -3)
local st = { s = A.key, w = base .. ':w', total = 0, calls = 0, from = DAY_FROM, newest = 0, tallies = {} }
-- Leftovers of a partly expired state (and its holds, which counted in the state lost) must
-- not add to what is loaded. The tallies start from the buckets when they are first read.
redis.call('DEL', st.s, st.w, base .. ':hz', base .. ':h')
for _, b in ipairs(A.minutes) do
  if b[1] >= DAY_FROM then add(st, b[1], b[2], b[3]) end
end
-- Ids the partition still remembers (the state's keys expired before its ids) stay as they are.
local ids = id_tables()
for i = 2, #ARGV do
  local s = A.seen[i - 1]
  if s[2] >= DAY_FROM and not seen_cost(ids, ARGV[i]) then remember(ids, ARGV[i], fmt(s[1]), s[2]) end
end
save_ids(ids)
redis.call('HSET', st.s, 'loaded', '1', 'total', st.total, 'calls', st.calls, 'from', DAY_FROM, 'newest', st.newest)
if A.pv > 0 then redis.call('HSET', st.s, 'pv', fmt(A.pv), 'policy', A.policy, 'shown', A.shown) end
local pause, ignored = pause_text(A.pause), A.ignored and ignored_text(A.ignored)
if pause then redis.call('HSET', st.s, 'pause', pause) end
if ignored then redis.call('HSET', st.s, 'ign', ignored) end
for id, bits in pairs(A.alerted) do
  if bits > 0 then redis.call('HSET', st.s, 'al:' .. id, bits) end
end
touch(st)
return '{"installed":true}'
