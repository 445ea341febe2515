-- Shared helpers, prepended by redis.ts to every hot-state script (Redis 7 scripts cannot
-- share functions otherwise). Every key of a script carries the hash tag of the user's
-- partition {p<n>} (storage/redis-keys.ts): one Redis Cluster slot per script. The agent
-- scripts (record, get, set_policy, set_paused) take the same first keys and arguments:
-- KEYS[1] :a  hash of the agent's state: loaded, total, calls, paused, reason, override,
--             threshold, auto_resume, webhook (absent when none), configured, version,
--             shown (the config as the audit log shows it, storage/configs.ts), hours,
--             alert_at (levels, comma-separated, ascending; absent: the default 0.8),
--             alerted (a bit per level: fired and not re-armed, policy.ts evaluateAlerts),
--             vlimit, vwindow (the velocity limit, nano-USD, 0 or absent: none; its window in
--             minutes, issue 13), paused_at (when the pause began, ms; 0 or absent: running),
--             ign_since, ign_calls, ign_nano, ign_flag (llm_calls after the pause that began
--             at ign_since and its grace: policy.ts countIgnored; absent: none), held (the
--             sum of its open budget holds, issue 13; absent: none)
-- KEYS[2] :w  hash of minute buckets: c<minute> = cost (nano-USD), n<minute> = llm calls,
--             and h<hour> = the cost of the buckets of each UTC hour (the projection's)
-- KEYS[3] :m  list of the bucket minutes, oldest first (RPUSH new, LPOP expired: amortised O(1))
-- KEYS[4] {p}:j:<instance>  this instance's journal stream of the partition (issue 8)
-- KEYS[5] {p}:fenced        instances whose journal another instance took over
-- KEYS[6] {p}:u:<user>      the user's agents, scored by the minute of their last event
-- ARGV[1] now (ms)  ARGV[2] agent TTL (ms)  ARGV[3] instance id  ARGV[4] rows the stream
-- may hold unshipped  ARGV[5] '"user_id":…,"agent_id":…' (JSON members)  ARGV[6] now as
-- ClickHouse DateTime text  ARGV[7] the agent id
-- Money is integer nano-USD: exact in Lua doubles up to 2^53, written back with '%.0f'
-- (never %d, which goes through a C int).
-- The window and state functions work on a state read by read_state(a, w, m, members), which
-- keeps its three keys and its JSON members: an agent's (A, W, M, ARGV[5]), or in record.lua
-- its fleet's, which is the agent '' of its user (types.ts FLEET) and has the same shape. A
-- fleet without a config has the threshold 'Infinity' (Lua's tonumber reads it as inf).
local WINDOW = 1440 -- minutes (src/window.ts)
local MINUTE_MS = 60000
local NEEDS_LOAD = 'NEEDS_LOAD'
local A, W, M = KEYS[1], KEYS[2], KEYS[3]
local NOW, TTL = tonumber(ARGV[1]), tonumber(ARGV[2])

local function fmt(x)
  return string.format('%.0f', x)
end

local function minute_of(ms)
  return math.floor(ms / MINUTE_MS)
end

-- window.ts inWindow(): an event of minute m counts while m > nowMinute - 1440.
local function in_window(minute, now_minute)
  return minute > now_minute - WINDOW
end

local function loaded()
  return redis.call('HGET', A, 'loaded') == '1'
end

local function hour_of(minute)
  return math.floor(tonumber(minute) / 60)
end

-- The hourly sums of a window's buckets, for a state kept before they existed (once).
local function sum_hours(a, w, m)
  local minutes = redis.call('LRANGE', m, 0, -1)
  for _, minute in ipairs(minutes) do
    redis.call('HINCRBY', w, 'h' .. hour_of(minute), redis.call('HGET', w, 'c' .. minute) or '0')
  end
  redis.call('HSET', a, 'hours', '1')
end

-- A state and its window, its keys and JSON members kept with it for the functions below;
-- nil when it is not loaded (the caller answers NEEDS_LOAD, and nothing was written).
local function read_state(a, w, m, members)
  local v = redis.call('HMGET', a, 'total', 'calls', 'paused', 'reason', 'override',
    'threshold', 'auto_resume', 'webhook', 'configured', 'hours', 'alert_at', 'alerted', 'loaded',
    'vlimit', 'vwindow', 'paused_at', 'ign_since', 'ign_calls', 'ign_nano', 'ign_flag', 'held')
  if v[13] ~= '1' then return nil end
  if not v[10] then sum_hours(a, w, m) end
  local levels = {}
  for level in string.gmatch(v[11] or '0.8', '[^,]+') do levels[#levels + 1] = level end
  return {
    a = a, w = w, m = m, members = members,
    alert_at = v[11] or '0.8', levels = levels, alerted = tonumber(v[12] or '0'),
    total = tonumber(v[1] or '0'), calls = tonumber(v[2] or '0'),
    paused = v[3] == '1', reason = v[4] or '', override = v[5] == '1',
    threshold = tonumber(v[6]), threshold_s = v[6], auto_resume = v[7] == '1',
    webhook = v[8] or false, configured = v[9] == '1', dirty = false,
    vlimit = tonumber(v[14] or '0'), vwindow = tonumber(v[15] or '5'), spent = 0, since = tonumber(v[16] or '0'), since_read = tonumber(v[16] or '0'),
    held = tonumber(v[21] or '0'), holds = v[21] ~= false,
    ign = { since = tonumber(v[17] or '0'), calls = tonumber(v[18] or '0'), nano = tonumber(v[19] or '0'), flagged = v[20] == '1' },
  }
end

local function b01(x)
  if x then return '1' end
  return '0'
end

local function save_state(st)
  redis.call('HSET', st.a, 'total', fmt(st.total), 'calls', fmt(st.calls), 'paused', b01(st.paused),
    'reason', st.reason, 'override', b01(st.override), 'alerted', st.alerted)
  -- Only a transition changes it: a running agent never gets the field (Redis memory per agent).
  if st.since ~= st.since_read then redis.call('HSET', st.a, 'paused_at', fmt(st.since)) end
end

-- policy.ts evaluateAlerts(), level for level: mutates st.alerted and returns the levels
-- fired (their text, as configured), lowest first.
local function evaluate_alerts(st, may_fire)
  local fired = {}
  for i, level in ipairs(st.levels) do
    local bit = 2 ^ (i - 1)
    local set = math.floor(st.alerted / bit) % 2 == 1
    if st.total >= tonumber(level) * st.threshold then
      if may_fire and not set then
        st.alerted = st.alerted + bit
        fired[#fired + 1] = level
      end
    elseif set then
      st.alerted = st.alerted - bit
    end
  end
  return fired
end

-- policy.ts alertsReached(): the bits of the levels the total is at or above.
local function alerts_reached(total, threshold, levels)
  local bits = 0
  for i, level in ipairs(levels) do
    if total >= tonumber(level) * threshold then bits = bits + 2 ^ (i - 1) end
  end
  return bits
end

-- RollingWindow.expire(): drop buckets that left the window from the head, each once.
local function expire(st, now_minute)
  while true do
    local head = redis.call('LINDEX', st.m, 0)
    if not head or in_window(tonumber(head), now_minute) then return end
    local b = redis.call('HMGET', st.w, 'c' .. head, 'n' .. head)
    st.total = st.total - tonumber(b[1] or '0')
    st.calls = st.calls - tonumber(b[2] or '0')
    redis.call('HDEL', st.w, 'c' .. head, 'n' .. head)
    redis.call('LPOP', st.m)
    -- The oldest hour goes with its last bucket.
    local h = hour_of(head)
    local next_head = redis.call('LINDEX', st.m, 0)
    if next_head and hour_of(next_head) == h then
      redis.call('HINCRBY', st.w, 'h' .. h, -tonumber(b[1] or '0'))
    else
      redis.call('HDEL', st.w, 'h' .. h)
    end
    st.dirty = true
  end
end

-- RollingWindow.add(): a minute older than the newest bucket (a rebuild, a clock step back)
-- folds into the newest one, which expires later, never earlier. cost, calls: integer strings.
local function add(st, minute, cost, calls)
  local tail = redis.call('LINDEX', st.m, -1)
  local bucket = minute
  if tail and tonumber(tail) >= tonumber(minute) then
    bucket = tail
  else
    redis.call('RPUSH', st.m, minute)
    st.pushed = true
  end
  redis.call('HINCRBY', st.w, 'c' .. bucket, cost)
  redis.call('HINCRBY', st.w, 'n' .. bucket, calls)
  redis.call('HINCRBY', st.w, 'h' .. hour_of(bucket), cost)
  st.total = st.total + tonumber(cost)
  st.calls = st.calls + tonumber(calls)
  st.dirty = true
end

-- RollingWindow.spentInLast(): the cost of the buckets newer than now_minute - minutes, at
-- most `minutes` of them (the newest buckets are the list's tail).
local function spent_in_last(st, now_minute, minutes)
  local sum, fields = 0, {}
  local tail = redis.call('LRANGE', st.m, -minutes, -1)
  for i = #tail, 1, -1 do
    if tonumber(tail[i]) <= now_minute - minutes then break end
    fields[#fields + 1] = 'c' .. tail[i]
  end
  if #fields > 0 then
    for _, c in ipairs(redis.call('HMGET', st.w, unpack(fields))) do sum = sum + tonumber(c or '0') end
  end
  return sum
end

-- What the projection reads (projection.ts Spend, RollingWindow.lastHourNano and hours):
-- {cost of the buckets newer than now_minute - 60, {hour, cost, hour, cost, …} oldest first}.
-- At most 60 buckets and 25 hours.
local function spend(st, now_minute)
  local last = spent_in_last(st, now_minute, 60)
  local hours = {}
  local first, newest = redis.call('LINDEX', st.m, 0), redis.call('LINDEX', st.m, -1)
  if first then
    local names = {}
    for h = hour_of(first), hour_of(newest) do names[#names + 1] = 'h' .. h end
    local costs = redis.call('HMGET', st.w, unpack(names))
    for i = 1, #names do
      if costs[i] then
        hours[#hours + 1] = string.sub(names[i], 2)
        hours[#hours + 1] = costs[i]
      end
    end
  end
  return { fmt(last), hours }
end

-- The spend in the state's velocity window (issue 13), kept in st.spent for a transition's
-- reply; 0 without a limit (nothing read).
local function velocity(st)
  if st.vlimit > 0 then st.spent = spent_in_last(st, minute_of(NOW), st.vwindow) else st.spent = 0 end
  return st.spent
end

-- Budget holds (issue 13). A state's open holds are `held` in its :a (their sum, nano-USD;
-- absent: it has none) and two keys of its own: :hz, a ZSET of hold ids scored by their
-- expiry (ms), and :h, a HASH of <hold id> = its amount, for a fleet '<amount>:<agent id>'
-- (whose it is). Both keys expire a minute after their last hold; load.lua drops them with
-- the state they belong to. A state without holds costs an event nothing: `held` comes with
-- its HMGET, and only a state that has the field reads its keys.

-- Writes st.held back: the field goes once no hold is left.
local function save_held(st)
  if redis.call('ZCARD', st.hz) == 0 then
    st.held, st.holds = 0, false
    redis.call('HDEL', st.a, 'held')
  else
    redis.call('HSET', st.a, 'held', fmt(st.held))
  end
end

-- Reads the state's open holds: drops the expired ones from the head (at most 256 a call:
-- more wait for the next, counted until then), and finds none left once the keys are gone.
local function read_held(st, hz, h)
  st.hz, st.h = hz, h
  if not st.holds then return end
  local gone = redis.call('ZRANGEBYSCORE', hz, '-inf', NOW, 'LIMIT', 0, 256)
  if #gone > 0 then
    for _, v in ipairs(redis.call('HMGET', h, unpack(gone))) do
      if v then st.held = st.held - tonumber(string.match(v, '^%d+')) end
    end
    redis.call('ZREM', hz, unpack(gone))
    redis.call('HDEL', h, unpack(gone))
    save_held(st)
  elseif redis.call('EXISTS', hz) == 0 then
    -- Its keys expired with it unread: nothing is held (save_held drops the field).
    save_held(st)
  end
  -- Otherwise nothing changed: no write (the fleet's holds are read by every event of the user).
end

-- Whether the state holds the hold `id` (read_held first: an expired one is gone).
local function has_hold(st, id)
  return st.holds and redis.call('HEXISTS', st.h, id) == 1
end

-- Adds a hold of `nano` expiring at `expires` (ms) to the state; `value` is its :h entry.
local function put_hold(st, id, nano, expires, value)
  st.held, st.holds = st.held + nano, true
  redis.call('HSET', st.a, 'held', fmt(st.held))
  redis.call('ZADD', st.hz, expires, id)
  redis.call('HSET', st.h, id, value)
  local ttl = tonumber(expires) - NOW + MINUTE_MS
  if redis.call('PTTL', st.hz) < ttl then
    redis.call('PEXPIRE', st.hz, ttl)
    redis.call('PEXPIRE', st.h, ttl)
  end
end

-- Removes the hold `id` from the state; returns its :h entry, or nil when it holds none.
local function take_hold(st, id)
  if not st.holds then return nil end
  local v = redis.call('HGET', st.h, id)
  if not v then return nil end
  redis.call('ZREM', st.hz, id)
  redis.call('HDEL', st.h, id)
  st.held = st.held - tonumber(string.match(v, '^%d+'))
  save_held(st)
  return v
end

-- policy.ts evaluate(), branch for branch; mutates st and returns the reason, or nil. The
-- total it judges counts the open holds (st.held, issue 13).
local function evaluate(st, may_pause)
  local under = st.total + st.held <= st.threshold
  local spent = velocity(st)
  local slow = st.vlimit == 0 or spent <= st.vlimit
  if st.override and under and slow then
    st.override = false
    return 'override_cleared'
  end
  if st.paused and st.reason == 'budget' and st.auto_resume and under then
    st.paused, st.reason, st.override, st.since = false, '', false, 0
    return 'auto_resume'
  end
  if may_pause and not st.paused and not st.override and not (under and slow) then
    local reason = under and 'velocity' or 'budget'
    st.paused, st.reason, st.override, st.since = true, reason, false, NOW
    return reason
  end
  return nil
end

-- policy.ts manual(); mutates st and returns whether the state changed.
local function manual(st, paused)
  if st.paused == paused and not (paused and st.reason ~= 'manual') then return false end
  if paused then
    st.paused, st.reason, st.override, st.since = true, 'manual', false, NOW
  else
    local spent = velocity(st)
    st.paused, st.reason, st.override, st.since = false, '', st.total + st.held > st.threshold or (st.vlimit > 0 and spent > st.vlimit), 0
  end
  return true
end

-- The journal (issue 8). A script that may append checks first, before it changes
-- anything: 'FENCED' when another instance took this one's journal over (it rejoins under
-- a new id and calls again), 'FULL' at the bound (bounded writes only; reads append the
-- rare relaxing transition past it). nil when it may go on.
local function journal_closed(bounded)
  if redis.call('SISMEMBER', KEYS[5], ARGV[3]) == 1 then return 'FENCED' end
  if bounded and redis.call('XLEN', KEYS[4]) >= tonumber(ARGV[4]) then return 'FULL' end
  return nil
end

-- One row for a table, as the JSON the shipper sends to ClickHouse (journal/redis-streams.ts).
local function journal(table_name, json)
  redis.call('XADD', KEYS[4], '*', 't', table_name, 'a', ARGV[1], 'j', json)
end

-- The agent's next version: grows per agent whatever the callers' clocks do.
local function next_version(st)
  local version = math.max(NOW * 1000, tonumber(redis.call('HGET', st.a, 'version') or '0') + 1)
  redis.call('HSET', st.a, 'version', fmt(version))
  return version
end

-- Journals a change of pause state as its pause_transitions row, and returns it for the
-- caller: {reason, paused, override, total, threshold, webhook, version, spent, vlimit,
-- vwindow, held} (the velocity window's spend and the limit, for its message; the open holds). A nil would end
-- the reply array there, so an absent webhook is false (a nil reply). Versions grow per
-- agent whatever the callers' clocks do: newest wins at a rebuild. `actor`: the key id of
-- the request, or 'system' (the audit log's, sql/0012).
local function transition(st, reason, actor)
  local version = next_version(st)
  local paused, override = st.paused and 'true' or 'false', st.override and 'true' or 'false'
  journal('pause_transitions', '{' .. st.members .. ',"at":"' .. ARGV[6] .. '","version":' .. fmt(version) ..
    ',"is_paused":' .. paused .. ',"reason":"' .. reason .. '","override":' .. override ..
    ',"total_nano":' .. fmt(st.total) .. ',"actor":' .. cjson.encode(actor or 'system') .. '}')
  return { reason, st.paused and 1 or 0, st.override and 1 or 0, fmt(st.total), st.threshold_s, st.webhook or false, fmt(version),
    fmt(st.spent), fmt(st.vlimit), st.vwindow, fmt(st.held) }
end

-- Journals an alert level crossed (its budget_alerts row) and returns {level, version}.
local function alert(st, level)
  local version = next_version(st)
  journal('budget_alerts', '{' .. st.members .. ',"at":"' .. ARGV[6] .. '","version":' .. fmt(version) ..
    ',"level":' .. level .. ',"total_nano":' .. fmt(st.total) .. ',"threshold_nano":' .. st.threshold_s .. '}')
  return { level, fmt(version) }
end

-- Event ids (issue 8: at most 64 bytes each). An id is kept as a 12-byte fingerprint (hex) of
-- (user, agent, event id), computed by the caller, in its partition's table for the UTC hour
-- of the minute it was counted in: {p}:e:<hour>:<i>, a linear hash of small hashes, each
-- held by Redis in its compact listpack encoding (under 128 fields: a bucket splits when the
-- table averages SPLIT_AT ids per bucket). {p}:e (ID_META) holds b<hour> (buckets) and
-- n<hour> (ids) per table. A table's keys expire when its last minute has left the window,
-- all at once; until then an entry whose own minute has left it is not found, so the window's
-- edge is exact to the minute. Bucket keys are named from ID_META in the script: they carry
-- its hash tag, so they are in the script's slot.
local SPLIT_AT = 40

local function h32(fp)
  return tonumber(string.sub(fp, 1, 8), 16)
end

-- Linear hashing: the bucket of hash h in a table of `buckets` buckets.
local function bucket_of(h, buckets)
  local size = 1
  while size * 2 <= buckets do size = size * 2 end
  local i = h % (size * 2)
  if i >= buckets then i = h % size end
  return i
end

local function id_bucket(meta, hour, i)
  return meta .. ':' .. hour .. ':' .. i
end

-- The partition's tables still in the window: {[hour] = {b = buckets, n = ids}}; the meta of
-- those that left it is dropped (their buckets expire on their own).
local function id_tables(meta, now_minute)
  local flat = redis.call('HGETALL', meta)
  local t = {}
  for i = 1, #flat, 2 do
    local hour = tonumber(string.sub(flat[i], 2))
    t[hour] = t[hour] or { b = 1, n = 0 }
    t[hour][string.sub(flat[i], 1, 1)] = tonumber(flat[i + 1])
  end
  for hour in pairs(t) do
    if not in_window(hour * 60 + 59, now_minute) then
      redis.call('HDEL', meta, 'b' .. hour, 'n' .. hour)
      t[hour] = nil
    end
  end
  return t
end

-- The cost the id was counted with, while its minute is in the window; nil otherwise.
local function seen_cost(meta, tables, fp, now_minute)
  local h = h32(fp)
  for hour, tb in pairs(tables) do
    local v = redis.call('HGET', id_bucket(meta, hour, bucket_of(h, tb.b)), fp)
    if v then
      local sep = string.find(v, ':', 1, true)
      if in_window(hour * 60 + tonumber(string.sub(v, sep + 1)), now_minute) then return string.sub(v, 1, sep - 1) end
    end
  end
  return nil
end

-- Remembers an id (the caller looked it up first) as counted at `cost` in `minute`.
local function remember(meta, tables, fp, cost, minute)
  minute = tonumber(minute)
  local hour = math.floor(minute / 60)
  local tb = tables[hour]
  if not tb then
    tb = { b = 1, n = 0 }
    tables[hour] = tb
  end
  -- Relative to the caller's clock, as the window is: the TTL only collects garbage.
  local ttl = math.max(1, ((hour + 1) * 60 + WINDOW) * MINUTE_MS - NOW)
  if tb.n + 1 > SPLIT_AT * tb.b then
    -- The next bucket in order splits: its ids that now address the new bucket move there.
    local size = 1
    while size * 2 <= tb.b do size = size * 2 end
    local from, to = id_bucket(meta, hour, tb.b - size), id_bucket(meta, hour, tb.b)
    local flat = redis.call('HGETALL', from)
    for i = 1, #flat, 2 do
      if bucket_of(h32(flat[i]), tb.b + 1) == tb.b then
        redis.call('HSET', to, flat[i], flat[i + 1])
        redis.call('HDEL', from, flat[i])
      end
    end
    redis.call('PEXPIRE', to, ttl)
    tb.b = tb.b + 1
  end
  local key = id_bucket(meta, hour, bucket_of(h32(fp), tb.b))
  if redis.call('HSETNX', key, fp, cost .. ':' .. (minute - hour * 60)) == 0 then return end
  tb.n = tb.n + 1
  redis.call('HSET', meta, 'b' .. hour, tb.b, 'n' .. hour, tb.n)
  redis.call('PEXPIRE', key, ttl)
  if redis.call('PTTL', meta) < ttl then redis.call('PEXPIRE', meta, ttl) end
end

-- Writes refresh the agent's TTL, so an idle agent expires on its own and is loaded again
-- from ClickHouse on demand. An event refreshes it only when it starts a minute bucket
-- (st.pushed): the keys then live at least 24 h 59 min after the agent's last event, longer
-- than the window, and a busy agent pays for it once a minute instead of on every event.
local function touch(st)
  redis.call('PEXPIRE', st.a, TTL)
  redis.call('PEXPIRE', st.w, TTL)
  redis.call('PEXPIRE', st.m, TTL)
end
