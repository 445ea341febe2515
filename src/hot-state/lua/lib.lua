-- Shared helpers, prepended by redis.ts to every hot-state script (Redis 7 scripts cannot
-- share functions otherwise). Every script gets the same first three keys, all with one hash
-- tag (one Redis Cluster slot per agent):
-- KEYS[1] :a  hash of the agent's state: loaded, total, calls, paused, reason, override,
--             threshold, auto_resume, webhook (absent when none), configured
-- KEYS[2] :w  hash of minute buckets: c<minute> = cost (nano-USD), n<minute> = llm calls
-- KEYS[3] :m  list of the bucket minutes, oldest first (RPUSH new, LPOP expired: amortised O(1))
-- Money is integer nano-USD: exact in Lua doubles up to 2^53, written back with '%.0f'
-- (never %d, which goes through a C int).
local WINDOW = 1440 -- minutes (src/window.ts)
local MINUTE_MS = 60000
local NEEDS_LOAD = 'NEEDS_LOAD'
local A, W, M = KEYS[1], KEYS[2], KEYS[3]

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

local function read_state()
  local v = redis.call('HMGET', A, 'total', 'calls', 'paused', 'reason', 'override',
    'threshold', 'auto_resume', 'webhook', 'configured')
  return {
    total = tonumber(v[1] or '0'), calls = tonumber(v[2] or '0'),
    paused = v[3] == '1', reason = v[4] or '', override = v[5] == '1',
    threshold = tonumber(v[6]), threshold_s = v[6], auto_resume = v[7] == '1',
    webhook = v[8] or false, configured = v[9] == '1', dirty = false,
  }
end

local function b01(x)
  if x then return '1' end
  return '0'
end

local function save_state(st)
  redis.call('HSET', A, 'total', fmt(st.total), 'calls', fmt(st.calls), 'paused', b01(st.paused),
    'reason', st.reason, 'override', b01(st.override))
end

-- RollingWindow.expire(): drop buckets that left the window from the head, each once.
local function expire(st, now_minute)
  while true do
    local head = redis.call('LINDEX', M, 0)
    if not head or in_window(tonumber(head), now_minute) then return end
    local b = redis.call('HMGET', W, 'c' .. head, 'n' .. head)
    st.total = st.total - tonumber(b[1] or '0')
    st.calls = st.calls - tonumber(b[2] or '0')
    redis.call('HDEL', W, 'c' .. head, 'n' .. head)
    redis.call('LPOP', M)
    st.dirty = true
  end
end

-- RollingWindow.add(): a minute older than the newest bucket (a rebuild, a clock step back)
-- folds into the newest one, which expires later, never earlier. cost, calls: integer strings.
local function add(st, minute, cost, calls)
  local tail = redis.call('LINDEX', M, -1)
  local bucket = minute
  if tail and tonumber(tail) >= tonumber(minute) then
    bucket = tail
  else
    redis.call('RPUSH', M, minute)
  end
  redis.call('HINCRBY', W, 'c' .. bucket, cost)
  redis.call('HINCRBY', W, 'n' .. bucket, calls)
  st.total = st.total + tonumber(cost)
  st.calls = st.calls + tonumber(calls)
  st.dirty = true
end

-- policy.ts evaluate(), branch for branch; mutates st and returns the reason, or nil.
local function evaluate(st, may_pause)
  local under = st.total <= st.threshold
  if st.override and under then
    st.override = false
    return 'override_cleared'
  end
  if st.paused and st.reason == 'budget' and st.auto_resume and under then
    st.paused, st.reason, st.override = false, '', false
    return 'auto_resume'
  end
  if may_pause and not st.paused and not st.override and not under then
    st.paused, st.reason, st.override = true, 'budget', false
    return 'budget'
  end
  return nil
end

-- policy.ts manual(); mutates st and returns whether the state changed.
local function manual(st, paused)
  if st.paused == paused and not (paused and st.reason == 'budget') then return false end
  if paused then
    st.paused, st.reason, st.override = true, 'manual', false
  else
    st.paused, st.reason, st.override = false, '', st.total > st.threshold
  end
  return true
end

-- {reason, paused, override, total, threshold, webhook}. A nil would end the reply array
-- there, so an absent webhook is false (a nil reply).
local function transition(st, reason)
  return { reason, st.paused and 1 or 0, st.override and 1 or 0, fmt(st.total), st.threshold_s, st.webhook or false }
end

-- The cost an event id was counted with, while its minute is in the window. The key's TTL
-- only collects garbage: the window edge is decided here, by the caller's clock. The key
-- holds 'cost:minute' once counted, or 'r:<at>:<token>' while claimed (reserve.lua).
local function seen_cost(key, now_minute)
  local v = redis.call('GET', key)
  if not v or string.sub(v, 1, 2) == 'r:' then return nil end
  local sep = string.find(v, ':', 1, true)
  if not in_window(tonumber(string.sub(v, sep + 1)), now_minute) then return nil end
  return string.sub(v, 1, sep - 1)
end

-- An event key lives until its minute leaves the window (at most the agent TTL).
local function remember(key, cost, minute, now, ttl)
  local left = (tonumber(minute) + WINDOW) * MINUTE_MS - now
  redis.call('SET', key, cost .. ':' .. minute, 'PX', math.max(1, math.min(left, ttl)))
end

-- Every write refreshes the agent's TTL, so an idle agent expires on its own and is loaded
-- again from ClickHouse on demand.
local function touch(ttl)
  redis.call('PEXPIRE', A, ttl)
  redis.call('PEXPIRE', W, ttl)
  redis.call('PEXPIRE', M, ttl)
end
