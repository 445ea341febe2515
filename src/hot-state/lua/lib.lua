-- Shared helpers, prepended by redis.ts to every hot-state script (Redis 7 scripts cannot
-- share functions otherwise). Every key of a script carries the hash tag of the user's
-- partition {p<n>} (storage/redis-keys.ts): one Redis Cluster slot per script. The agent
-- scripts (record, get, set_policy, set_paused) take the same first keys and arguments:
-- KEYS[1] :a  hash of the agent's state: loaded, total, calls, paused, reason, override,
--             threshold, auto_resume, webhook (absent when none), configured, version
-- KEYS[2] :w  hash of minute buckets: c<minute> = cost (nano-USD), n<minute> = llm calls
-- KEYS[3] :m  list of the bucket minutes, oldest first (RPUSH new, LPOP expired: amortised O(1))
-- KEYS[4] {p}:j:<instance>  this instance's journal stream of the partition (issue 8)
-- KEYS[5] {p}:fenced        instances whose journal another instance took over
-- KEYS[6] {p}:u:<user>      the user's agents, scored by the minute of their last event
-- ARGV[1] now (ms)  ARGV[2] agent TTL (ms)  ARGV[3] instance id  ARGV[4] rows the stream
-- may hold unshipped  ARGV[5] '"user_id":…,"agent_id":…' (JSON members)  ARGV[6] now as
-- ClickHouse DateTime text  ARGV[7] the agent id
-- Money is integer nano-USD: exact in Lua doubles up to 2^53, written back with '%.0f'
-- (never %d, which goes through a C int).
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

-- Journals a change of pause state as its pause_transitions row, and returns it for the
-- caller: {reason, paused, override, total, threshold, webhook, version}. A nil would end
-- the reply array there, so an absent webhook is false (a nil reply). Versions grow per
-- agent whatever the callers' clocks do: newest wins at a rebuild.
local function transition(st, reason)
  local version = math.max(NOW * 1000, tonumber(redis.call('HGET', A, 'version') or '0') + 1)
  redis.call('HSET', A, 'version', fmt(version))
  local paused, override = st.paused and 'true' or 'false', st.override and 'true' or 'false'
  journal('pause_transitions', '{' .. ARGV[5] .. ',"at":"' .. ARGV[6] .. '","version":' .. fmt(version) ..
    ',"is_paused":' .. paused .. ',"reason":"' .. reason .. '","override":' .. override ..
    ',"total_nano":' .. fmt(st.total) .. '}')
  return { reason, st.paused and 1 or 0, st.override and 1 or 0, fmt(st.total), st.threshold_s, st.webhook or false, fmt(version) }
end

-- The cost an event id was counted with, while its minute is in the window. The key's TTL
-- only collects garbage: the window edge is decided here, by the caller's clock. The key
-- holds 'cost:minute'.
local function seen_cost(key, now_minute)
  local v = redis.call('GET', key)
  if not v then return nil end
  local sep = string.find(v, ':', 1, true)
  if not in_window(tonumber(string.sub(v, sep + 1)), now_minute) then return nil end
  return string.sub(v, 1, sep - 1)
end

-- An event key lives until its minute leaves the window (at most the agent TTL).
local function remember(key, cost, minute)
  local left = (tonumber(minute) + WINDOW) * MINUTE_MS - NOW
  redis.call('SET', key, cost .. ':' .. minute, 'PX', math.max(1, math.min(left, TTL)))
end

-- Every write refreshes the agent's TTL, so an idle agent expires on its own and is loaded
-- again from ClickHouse on demand.
local function touch()
  redis.call('PEXPIRE', A, TTL)
  redis.call('PEXPIRE', W, TTL)
  redis.call('PEXPIRE', M, TTL)
end
