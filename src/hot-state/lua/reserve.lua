-- reserve: claim an event id before it is stored (HotState.reserve), so an event sent through
-- two instances at once is stored once. The claim lives in the event's own key, as
-- 'r:<at>:<token>', until record.lua replaces it with the counted cost; it is kept for the
-- window so a claim left by a crashed instance is always taken over, never silently dropped.
-- KEYS[1] :a  KEYS[2] :w  KEYS[3] :m  (see lib.lua)  KEYS[4] :e:<event_id>
-- ARGV[1] now (ms)  ARGV[2] token of the claiming instance  ARGV[3] a claim is stale after (ms)
-- Returns NEEDS_LOAD (the id may be in ClickHouse), or {'done', cost} | {'busy'} |
-- {'takeover'} | {'reserved'}.
if not loaded() then return NEEDS_LOAD end
local now = tonumber(ARGV[1])
local cost = seen_cost(KEYS[4], minute_of(now))
if cost then return { 'done', cost } end
local state = 'reserved'
local claim = redis.call('GET', KEYS[4])
if claim and string.sub(claim, 1, 2) == 'r:' then
  local sep = string.find(claim, ':', 3, true)
  local at, token = tonumber(string.sub(claim, 3, sep - 1)), string.sub(claim, sep + 1)
  if token ~= ARGV[2] and now - at < tonumber(ARGV[3]) then return { 'busy' } end
  -- The claimant went quiet (crashed, or its insert failed), or it is this instance and
  -- its own earlier attempt failed (an instance never claims an id twice at once): the
  -- insert may have landed, so the row may be stored already.
  state = 'takeover'
end
redis.call('SET', KEYS[4], 'r:' .. ARGV[1] .. ':' .. ARGV[2], 'PX', WINDOW * MINUTE_MS)
return { state }
