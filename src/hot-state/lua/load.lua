-- load: install an agent's state as ClickHouse has it, ONLY IF the agent is not loaded, so
-- two instances loading at once, or a load racing a record, never count twice: a re-seed
-- replaces a lost state exactly once and never adds on top of live counters.
-- KEYS[1] :a  KEYS[2] :w  KEYS[3] :m  (see lib.lua)  KEYS[4..] :e:<event_id> of seen[1..]
-- ARGV[1] now (ms)  ARGV[2] agent TTL (ms)  ARGV[3] rebuild (0|1)
-- ARGV[4] JSON {minutes: [[minute, cost, calls]] oldest first, seen: [[cost, minute]],
--   policy: {threshold, auto_resume (0|1), webhook|false, configured (0|1)},
--   pause: {paused (0|1), reason ('' when running), override (0|1)}}, numbers as strings
-- Returns {installed (0|1), transition or nil}. With rebuild=1 the rules run with mayPause,
-- as memory.ts restore() does: a crossing stored just before a crash is acted on now.
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local now_minute = minute_of(now)
local installed = 0
if not loaded() then
  installed = 1
  -- Leftover buckets of a partly expired agent must not add to the loaded ones.
  redis.call('DEL', A, W, M)
  local data = cjson.decode(ARGV[4])
  local st = { total = 0, calls = 0 }
  for _, b in ipairs(data.minutes) do
    if in_window(tonumber(b[1]), now_minute) then add(st, b[1], b[2], b[3]) end
  end
  for i = 4, #KEYS do
    local s = data.seen[i - 3]
    if in_window(tonumber(s[2]), now_minute) then remember(KEYS[i], s[1], s[2], now, ttl) end
  end
  local p, q = data.policy, data.pause
  redis.call('HSET', A, 'total', fmt(st.total), 'calls', fmt(st.calls),
    'paused', q.paused, 'reason', q.reason, 'override', q.override,
    'threshold', p.threshold, 'auto_resume', p.auto_resume, 'configured', p.configured,
    'loaded', '1')
  if p.webhook then redis.call('HSET', A, 'webhook', p.webhook) end
  touch(ttl)
end
local out = false
if ARGV[3] == '1' then
  local st = read_state()
  expire(st, now_minute)
  local reason = evaluate(st, true)
  if reason then out = transition(st, reason) end
  if reason or st.dirty then
    save_state(st)
    touch(ttl)
  end
end
return { installed, out }
