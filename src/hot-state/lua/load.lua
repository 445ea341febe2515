-- load: install an agent's state as ClickHouse has it, ONLY IF the agent is not loaded, so
-- two instances loading at once, or a load racing a record, never count twice: a re-seed
-- replaces a lost state exactly once and never adds on top of live counters.
-- KEYS[1] :a  KEYS[2] :w  KEYS[3] :m  (see lib.lua)  KEYS[4] {p}:e  the event-id tables
-- KEYS[5] :hz  KEYS[6] :h  its budget holds (lib.lua), which go with the state they count in
-- ARGV[1] now (ms)  ARGV[2] agent TTL (ms)  ARGV[4..] the fingerprints of seen[1..]
-- ARGV[3] JSON {minutes: [[minute, cost, calls]] oldest first, seen: [[cost, minute]],
--   policy: {threshold, auto_resume (0|1), webhook|false, configured (0|1), shown|false,
--     alert_at (comma-separated), vlimit (0: none), vwindow},
--   pause: {paused (0|1), reason ('' when running), override (0|1), since (ms, 0: running)},
--   ignored: {since, calls, nano, flagged (0|1)} (the newest ignoring-pause record; since 0: none)},
--   numbers as strings
-- Returns 1 when it installed, 0 when the agent was loaded already. The rules do not run:
-- what a load finds is what was decided, and the next event evaluates as usual.
if loaded() then return 0 end
local now_minute = minute_of(NOW)
-- Leftover buckets of a partly expired agent must not add to the loaded ones.
redis.call('DEL', A, W, M, KEYS[5], KEYS[6])
local data = cjson.decode(ARGV[3])
local st = { total = 0, calls = 0, a = A, w = W, m = M }
for _, b in ipairs(data.minutes) do
  if in_window(tonumber(b[1]), now_minute) then add(st, b[1], b[2], b[3]) end
end
-- Ids the partition still remembers (the agent's keys expired before its ids) stay as they are.
local ids = id_tables(KEYS[4], now_minute)
for i = 4, #ARGV do
  local s = data.seen[i - 3]
  if in_window(tonumber(s[2]), now_minute) and not seen_cost(KEYS[4], ids, ARGV[i], now_minute) then
    remember(KEYS[4], ids, ARGV[i], s[1], s[2])
  end
end
local p, q = data.policy, data.pause
redis.call('HSET', A, 'total', fmt(st.total), 'calls', fmt(st.calls),
  'paused', q.paused, 'reason', q.reason, 'override', q.override,
  'threshold', p.threshold, 'auto_resume', p.auto_resume, 'configured', p.configured,
  'loaded', '1', 'hours', '1')
if p.configured == '1' then redis.call('HSET', A, 'vlimit', p.vlimit, 'vwindow', p.vwindow) end
-- A running agent, and one never flagged, get no field for it (Redis memory per agent).
if q.since ~= '0' then redis.call('HSET', A, 'paused_at', q.since) end
local g = data.ignored
if g.since ~= '0' then redis.call('HSET', A, 'ign_since', g.since, 'ign_calls', g.calls, 'ign_nano', g.nano, 'ign_flag', g.flagged) end
if p.webhook then redis.call('HSET', A, 'webhook', p.webhook) end
if p.shown then redis.call('HSET', A, 'shown', p.shown) end
-- The levels the total is at count as fired (memory.ts beginRestore says why).
local levels = {}
for level in string.gmatch(p.alert_at, '[^,]+') do levels[#levels + 1] = level end
redis.call('HSET', A, 'alert_at', p.alert_at, 'alerted', alerts_reached(st.total, tonumber(p.threshold), levels))
touch(st)
return 1
