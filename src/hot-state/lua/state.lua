-- What every hot-state script shares: how a state is kept in Redis, read and written, its
-- window, its budget holds, the event ids, and the journal. scripts.ts loads this file,
-- rules.lua and the scripts as one Redis function library: what the library defines at its
-- top level is made once, when it is loaded, and each script is a function of it, which
-- begins by naming its call's keys and arguments (begin()). Every key carries the hash tag
-- of the user's partition {p<n>} (storage/redis-keys.ts): one Redis Cluster slot per call.
-- Money is integer nano-USD: exact in Lua doubles up to 2^53, written as text with '%d' (a
-- 64-bit integer in Redis's Lua), and sent back as text (cjson writes numbers with 14
-- significant digits).
--
-- A state (an agent's, or its fleet's: the agent '' of its user, types.ts FLEET) is four
-- keys named from its base <prefix>{p<n>}:hs:<32 hex of (user, agent)>:
--   :s  hash: n, everything an event reads and writes of it, packed (pack_state(); present
--       once installed by load.lua); policy (the config's JSON, absent: the default policy,
--       whose meters TypeScript resolves); shown (the config as the audit log shows it);
--       version (the counter that orders its transitions and alerts)
--   :w  hash of the buckets before the newest: c<minute> = cost, n<minute> = llm calls
--       (absent: none), and h<hour> = the cost of those buckets of each UTC hour (the
--       projection's)
--   :hz, :h  its open budget holds (below)
--   :d  hash of <hour> = the cost of that UTC hour's buckets before the newest, kept only
--       for a state with a rolling window of days among its period budgets (period_spent())
-- An event costs its state one HGET and one HSET of :s; a bucket is written to :w once,
-- when a newer minute starts, and read and dropped once, when it leaves a window. Numbers
-- passed to redis.call as numbers are written exactly up to 2^53 (Redis prints them in full).
local MINUTE_MS = 60000
local HOUR_MS = 3600000
local WINDOW = 1440 -- minutes (src/rolling-day.ts)
-- The tally the projection reads: the last 60 minutes (projection.ts LAST_HOUR_MINUTES).
local LAST_HOUR = 60

-- The call at hand. Redis runs a library's functions one at a time, and each starts with
-- begin(), which sets every value below afresh, so nothing of one call is left to the
-- next: K, the call's keys by name; A, its arguments (ARGV[1], JSON) by name (ARGV[2..]
-- are the script's own); NOW (ms, and as text) and TTL (ms) from A; NOW_MINUTE; DAY_FROM, the first
-- minute of the window of 24 h that ends now (rolling-day.ts inWindow); and what charge() and
-- windows_of() gather during the call.
local K, A, NOW, NOW_TEXT, TTL, NOW_MINUTE, DAY_FROM
local budgets, windows

local function begin(keys, argv)
  K, A = keys, cjson.decode(argv[1])
  NOW, TTL = A.now, A.ttl
  NOW_TEXT = string.format('%d', NOW)
  NOW_MINUTE = math.floor(NOW / MINUTE_MS)
  DAY_FROM = NOW_MINUTE - WINDOW + 1
  budgets, windows = {}, {}
end

local function fmt(x)
  return string.format('%d', x)
end

local function hour_of(minute)
  return math.floor(minute / 60)
end

-- A running state's pause and ignoring-pause counts, shared: the rules replace a state's,
-- never change them.
local NOT_PAUSED = { paused = false, reason = '', override = false, since = 0 }
local NO_IGNORED = { since = 0, calls = 0, nano = 0, flagged = false }

-- The windows shorter than a day a state keeps a tally of for `meters`, each once, by its
-- length in minutes, and the minute it starts at now (the meter's `from`): the last hour's
-- and each such meter's.
local function tallies_of(meters)
  local windows, seen = { { minutes = LAST_HOUR, from = NOW_MINUTE - LAST_HOUR + 1 } }, { [LAST_HOUR] = true }
  for _, m in ipairs(meters) do
    if not m.tally and m.from > DAY_FROM and not seen[m.minutes] then
      seen[m.minutes] = true
      windows[#windows + 1] = { minutes = m.minutes, from = m.from }
    end
  end
  return windows
end

-- The buckets of the minutes from `first` to `last` that exist: {minute = {cost, calls}},
-- the newest (in :s) with those of :w. A long span of an idle state reads the whole hash
-- instead, which holds at most a day.
local function buckets_between(st, first, last)
  local found = {}
  if last < first then return found end
  if st.cm >= first and st.cm <= last then found[st.cm] = { st.cc, st.cn } end
  if (last - first + 1) * 2 > redis.call('HLEN', st.w) then
    local flat = redis.call('HGETALL', st.w)
    for i = 1, #flat, 2 do
      local kind, minute = string.sub(flat[i], 1, 1), tonumber(string.sub(flat[i], 2))
      if kind ~= 'h' and minute >= first and minute <= last then
        found[minute] = found[minute] or { 0, 0 }
        found[minute][kind == 'c' and 1 or 2] = tonumber(flat[i + 1])
      end
    end
    return found
  end
  local names = {}
  for minute = first, last do
    names[#names + 1] = 'c' .. minute
    names[#names + 1] = 'n' .. minute
  end
  local values = redis.call('HMGET', st.w, unpack(names))
  for k = 1, #names, 2 do
    if values[k] or values[k + 1] then found[first + (k - 1) / 2] = { tonumber(values[k] or '0'), tonumber(values[k + 1] or '0') } end
  end
  return found
end

-- A tally moved on to its window's start `from`: what left it is taken off (each bucket read
-- once, as it leaves), or it is summed from the buckets when it is new or the clock went
-- back (another instance's ran ahead, or a test's steps back).
local function move_tally(st, minutes, from)
  local t = st.tallies[minutes]
  if t and t.from == from then return end
  if t and t.from > from then t = nil end
  if t and st.cm < from then
    st.tallies[minutes] = { from = from, spent = 0 }
  else
    local first, spent = from, 0
    if t then first, spent = t.from, t.spent end
    local leaving = t and buckets_between(st, first, from - 1) or buckets_between(st, from, st.cm)
    for _, b in pairs(leaving) do
      if t then spent = spent - b[1] else spent = spent + b[1] end
    end
    st.tallies[minutes] = { from = from, spent = spent }
  end
end

-- The day's window moved on: the buckets that left it are taken off its totals and dropped,
-- with their hours' share (an hour whose every minute left goes whole). The newest bucket
-- leaves only with all the others.
local function move_day(st)
  if st.from >= DAY_FROM then return end
  if st.cm < DAY_FROM then
    -- The newest bucket's cost goes to :d before it goes (add() writes it there only when a
    -- newer bucket starts): the rolling windows of days still hold it.
    if st.windows.rolling and st.cc ~= 0 then redis.call('HINCRBY', st.d, hour_of(st.cm), st.cc) end
    if st.total ~= 0 or st.calls ~= 0 or redis.call('EXISTS', st.w) == 1 then redis.call('DEL', st.w) end
    st.total, st.calls, st.cm, st.cc, st.cn = 0, 0, 0, 0, 0
  else
    local names, hours = {}, {}
    for minute, b in pairs(buckets_between(st, st.from, DAY_FROM - 1)) do
      st.total, st.calls = st.total - b[1], st.calls - b[2]
      names[#names + 1] = 'c' .. minute
      names[#names + 1] = 'n' .. minute
      local h = hour_of(minute)
      hours[h] = (hours[h] or 0) + b[1]
    end
    if #names > 0 then redis.call('HDEL', st.w, unpack(names)) end
    for h, cost in pairs(hours) do
      if h * 60 + 59 < DAY_FROM then
        redis.call('HDEL', st.w, 'h' .. h)
      elseif cost ~= 0 then
        redis.call('HINCRBY', st.w, 'h' .. h, -cost)
      end
    end
  end
  st.from = DAY_FROM
end

-- A state's field `n`, packed (struct): thirteen doubles, from (the first minute of its
-- window of 24 h), total and calls (what that window holds), cm, cc and cn (its newest
-- bucket: minute, cost, llm calls, which events add to until a newer minute starts), pv (its
-- policy's version), held (the sum of its open holds), flags (1: paused, 2: a manual
-- override, 4: its ignoring-pause flag raised, 8: it has open holds), since (its pause's), and
-- its ignoring-pause counts since, calls and nano; two bytes, M (its policy's meters) and T
-- (its tallies); M doubles, each meter's alert bits (policy.ts alerts) in its policy's order;
-- T triples of doubles, a tally of a window shorter than a day (its length in minutes, the
-- minute it starts at, what it holds), kept for the projection's last hour and each meter's;
-- and its pause's reason ('' while running). One field read and written whole: an HGET of it
-- costs Redis half of an HMGET of the fields it replaces, most of them absent (each absent one
-- a scan of the hash), and unpacking it less than parsing them from text.
local FIXED = 13
local formats = {}

local function format_of(meters, tallies)
  local key = meters * 256 + tallies
  local f = formats[key]
  if not f then
    f = '<' .. string.rep('d', FIXED) .. 'BB' .. string.rep('d', meters + 3 * tallies) .. 's'
    formats[key] = f
  end
  return f
end

local function pack_state(st)
  local p, g, alerted = st.pause, st.ign, st.alerted
  local running = not p.paused and not p.override
  local flags = (p.paused and 1 or 0) + (p.override and 2 or 0) + (g.flagged and 4 or 0) + (st.holds and 8 or 0)
  local m = #alerted
  local v = { st.from, st.total, st.calls, st.cm, st.cc, st.cn, st.pv, st.held, flags, running and 0 or p.since, g.since, g.calls, g.nano, m, 0 }
  for i = 1, m do v[FIXED + 2 + i] = alerted[i] end
  local t, k = 0, FIXED + 3 + m
  for minutes, tally in pairs(st.tallies) do
    v[k], v[k + 1], v[k + 2] = minutes, tally.from, tally.spent
    t, k = t + 1, k + 3
  end
  v[FIXED + 2], v[k] = t, running and '' or p.reason
  return struct.pack(format_of(m, t), unpack(v))
end

-- A state, with its key and the ids of its user and agent ('' for a fleet; absent where no
-- row is journaled); nil when it is not loaded (the caller answers NEEDS_LOAD). `raw` is its
-- field `n` as read: save_state() writes it back only when it changed. Nothing is written
-- here: move_on() moves its windows on to now, once the caller goes on.
local function read_state(key, user, agent)
  local raw = redis.call('HGET', key, 'n')
  if not raw then return nil end
  local m, t = struct.unpack('<BB', raw, FIXED * 8 + 1)
  local x = { struct.unpack(format_of(m, t), raw) }
  local flags = x[9]
  local st = {
    s = key, w = string.sub(key, 1, -3) .. ':w', d = string.sub(key, 1, -3) .. ':d', user = user, agent = agent, raw = raw,
    from = x[1], total = x[2], calls = x[3], cm = x[4], cc = x[5], cn = x[6], pv = x[7], held = x[8],
    holds = bit.band(flags, 8) ~= 0, pause = NOT_PAUSED, ign = NO_IGNORED, alerted = {}, tallies = {},
  }
  if bit.band(flags, 3) ~= 0 then
    st.pause = { paused = bit.band(flags, 1) ~= 0, override = bit.band(flags, 2) ~= 0, since = x[10], reason = x[FIXED + 3 + m + 3 * t] }
  end
  if x[11] ~= 0 then st.ign = { since = x[11], calls = x[12], nano = x[13], flagged = bit.band(flags, 4) ~= 0 } end
  for i = 1, m do st.alerted[i] = x[FIXED + 2 + i] end
  for i = FIXED + 3 + m, FIXED + 2 + m + 3 * t, 3 do st.tallies[x[i]] = { from = x[i + 1], spent = x[i + 2] } end
  return st
end

-- Writes a state's field `n` back when it is not what was read.
local function save_state(st)
  local v = pack_state(st)
  if v == st.raw then return end
  redis.call('HSET', st.s, 'n', v)
  st.raw = v
end

-- The windows a state with `meters` keeps a tally of (tallies_of()), once per list and call,
-- and whether it has period budgets (w.periods), a rolling window of days among them (w.rolling).
local function windows_of(meters)
  local w = windows[meters]
  if not w then
    w = tallies_of(meters)
    for _, m in ipairs(meters) do
      if m.tally then w.periods = true end
      if m.rolling then w.rolling = true end
    end
    windows[meters] = w
  end
  return w
end

-- A state's windows moved on to now (RollingWindow.expire): the tallies first, which read
-- buckets the day's window may drop. The caller saves the state (save_state) afterwards.
local function move_on(st)
  for _, w in ipairs(st.windows) do move_tally(st, w.minutes, w.from) end
  move_day(st)
end

-- What a state's window starting at `from` holds (the day's: its total; a shorter one: its
-- tally, by its length in minutes).
local function spent_of(st, minutes, from)
  if from <= DAY_FROM then return st.total end
  return st.tallies[minutes].spent
end

-- Period budgets (meters.ts, a meter with `tally`: its period's code, the key of its tally,
-- and `rolling` for a window of days). A state keeps, per period, a tally {from, spent}: what
-- was spent from its period's first minute on, which every event adds to (add()). A rolling
-- window also keeps the cost of each UTC hour it holds, in :d, written with the buckets
-- (add()), so that what leaves it is taken off an hour at a time.

-- The cost :d holds of the hours in [first, last], with the newest bucket's, not in :d yet.
local function hours_cost(st, first, last)
  local sum = 0
  if last < first then return 0 end
  if last - first > 64 then
    local flat = redis.call('HGETALL', st.d)
    for i = 1, #flat, 2 do
      local h = tonumber(flat[i])
      if h >= first and h <= last then sum = sum + tonumber(flat[i + 1]) end
    end
  else
    local names = {}
    for h = first, last do names[#names + 1] = h end
    for _, v in ipairs(redis.call('HMGET', st.d, unpack(names))) do
      if v then sum = sum + tonumber(v) end
    end
  end
  local newest = hour_of(st.cm)
  if newest >= first and newest <= last then sum = sum + st.cc end
  return sum
end

-- Drops the hours of :d before `hour`, from `oldest` on (the oldest it may hold).
local function drop_hours(st, oldest, hour)
  if hour <= oldest then return end
  if hour - oldest > 64 then
    local flat, names = redis.call('HKEYS', st.d), {}
    for _, h in ipairs(flat) do
      if tonumber(h) < hour then names[#names + 1] = h end
    end
    if #names > 0 then redis.call('HDEL', st.d, unpack(names)) end
  else
    local names = {}
    for h = oldest, hour - 1 do names[#names + 1] = h end
    redis.call('HDEL', st.d, unpack(names))
  end
end

-- A period's tally begun from what the state holds: its buckets from `from` on (the stored
-- spend before `cut`, `history`, when a config or a load gives it: set_policy.lua).
local function begin_period(st, m)
  local spent = 0
  if m.rolling then
    spent = hours_cost(st, hour_of(m.from), math.max(hour_of(NOW_MINUTE), hour_of(st.cm)))
  else
    for _, b in pairs(buckets_between(st, m.from, st.cm)) do spent = spent + b[1] end
  end
  st.tallies[m.tally] = { from = m.from, spent = spent }
  return st.tallies[m.tally]
end

-- What a period holds at NOW, its tally moved on first. A calendar period that begins anew is
-- summed from the buckets: every event since it began came after its tally last moved (each
-- event moves it: record.lua judges before it adds), so within the day's window. A rolling
-- window takes off the hours that left it. A period never moves back (another instance's
-- clock behind this one's): it keeps what it holds.
local function period_spent(st, m)
  local t = st.tallies[m.tally] or begin_period(st, m)
  if t.from < m.from then
    if m.rolling then
      t.spent = t.spent - hours_cost(st, hour_of(t.from), hour_of(m.from) - 1)
    else
      local spent = 0
      for _, b in pairs(buckets_between(st, m.from, st.cm)) do spent = spent + b[1] end
      t.spent = spent
    end
    t.from = m.from
  end
  return t.spent
end

-- The state as the rules judge it for `meters` (policy.ts Judged): st.spent per meter. The
-- hours no rolling window holds any more leave :d.
local function judge(st, meters)
  local spent = st.spent or {}
  local oldest, newest = nil, nil
  for i, m in ipairs(meters) do
    if m.tally then
      if m.rolling then
        local t = st.tallies[m.tally]
        if t and (not oldest or t.from < oldest) then oldest = t.from end
        if not newest or m.from < newest then newest = m.from end
      end
      spent[i] = period_spent(st, m)
    else
      spent[i] = spent_of(st, m.minutes, m.from)
    end
  end
  if oldest and newest > oldest then drop_hours(st, hour_of(oldest), hour_of(newest)) end
  st.spent = spent
  return st
end

-- What each period budget's period of a judged state holds, as text in its meters' order; nil
-- when it has none.
local function period_answer(st)
  local out = nil
  for i, m in ipairs(st.meters) do
    if m.tally then
      out = out or {}
      out[#out + 1] = fmt(st.spent[i])
    end
  end
  return out
end

-- RollingWindow.add(): a minute older than the newest bucket (a rebuild, a clock step back)
-- folds into the newest one, which leaves later, never earlier. cost, calls: numbers. A
-- newer minute writes the newest bucket to :w and starts a new one.
local function add(st, minute, cost, calls)
  -- An event is never older than the window (it is stamped on arrival): one that would be
  -- counts from the window's first minute.
  local bucket = math.max(minute, st.from)
  if st.cm >= bucket then
    bucket = st.cm
  else
    if st.cm > 0 and (st.cc ~= 0 or st.cn ~= 0) then
      if st.cn ~= 0 then redis.call('HSET', st.w, 'c' .. st.cm, st.cc, 'n' .. st.cm, st.cn) else redis.call('HSET', st.w, 'c' .. st.cm, st.cc) end
      if st.cc ~= 0 then redis.call('HINCRBY', st.w, 'h' .. hour_of(st.cm), st.cc) end
      if st.cc ~= 0 and st.windows.rolling then redis.call('HINCRBY', st.d, hour_of(st.cm), st.cc) end
    end
    st.cm, st.cc, st.cn = bucket, 0, 0
    -- pushed: by the event at hand (record.lua resets it); touched: by any event of the call.
    st.pushed, st.touched = true, true
  end
  if cost ~= 0 then
    for _, t in pairs(st.tallies) do
      if bucket >= t.from then t.spent = t.spent + cost end
    end
  end
  st.cc, st.cn = st.cc + cost, st.cn + calls
  st.total = st.total + cost
  st.calls = st.calls + calls
end

-- When spending `last` an hour from now on has spent `to_go` more (epoch ms).
local function reached_at(to_go, last)
  return NOW + (to_go * HOUR_MS) / last
end

-- projection.ts exhaustionAt(), branch for branch, for a state's daily budget `threshold`:
-- epoch ms (text), or nil. The hours are read only when the answer depends on them.
local function exhaustion(st, threshold)
  if st.total >= threshold then return fmt(NOW) end
  local last = spent_of(st, LAST_HOUR, NOW_MINUTE - LAST_HOUR + 1)
  if last <= 0 then return nil end
  local horizon = NOW + WINDOW * MINUTE_MS
  if reached_at(threshold - st.total, last) >= horizon then return nil end
  local names = {}
  for h = hour_of(st.from), hour_of(st.cm) do names[#names + 1] = 'h' .. h end
  local costs = redis.call('HMGET', st.w, unpack(names))
  -- The newest bucket is not in its hour's sum yet (add()).
  costs[#names] = tonumber(costs[#names] or 0) + st.cc
  local left = 0
  for i, name in ipairs(names) do
    if costs[i] then
      local hour = tonumber(string.sub(name, 2))
      local leaves = (hour * 60 + 59 + WINDOW) * MINUTE_MS
      if leaves > NOW then
        local reached = reached_at(threshold - st.total + left, last)
        if reached < leaves then
          if reached < horizon then return fmt(math.ceil(reached)) end
          return nil
        end
        left = left + tonumber(costs[i])
      end
    end
  end
  local reached = reached_at(threshold - st.total + left, last)
  if reached < horizon then return fmt(math.ceil(reached)) end
  return nil
end

-- Budget holds. A state's open holds are its `held` (their sum, nano-USD) and flag 8
-- (pack_state()), and two keys of its own: :hz, a ZSET of hold ids scored by their expiry (ms),
-- and :h, a HASH of <hold id> = its entry (hold_entry). The agent's and its fleet's entries
-- are alike: the fleet's names the agent, whose keys release.lua finds from it. Both keys
-- expire a minute after their last hold; load.lua drops them with the state they belong to.
-- A state without holds costs an event nothing: only a state with the flag reads its keys.
-- What changes below is the state's; the caller saves it (save_state()).

-- A hold's :h entry: 'amount key_id agent_id' (key_id: the agent's name in key names).
local function hold_entry(amount, key_id, agent)
  return fmt(amount) .. ' ' .. key_id .. ' ' .. agent
end

-- The one parser of hold_entry(): amount (a number), key id, agent id.
local function parse_hold(v)
  local amount, key_id, agent = string.match(v, '^(%d+) (%x+) (.*)$')
  return tonumber(amount), key_id, agent
end

-- The keys of a state's holds.
local function hold_keys(st)
  if not st.hz then
    local base = string.sub(st.s, 1, -3)
    st.hz, st.h = base .. ':hz', base .. ':h'
  end
  return st.hz, st.h
end

-- A state with no hold left has none: its sum and flag go.
local function settle_held(st)
  hold_keys(st)
  if redis.call('ZCARD', st.hz) == 0 then st.held, st.holds = 0, false end
end

-- Drops the state's expired holds from the head (at most 256 a call: more wait for the
-- next, counted until then), and finds none left once the keys are gone.
local function expire_holds(st)
  if not st.holds then return end
  hold_keys(st)
  local gone = redis.call('ZRANGEBYSCORE', st.hz, '-inf', NOW, 'LIMIT', 0, 256)
  if #gone > 0 then
    for _, v in ipairs(redis.call('HMGET', st.h, unpack(gone))) do
      if v then st.held = st.held - parse_hold(v) end
    end
    redis.call('ZREM', st.hz, unpack(gone))
    redis.call('HDEL', st.h, unpack(gone))
    settle_held(st)
  elseif redis.call('EXISTS', st.hz) == 0 then
    -- Its keys expired with it unread: nothing is held.
    settle_held(st)
  end
  -- Otherwise nothing changed: no write (the fleet's holds are read by every event of the user).
end

-- The state's open hold `id` (expire_holds first: an expired one is gone): its entry, or nil.
local function open_hold(st, id)
  if not st.holds then return nil end
  hold_keys(st)
  return redis.call('HGET', st.h, id) or nil
end

-- Adds a hold of `amount` expiring at `expires` (ms) to the state.
local function put_hold(st, id, amount, expires, entry)
  hold_keys(st)
  st.held, st.holds = st.held + amount, true
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
  settle_held(st)
  return v
end

-- Runs of an agent whose policy has a run budget (policy.ts RunJudged; the caller sends the
-- budget with the state, run_budget, and A.run_idle). Three keys of the state's own:
--   :r   hash of <run id> = 'spent stopped last' (nano-USD; 1: its budget stopped it; when
--        it was last seen, ms, moved on at most once a minute: memory.ts #runOf)
--   :rz  ZSET of run ids scored by `last`: a run idle for longer than A.run_idle leaves, at
--        most two as each new run comes (runs leave as fast as they come)
--   :rh  hash of <hold id> = <run id>, for the open holds asked for a run: what a run holds
--        is the sum of those still open in :h (an expired one is gone from :h already)
-- An event of a run costs an HGET and an HSET of :r; :rz and the keys' TTL (the state's)
-- are written when `last` moves. load.lua installs them with the state.

local function run_keys(st)
  if not st.r then
    local base = string.sub(st.s, 1, -3)
    st.r, st.rz, st.rh = base .. ':r', base .. ':rz', base .. ':rh'
  end
end

-- What the open holds asked for run `id` hold (the state's holds moved on to now).
local function run_held(st, id)
  if not st.holds then return 0 end
  run_keys(st)
  hold_keys(st)
  local flat, held = redis.call('HGETALL', st.rh), 0
  for i = 1, #flat, 2 do
    if flat[i + 1] == id then
      local v = redis.call('HGET', st.h, flat[i])
      if v then held = held + parse_hold(v) else redis.call('HDEL', st.rh, flat[i]) end
    end
  end
  return held
end

-- Whether run `id` was stopped by its budget (a repeat's answer: nothing moves).
local function run_stopped(st, id)
  run_keys(st)
  local v = redis.call('HGET', st.r, id)
  return v ~= false and string.match(v, '^%-?%d+ (%d)') == '1'
end

-- Run `id` of the state, {id, s = {spent, held, stopped}, budget, last, moved}, new when not
-- kept (then idle runs leave first); `last` moves on to NOW once a minute has passed since it
-- (moved: true). save_run() writes it back.
local function read_run(st, id)
  run_keys(st)
  local v = redis.call('HGET', st.r, id)
  local s = { spent = 0, held = run_held(st, id), stopped = false }
  local last = NOW
  if v then
    local spent, stopped, seen = string.match(v, '^(%-?%d+) (%d) (%d+)$')
    s.spent, s.stopped, last = tonumber(spent), stopped == '1', tonumber(seen)
  else
    local idle = redis.call('ZRANGEBYSCORE', st.rz, '-inf', NOW - A.run_idle, 'LIMIT', 0, 2)
    if #idle > 0 then
      redis.call('HDEL', st.r, unpack(idle))
      redis.call('ZREM', st.rz, unpack(idle))
    end
  end
  local moved = not v or NOW >= last + MINUTE_MS
  return { id = id, s = s, budget = st.run_budget, last = moved and NOW or last, moved = moved }
end

local function save_run(st, run)
  redis.call('HSET', st.r, run.id, fmt(run.s.spent) .. ' ' .. (run.s.stopped and '1' or '0') .. ' ' .. fmt(run.last))
  if run.moved then
    redis.call('ZADD', st.rz, run.last, run.id)
    redis.call('PEXPIRE', st.r, TTL)
    redis.call('PEXPIRE', st.rz, TTL)
  end
end

-- A run that ended unstopped is done with.
local function forget_run(st, run)
  redis.call('HDEL', st.r, run.id)
  redis.call('ZREM', st.rz, run.id)
end

-- The journal (stream.lua, prepended to the library): a script that may append checks
-- first, before it changes anything; bounded writes only are refused 'FULL' (reads append
-- the rare relaxing transition past the bound). nil when it may go on.
local function journal_closed(bounded)
  return stream_closed(K.journal, K.fenced, A.instance, bounded and A.stream_rows or nil)
end

local function journal(table_name, json)
  stream_append(K.journal, NOW_TEXT, table_name, json)
end

-- The state's next version: grows per state whatever the callers' clocks do.
local function next_version(st)
  local version = math.max(NOW * 1000, tonumber(redis.call('HGET', st.s, 'version') or '0') + 1)
  redis.call('HSET', st.s, 'version', fmt(version))
  return version
end

-- A state's ids as the first members of its rows' JSON.
local function members(st)
  if not st.members then st.members = '"user_id":' .. cjson.encode(st.user) .. ',"agent_id":' .. cjson.encode(st.agent) end
  return st.members
end

-- Journals a change of pause state (rules.lua) as its pause_transitions row, at the
-- window's total `total`, and returns it for the reply: {scope, reason, paused, override,
-- total, held, version, meter (0-based, -1: none), spent (the meter's, for a pause by it)}.
-- `actor`: the key id of the request, or 'system' (the rules).
local function transition(st, scope, change, total, actor)
  local version = next_version(st)
  local p = change.pause
  journal('pause_transitions', '{' .. members(st) .. ',"at":"' .. A.at .. '","version":' .. fmt(version) ..
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
  journal('budget_alerts', '{' .. members(st) .. ',"at":"' .. A.at .. '","version":' .. fmt(version) ..
    ',"level":' .. cjson.encode(m.alert_at[fired.level + 1]) .. ',"total_nano":' .. fmt(spent) .. ',"threshold_nano":' .. fmt(m.limit) .. '}')
  return { scope = scope, meter = fired.meter, level = fired.level, spent = fmt(spent), version = fmt(version) }
end

-- Event ids: at most 64 bytes each. An id is kept as a 12-byte fingerprint (hex) of (user,
-- agent, event id), computed by the caller, in its partition's table of the twelve UTC hours
-- of the minute it was counted in: {p}:ids:<period>:<i>, a linear hash of small hashes, each
-- held by Redis in its compact listpack encoding (under 128 fields: a bucket splits when the
-- table averages SPLIT_AT ids per bucket). {p}:ids (K.ids) holds b<period> (buckets) and
-- n<period> (ids) per table. A table's keys expire when its last minute has left the window,
-- all at once; until then an entry whose own minute has left it is not found, so the
-- window's edge is exact to the minute. Twelve hours a table: a new id is looked up in at
-- most three tables, and an id is kept at most 36 h. A table starts with as many buckets as
-- the one before it ended with, so a steady flow of ids seldom splits one.
-- Bucket keys are named from K.ids in the script: they carry its hash tag, so they are in
-- the script's slot.
local SPLIT_AT = 40
local PERIOD = 720 -- minutes a table of ids covers

local function h32(fp)
  return tonumber(string.sub(fp, 1, 8), 16)
end

-- The largest power of two at or under n.
local function floor_pow2(n)
  local size = 1
  while size * 2 <= n do size = size * 2 end
  return size
end

-- Linear hashing: the bucket of hash h in a table of `buckets` buckets, `size` its
-- floor_pow2().
local function bucket_of(h, buckets, size)
  local i = h % (size * 2)
  if i >= buckets then i = h % size end
  return i
end

-- A table of ids: its buckets, their power of two, its ids, its keys' prefix.
local function id_table(period, buckets, ids)
  return { b = buckets, size = floor_pow2(buckets), n = ids, prefix = K.ids .. ':' .. period .. ':' }
end

-- The partition's tables still in the window: {[period] = table}; the meta of those that
-- left it is dropped (their buckets expire on their own).
local function id_tables()
  local flat = redis.call('HGETALL', K.ids)
  local counts = {}
  for i = 1, #flat, 2 do
    local period = tonumber(string.sub(flat[i], 2))
    counts[period] = counts[period] or { b = 1, n = 0 }
    counts[period][string.sub(flat[i], 1, 1)] = tonumber(flat[i + 1])
  end
  local t = {}
  for period, c in pairs(counts) do
    if (period + 1) * PERIOD - 1 < DAY_FROM then
      redis.call('HDEL', K.ids, 'b' .. period, 'n' .. period)
    else
      t[period] = id_table(period, c.b, c.n)
    end
  end
  return t
end

-- The cost the id (fingerprint `fp`, its h32 `h`) was counted with (text), while its minute
-- is in the window; nil otherwise.
local function seen_cost(tables, fp, h)
  for period, tb in pairs(tables) do
    local v = redis.call('HGET', tb.prefix .. bucket_of(h, tb.b, tb.size), fp)
    if v then
      local sep = string.find(v, ':', 1, true)
      if period * PERIOD + tonumber(string.sub(v, sep + 1)) >= DAY_FROM then return string.sub(v, 1, sep - 1) end
    end
  end
  return nil
end

-- Remembers an id (the caller looked it up first) as counted at `cost` (text) in `minute`.
-- The table's meta is written back by save_ids(), once per call.
local function remember(tables, fp, h, cost, minute)
  local period = math.floor(minute / PERIOD)
  local tb = tables[period]
  -- Relative to the caller's clock, as the window is: the TTL only collects garbage.
  local ttl = math.max(1, ((period + 1) * PERIOD + WINDOW) * MINUTE_MS - NOW)
  if not tb then
    local before = tables[period - 1]
    tb = id_table(period, before and math.max(1, math.floor(before.n / SPLIT_AT)) or 1, 0)
    tb.new = true
    tables[period] = tb
  end
  if tb.n + 1 > SPLIT_AT * tb.b then
    -- The next bucket in order splits: its ids that now address the new bucket move there.
    local from, to = tb.prefix .. (tb.b - tb.size), tb.prefix .. tb.b
    local size = floor_pow2(tb.b + 1)
    local flat = redis.call('HGETALL', from)
    local moved, names = {}, {}
    for i = 1, #flat, 2 do
      if bucket_of(h32(flat[i]), tb.b + 1, size) == tb.b then
        moved[#moved + 1], moved[#moved + 2] = flat[i], flat[i + 1]
        names[#names + 1] = flat[i]
      end
    end
    if #moved > 0 then
      redis.call('HSET', to, unpack(moved))
      redis.call('HDEL', from, unpack(names))
      redis.call('PEXPIRE', to, ttl)
    end
    tb.b, tb.size = tb.b + 1, size
  end
  local key = tb.prefix .. bucket_of(h, tb.b, tb.size)
  if redis.call('HSETNX', key, fp, cost .. ':' .. (minute - period * PERIOD)) == 0 then return end
  -- Every key of a table expires at its end: set when the table's first bucket is written.
  if tb.new then
    redis.call('PEXPIRE', key, ttl)
    tb.new = false
  end
  tb.n = tb.n + 1
  tb.dirty, tb.ttl = true, ttl
end

-- Writes back the meta of the tables remember() changed.
local function save_ids(tables)
  local ttl = 0
  for period, tb in pairs(tables) do
    if tb.dirty then
      redis.call('HSET', K.ids, 'b' .. period, tb.b, 'n' .. period, tb.n)
      ttl = math.max(ttl, tb.ttl)
    end
  end
  if ttl > 0 and redis.call('PTTL', K.ids) < ttl then redis.call('PEXPIRE', K.ids, ttl) end
end

-- Writes refresh a state's TTL, so an idle agent expires on its own and is loaded again from
-- ClickHouse on demand. An event refreshes it only when it starts a minute bucket
-- (st.touched): the keys then live at least 24 h 59 min after the agent's last event, longer
-- than the window, and a busy agent pays for it once a minute instead of on every event.
local function touch(st)
  redis.call('PEXPIRE', st.s, TTL)
  redis.call('PEXPIRE', st.w, TTL)
  if st.windows.rolling then redis.call('PEXPIRE', st.d, TTL) end
end

-- API keys' budgets of events (types.ts RateCharge), kept as memory.ts #charge keeps them:
-- a window starts with its first charge and ends `window` ms later. A budget is a string key
-- 'count ends' (ends: epoch ms), in the user's slot; its TTL only collects it. The charges of
-- one call are counted in `budgets` and written once, at its end (save_budgets): a call that
-- stops with a control answer has charged nothing.

-- Counts a charge ({key, max, window}) and answers its budget: {max, current, ttl (ms)}.
local function charge(rate)
  local b = budgets[rate.key]
  if not b then
    local v = redis.call('GET', rate.key)
    local count, ends = 0, 0
    if v then count, ends = string.match(v, '^(%d+) (%d+)$') end
    count, ends = tonumber(count), tonumber(ends)
    if ends <= NOW then count, ends = 0, NOW + rate.window end
    b = { count = count, ends = ends, window = rate.window }
    budgets[rate.key] = b
  end
  b.count = b.count + 1
  return { max = rate.max, current = b.count, ttl = b.ends - NOW }
end

local function save_budgets()
  for key, b in pairs(budgets) do
    redis.call('SET', key, b.count .. ' ' .. fmt(b.ends), 'PX', math.max(1, b.ends - NOW))
  end
end

-- A control answer: what the caller must do before the script can act (redis.ts), sent
-- before anything changed. Written by hand so that it always starts with {"control": the
-- caller tells it from a result without decoding it. `detail` names the states concerned:
-- {keys = {…}} to load (NEEDS_LOAD), {stale = {{key, pv, policy}, …}} (STALE).
local function control(name, detail)
  return '{"control":"' .. name .. '","detail":' .. cjson.encode(detail or {}) .. '}'
end


-- Reads every state of the call (A.states: {id (its key id), pv, meters (an index into
-- A.meters, the lists of resolved meters), user, agent ('' for a fleet), budget (the daily
-- budget its projection aims at, absent: none), index (a fleet's: its user's agent index)},
-- their keys A.base ..
-- id .. ':s'). Answers nil and a control answer when one is not loaded (NEEDS_LOAD) or its
-- policy is not the one its meters were resolved from (STALE), before anything is written;
-- else the states in that order, their windows and holds moved on to now.
local function read_states()
  local list, missing, stale = {}, {}, {}
  for i, s in ipairs(A.states) do
    local key = A.base .. s.id .. ':s'
    local st = read_state(key, s.user, s.agent)
    if not st then
      missing[#missing + 1] = key
    elseif st.pv ~= s.pv then
      -- Learnt by the caller ({key, pv, policy (JSON, or absent: the default)}), which calls again.
      stale[#stale + 1] = { key = key, pv = fmt(st.pv), policy = redis.call('HGET', key, 'policy') or nil }
    else
      local meters = A.meters[s.meters]
      st.meters, st.windows, st.budget, st.index, st.run_budget = meters, windows_of(meters), s.budget, s.index, s.run_budget
      list[i] = st
    end
  end
  if #missing > 0 then return nil, control('NEEDS_LOAD', { keys = missing }) end
  if #stale > 0 then return nil, control('STALE', { stale = stale }) end
  for _, st in ipairs(list) do
    move_on(st)
    expire_holds(st)
  end
  return list
end
