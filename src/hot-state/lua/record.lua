-- record: count one stored event atomically (memory.ts record(), for one event).
-- KEYS[1] :a  KEYS[2] :w  KEYS[3] :m  (see lib.lua)  KEYS[4] :e:<event_id>
-- ARGV[1] now (ms)  ARGV[2] agent TTL (ms)  ARGV[3] cost (nano-USD integer)
-- ARGV[4] llm calls (0|1)  ARGV[5] the event's minute
-- Returns NEEDS_LOAD, or {counted (0|1), total, paused (0|1), transition...}.
if not loaded() then return NEEDS_LOAD end
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local now_minute = minute_of(now)
local st = read_state()
expire(st, now_minute)
local counted = 0
local transitions = {}
-- Seen: a retry, or an event that a load from ClickHouse already counted. Nothing changes.
if not seen_cost(KEYS[4], now_minute) then
  counted = 1
  remember(KEYS[4], ARGV[3], ARGV[5], now, ttl)
  -- What the expiry relaxed comes first (an override ends when the total fell back under
  -- the threshold, even if this event takes it over again), then this event's crossing.
  local relaxed = evaluate(st, false)
  if relaxed then table.insert(transitions, transition(st, relaxed)) end
  add(st, ARGV[5], ARGV[3], ARGV[4])
  local crossed = evaluate(st, true)
  if crossed then table.insert(transitions, transition(st, crossed)) end
end
if st.dirty then save_state(st) end
touch(ttl)
local out = { counted, fmt(st.total), st.paused and 1 or 0 }
for _, t in ipairs(transitions) do table.insert(out, t) end
return out
