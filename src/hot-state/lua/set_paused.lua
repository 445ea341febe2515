-- set_paused: POST /config/pause (memory.ts setPaused(), policy.ts manual()).
-- KEYS[1..6], ARGV[1..7] (lib.lua)  KEYS[7..8] the agent's :hz :h (its open holds, lib.lua)
-- ARGV[8] paused (0|1)  ARGV[9] actor (the key id)
-- Returns NEEDS_LOAD, FENCED, FULL, or {transition or false} (false when the state already was that).
local closed = journal_closed(true)
if closed then return closed end
local st = read_state(A, W, M, ARGV[5])
if not st then return NEEDS_LOAD end
expire(st, minute_of(NOW))
read_held(st, KEYS[7], KEYS[8])
local changed = manual(st, ARGV[8] == '1')
local out = false
if changed then out = transition(st, 'manual', ARGV[9]) end
if changed or st.dirty then save_state(st) end
touch(st)
return { out }
