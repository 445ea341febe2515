-- What every hot-state script shares: how a state is kept in Redis, read and written, its
-- window, its budget holds, the event ids, and the journal. redis.ts prepends this file and
-- rules.lua to every hot-state script (Redis 7 scripts cannot share functions otherwise),
-- after a prelude it writes from the script's description (scripts.ts): K, the script's keys
-- by name, and A, its arguments (ARGV[1], JSON) by name; ARGV[2..] are the script's own.
-- Every key carries the hash tag of the user's partition {p<n>} (storage/redis-keys.ts): one
-- Redis Cluster slot per script. Money is integer nano-USD: exact in Lua doubles up to 2^53,
-- written back with '%.0f' (never %d, which goes through a C int), and sent back as text
-- (cjson writes numbers with 14 significant digits).
--
-- A state (an agent's, or its fleet's: the agent '' of its user, types.ts FLEET) is five
-- keys named from its base <prefix>{p<n>}:hs:<32 hex of (user, agent)>:
--   :s  hash: loaded ('1' once installed by load.lua), total, calls (the 24 h window's),
--       pause (absent while running without override, else 'paused override since reason',
--       parse_pause), pv and policy (the config's version and JSON, absent: the default
--       policy; TypeScript resolves the meters from it), shown (the config as the audit log
--       shows it), al:<meter id> (its alert bits, policy.ts alerts), ign (the ignoring-pause
--       counts, 'since calls nano flagged', absent: none), held (the sum of the open holds,
--       absent: none), version (the counter that orders its transitions and alerts)
--   :w  hash of minute buckets: c<minute> = cost, n<minute> = llm calls, and h<hour> = the
--       cost of the buckets of each UTC hour (the projection's)
--   :m  list of the bucket minutes, oldest first (RPUSH new, LPOP expired: amortised O(1))
--   :hz, :h  its open budget holds (below)
local MINUTE_MS = 60000
local WINDOW = 1440 -- minutes (src/window.ts)
local NOW, TTL = A.now, A.ttl
local NOW_MINUTE = math.floor(NOW / MINUTE_MS)

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

local function hour_of(minute)
  return math.floor(tonumber(minute) / 60)
end

local function parse_pause(v)
  if not v then return { paused = false, reason = '', override = false, since = 0 } end
  local paused, override, since, reason = string.match(v, '^(%d) (%d) (%d+) (.*)$')
  return { paused = paused == '1', reason = reason, override = override == '1', since = tonumber(since) }
end

local function pause_text(p)
  if not p.paused and not p.override then return false end
  return (p.paused and '1' or '0') .. ' ' .. (p.override and '1' or '0') .. ' ' .. fmt(p.since) .. ' ' .. p.reason
end

local NO_IGNORED = { since = 0, calls = 0, nano = 0, flagged = false }

local function parse_ignored(v)
  if not v then return NO_IGNORED end
  local since, calls, nano, flagged = string.match(v, '^(%d+) (%d+) (%d+) (%d)$')
  return { since = tonumber(since), calls = tonumber(calls), nano = tonumber(nano), flagged = flagged == '1' }
end

local function ignored_text(g)
  if g.since == 0 then return false end
  return fmt(g.since) .. ' ' .. fmt(g.calls) .. ' ' .. fmt(g.nano) .. ' ' .. (g.flagged and '1' or '0')
end

-- A state as the rules read it, with its keys and the JSON members of its rows (`members`:
-- '"user_id":…,"agent_id":…'); nil when it is not loaded (the caller answers NEEDS_LOAD,
-- and nothing was written). `meters` names the alert fields to read.
local function read_state(key, meters, members)
  local fields = { 'loaded', 'total', 'calls', 'pause', 'pv', 'held', 'ign' }
  for _, m in ipairs(meters) do fields[#fields + 1] = 'al:' .. m.id end
  local v = redis.call('HMGET', key, unpack(fields))
  if v[1] ~= '1' then return nil end
  local base = string.sub(key, 1, -3)
  local st = {
    s = key, w = base .. ':w', m = base .. ':m', hz = base .. ':hz', h = base .. ':h', members = members,
    total = tonumber(v[2] or '0'), calls = tonumber(v[3] or '0'),
    pause = parse_pause(v[4]), pause_read = v[4] or false,
    pv = tonumber(v[5] or '0'), held = tonumber(v[6] or '0'), holds = v[6] ~= false,
    ign = parse_ignored(v[7]), ign_read = v[7] or false,
    alerted = {}, alerted_read = {}, dirty = false,
  }
  for i, m in ipairs(meters) do
    st.alerted[m.id] = tonumber(v[7 + i] or '0')
    st.alerted_read[m.id] = st.alerted[m.id]
  end
  return st
end

-- Writes back what changed of a state: its window's totals, its pause, ignoring-pause
-- counts and alert bits. A running state never gets a pause field (Redis memory per agent).
local function save_state(st)
  if st.dirty then redis.call('HSET', st.s, 'total', fmt(st.total), 'calls', fmt(st.calls)) end
  local p = pause_text(st.pause)
  if p ~= st.pause_read then
    if p then redis.call('HSET', st.s, 'pause', p) else redis.call('HDEL', st.s, 'pause') end
  end
  local g = ignored_text(st.ign)
  if g ~= st.ign_read then
    if g then redis.call('HSET', st.s, 'ign', g) else redis.call('HDEL', st.s, 'ign') end
  end
  for id, bits in pairs(st.alerted) do
    if bits ~= st.alerted_read[id] then
      if bits == 0 then redis.call('HDEL', st.s, 'al:' .. id) else redis.call('HSET', st.s, 'al:' .. id, bits) end
    end
  end
end

-- RollingWindow.expire(): drop buckets that left the window from the head, each once.
local function move_on(st)
  while true do
    local head = redis.call('LINDEX', st.m, 0)
    if not head or in_window(tonumber(head), NOW_MINUTE) then return end
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
-- folds into the newest one, which expires later, never earlier. cost, calls: numbers.
local function add(st, minute, cost, calls)
  local tail = redis.call('LINDEX', st.m, -1)
  local bucket = minute
  if tail and tonumber(tail) >= minute then
    bucket = tonumber(tail)
  else
    redis.call('RPUSH', st.m, minute)
    -- pushed: by the event at hand (record.lua resets it); touched: by any event of the call.
    st.pushed, st.touched = true, true
  end
  if cost ~= 0 then
    redis.call('HINCRBY', st.w, 'c' .. bucket, fmt(cost))
    redis.call('HINCRBY', st.w, 'h' .. hour_of(bucket), fmt(cost))
  end
  if calls ~= 0 then redis.call('HINCRBY', st.w, 'n' .. bucket, calls) end
  st.total = st.total + cost
  st.calls = st.calls + calls
  st.dirty = true
end

-- RollingWindow.spentSince(): what the buckets of minute `from` and later hold; a window
-- that reaches back to the day's start is the whole total (nothing read), a shorter one
-- reads at most as many buckets as it has minutes.
local function spent_since(st, from)
  if from <= NOW_MINUTE - WINDOW + 1 then return st.total end
  local tail = redis.call('LRANGE', st.m, -(NOW_MINUTE - from + 1), -1)
  local fields = {}
  for i = #tail, 1, -1 do
    if tonumber(tail[i]) < from then break end
    fields[#fields + 1] = 'c' .. tail[i]
  end
  local sum = 0
  if #fields > 0 then
    for _, c in ipairs(redis.call('HMGET', st.w, unpack(fields))) do sum = sum + tonumber(c or '0') end
  end
  return sum
end

-- The state as the rules judge it for `meters` (policy.ts Judged): st.spent per meter.
local function judge(st, meters)
  st.spent = {}
  for i, m in ipairs(meters) do st.spent[i] = spent_since(st, m.from) end
  return st
end

-- What the projection reads (projection.ts Spend): the cost of the last 60 minutes, and
-- {hour, cost, hour, cost, …} oldest first, as text. At most 60 buckets and 25 hours.
local function spend(st)
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
  return { last_hour = fmt(spent_since(st, NOW_MINUTE - 59)), hours = hours }
end

-- Budget holds. A state's open holds are `held` in its :s (their sum, nano-USD; absent: it
-- has none) and two keys of its own: :hz, a ZSET of hold ids scored by their expiry (ms),
-- and :h, a HASH of <hold id> = its entry (hold_entry). The agent's and its fleet's entries
-- are alike: the fleet's names the agent, whose keys release.lua finds from it. Both keys
-- expire a minute after their last hold; load.lua drops them with the state they belong to.
-- A state without holds costs an event nothing: `held` comes with read_state's HMGET, and
-- only a state that has the field reads its keys.

-- A hold's :h entry: 'amount key_id agent_id' (key_id: the agent's name in key names).
local function hold_entry(amount, key_id, agent)
  return fmt(amount) .. ' ' .. key_id .. ' ' .. agent
end

-- The one parser of hold_entry(): amount (a number), key id, agent id.
local function parse_hold(v)
  local amount, key_id, agent = string.match(v, '^(%d+) (%x+) (.*)$')
  return tonumber(amount), key_id, agent
end

-- Writes st.held back: the field goes once no hold is left.
local function save_held(st)
  if redis.call('ZCARD', st.hz) == 0 then
    st.held, st.holds = 0, false
    redis.call('HDEL', st.s, 'held')
  else
    redis.call('HSET', st.s, 'held', fmt(st.held))
  end
end

-- Drops the state's expired holds from the head (at most 256 a call: more wait for the
-- next, counted until then), and finds none left once the keys are gone.
local function expire_holds(st)
  if not st.holds then return end
  local gone = redis.call('ZRANGEBYSCORE', st.hz, '-inf', NOW, 'LIMIT', 0, 256)
  if #gone > 0 then
    for _, v in ipairs(redis.call('HMGET', st.h, unpack(gone))) do
      if v then st.held = st.held - parse_hold(v) end
    end
    redis.call('ZREM', st.hz, unpack(gone))
    redis.call('HDEL', st.h, unpack(gone))
    save_held(st)
  elseif redis.call('EXISTS', st.hz) == 0 then
    -- Its keys expired with it unread: nothing is held (save_held drops the field).
    save_held(st)
  end
  -- Otherwise nothing changed: no write (the fleet's holds are read by every event of the user).
end

-- The state's open hold `id` (expire_holds first: an expired one is gone): its entry, or nil.
local function open_hold(st, id)
  if not st.holds then return nil end
  return redis.call('HGET', st.h, id) or nil
end

-- Adds a hold of `amount` expiring at `expires` (ms) to the state.
local function put_hold(st, id, amount, expires, entry)
  st.held, st.holds = st.held + amount, true
  redis.call('HSET', st.s, 'held', fmt(st.held))
  redis.call('ZADD', st.hz, expires, id)
  redis.call('HSET', st.h, id, entry)
  local ttl = expires - NOW + MINUTE_MS
  if redis.call('PTTL', st.hz) < ttl then
    redis.call('PEXPIRE', st.hz, ttl)
    redis.call('PEXPIRE', st.h, ttl)
  end
end

-- Removes the hold `id` from the state; returns its entry, or nil when it holds none.
local function take_hold(st, id)
  local v = open_hold(st, id)
  if not v then return nil end
  redis.call('ZREM', st.hz, id)
  redis.call('HDEL', st.h, id)
  st.held = st.held - parse_hold(v)
  save_held(st)
  return v
end

-- The journal. A script that may append checks first, before it changes anything: 'FENCED'
-- when another instance took this one's journal over (it rejoins under a new id and calls
-- again), 'FULL' at the bound (bounded writes only; reads append the rare relaxing
-- transition past it). nil when it may go on.
local function journal_closed(bounded)
  if redis.call('SISMEMBER', K.fenced, A.instance) == 1 then return 'FENCED' end
  if bounded and redis.call('XLEN', K.journal) >= A.stream_rows then return 'FULL' end
  return nil
end

-- One row for a table, as the JSON the shipper sends to ClickHouse (journal/redis-streams.ts).
local function journal(table_name, json)
  redis.call('XADD', K.journal, '*', 't', table_name, 'a', fmt(NOW), 'j', json)
end

-- The state's next version: grows per state whatever the callers' clocks do.
local function next_version(st)
  local version = math.max(NOW * 1000, tonumber(redis.call('HGET', st.s, 'version') or '0') + 1)
  redis.call('HSET', st.s, 'version', fmt(version))
  return version
end

-- Journals a change of pause state (rules.lua) as its pause_transitions row, at the
-- window's total `total`, and returns it for the reply: {scope, reason, paused, override,
-- total, held, version, meter (0-based, -1: none), spent (the meter's, for a pause by it)}.
-- `actor`: the key id of the request, or 'system' (the rules).
local function transition(st, scope, change, total, actor)
  local version = next_version(st)
  local p = change.pause
  journal('pause_transitions', '{' .. st.members .. ',"at":"' .. A.at .. '","version":' .. fmt(version) ..
    ',"is_paused":' .. (p.paused and 'true' or 'false') .. ',"reason":"' .. change.reason .. '","override":' .. (p.override and 'true' or 'false') ..
    ',"total_nano":' .. fmt(total) .. ',"actor":' .. cjson.encode(actor or 'system') .. '}')
  local t = { scope = scope, reason = change.reason, paused = p.paused, override = p.override, total = fmt(total), held = fmt(st.held),
    version = fmt(version), meter = change.meter }
  if change.meter >= 0 then t.spent = fmt(st.spent[change.meter + 1]) end
  return t
end

-- Journals an alert level crossed (its budget_alerts row) and returns it for the reply.
local function alert(st, scope, meters, fired)
  local version = next_version(st)
  local m = meters[fired.meter + 1]
  local spent = st.spent[fired.meter + 1]
  journal('budget_alerts', '{' .. st.members .. ',"at":"' .. A.at .. '","version":' .. fmt(version) ..
    ',"level":' .. cjson.encode(m.alert_at[fired.level + 1]) .. ',"total_nano":' .. fmt(spent) .. ',"threshold_nano":' .. fmt(m.limit) .. '}')
  return { scope = scope, meter = fired.meter, level = fired.level, spent = fmt(spent), version = fmt(version) }
end

-- Event ids: at most 64 bytes each. An id is kept as a 12-byte fingerprint (hex) of (user,
-- agent, event id), computed by the caller, in its partition's table for the UTC hour of the
-- minute it was counted in: {p}:e:<hour>:<i>, a linear hash of small hashes, each held by
-- Redis in its compact listpack encoding (under 128 fields: a bucket splits when the table
-- averages SPLIT_AT ids per bucket). {p}:e (K.ids) holds b<hour> (buckets) and n<hour> (ids)
-- per table. A table's keys expire when its last minute has left the window, all at once;
-- until then an entry whose own minute has left it is not found, so the window's edge is
-- exact to the minute. Bucket keys are named from K.ids in the script: they carry its hash
-- tag, so they are in the script's slot.
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

local function id_bucket(hour, i)
  return K.ids .. ':' .. hour .. ':' .. i
end

-- The partition's tables still in the window: {[hour] = {b = buckets, n = ids}}; the meta of
-- those that left it is dropped (their buckets expire on their own).
local function id_tables()
  local flat = redis.call('HGETALL', K.ids)
  local t = {}
  for i = 1, #flat, 2 do
    local hour = tonumber(string.sub(flat[i], 2))
    t[hour] = t[hour] or { b = 1, n = 0 }
    t[hour][string.sub(flat[i], 1, 1)] = tonumber(flat[i + 1])
  end
  for hour in pairs(t) do
    if not in_window(hour * 60 + 59, NOW_MINUTE) then
      redis.call('HDEL', K.ids, 'b' .. hour, 'n' .. hour)
      t[hour] = nil
    end
  end
  return t
end

-- The cost the id was counted with (text), while its minute is in the window; nil otherwise.
local function seen_cost(tables, fp)
  local h = h32(fp)
  for hour, tb in pairs(tables) do
    local v = redis.call('HGET', id_bucket(hour, bucket_of(h, tb.b)), fp)
    if v then
      local sep = string.find(v, ':', 1, true)
      if in_window(hour * 60 + tonumber(string.sub(v, sep + 1)), NOW_MINUTE) then return string.sub(v, 1, sep - 1) end
    end
  end
  return nil
end

-- Remembers an id (the caller looked it up first) as counted at `cost` (text) in `minute`.
local function remember(tables, fp, cost, minute)
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
    local from, to = id_bucket(hour, tb.b - size), id_bucket(hour, tb.b)
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
  local key = id_bucket(hour, bucket_of(h32(fp), tb.b))
  if redis.call('HSETNX', key, fp, cost .. ':' .. (minute - hour * 60)) == 0 then return end
  tb.n = tb.n + 1
  redis.call('HSET', K.ids, 'b' .. hour, tb.b, 'n' .. hour, tb.n)
  redis.call('PEXPIRE', key, ttl)
  if redis.call('PTTL', K.ids) < ttl then redis.call('PEXPIRE', K.ids, ttl) end
end

-- Writes refresh a state's TTL, so an idle agent expires on its own and is loaded again from
-- ClickHouse on demand. An event refreshes it only when it starts a minute bucket
-- (st.touched): the keys then live at least 24 h 59 min after the agent's last event, longer
-- than the window, and a busy agent pays for it once a minute instead of on every event.
local function touch(st)
  redis.call('PEXPIRE', st.s, TTL)
  redis.call('PEXPIRE', st.w, TTL)
  redis.call('PEXPIRE', st.m, TTL)
end

-- A control answer: what the caller must do before the script can act (redis.ts), sent
-- before anything changed. Written by hand so that it always starts with {"control": the
-- caller tells it from a result without decoding it. `detail` names the states concerned:
-- {keys = {…}} to load (NEEDS_LOAD), {stale = {{key, pv, policy}, …}} (STALE).
local function control(name, detail)
  return '{"control":"' .. name .. '","detail":' .. cjson.encode(detail or {}) .. '}'
end

-- A STALE control answer when a state's policy version is not the one the caller resolved
-- its meters from (each argument: {state, pv expected}): the caller learns the stored
-- policies ({key, pv, policy (JSON, or absent: the default)}) and calls again. nil when
-- every state's is.
local function stale(...)
  local out = {}
  for _, x in ipairs({ ... }) do
    if x[1].pv ~= x[2] then out[#out + 1] = { key = x[1].s, pv = fmt(x[1].pv), policy = redis.call('HGET', x[1].s, 'policy') or nil } end
  end
  if #out > 0 then return control('STALE', { stale = out }) end
  return nil
end
