-- record: one event's atomic step (HotState.record, memory.ts record()): dedup its id, add its
-- cost, evaluate the budget rules, flip the pause flag, and append its row and its
-- transitions to this instance's journal stream, all or nothing.
-- KEYS[1..6] (lib.lua)  KEYS[7] {p}:e  the partition's event-id tables (lib.lua)
-- ARGV[1..7] (lib.lua)  ARGV[8] cost (nano-USD integer)  ARGV[9] llm calls (0|1)
-- ARGV[10] the event's minute  ARGV[11] the event's row (JSON)  ARGV[12] its id's fingerprint
-- Returns NEEDS_LOAD, FENCED, FULL, or {counted (0|1), total, paused (0|1), cost, threshold,
-- spend (lib.lua), {level, version, …} of the alerts fired, webhook or false, transition...}
-- where cost is the one the id was first counted at.
if not loaded() then return NEEDS_LOAD end
local closed = journal_closed(true)
if closed then return closed end
local now_minute = minute_of(NOW)
local st = read_state(A, W, M)
expire(st, now_minute)
-- Seen: a retry, or an event that a load from ClickHouse already counted. Nothing changes.
local ids = id_tables(KEYS[7], now_minute)
local seen = seen_cost(KEYS[7], ids, ARGV[12], now_minute)
if seen then
  if st.dirty then save_state(st) end
  return { 0, fmt(st.total), st.paused and 1 or 0, seen, st.threshold_s, spend(st, now_minute), {}, false }
end
remember(KEYS[7], ids, ARGV[12], ARGV[8], ARGV[10])
journal('events', ARGV[11])
local out = { 1, '', 0, ARGV[8], st.threshold_s, false, {}, st.webhook or false }
-- What the expiry relaxed comes first (an override ends when the total fell back under
-- the threshold, even if this event takes it over again), then this event's crossing.
local relaxed = evaluate(st, false)
if relaxed then table.insert(out, transition(st, relaxed)) end
-- Levels the expiry took the total below re-arm first, so this event can fire them again.
evaluate_alerts(st, false)
add(st, ARGV[10], ARGV[8], ARGV[9])
local crossed = evaluate(st, true)
if crossed then table.insert(out, transition(st, crossed)) end
for _, level in ipairs(evaluate_alerts(st, true)) do
  for _, x in ipairs(alert(st, level)) do table.insert(out[7], x) end
end
save_state(st)
touch(st)
redis.call('ZADD', KEYS[6], 'GT', ARGV[10], ARGV[7])
redis.call('PEXPIRE', KEYS[6], TTL)
out[2], out[3], out[6] = fmt(st.total), st.paused and 1 or 0, spend(st, now_minute)
return out
