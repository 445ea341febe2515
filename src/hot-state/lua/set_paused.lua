-- set_paused: POST /config/pause (memory.ts setPaused(), policy.ts manual()).
-- KEYS[1] :a  KEYS[2] :w  KEYS[3] :m  (see lib.lua)
-- ARGV[1] now (ms)  ARGV[2] agent TTL (ms)  ARGV[3] paused (0|1)
-- Returns NEEDS_LOAD, or {transition or nil} (nil when the state already was that).
if not loaded() then return NEEDS_LOAD end
local st = read_state()
expire(st, minute_of(tonumber(ARGV[1])))
local changed = manual(st, ARGV[3] == '1')
if changed or st.dirty then save_state(st) end
touch(tonumber(ARGV[2]))
return { changed and transition(st, 'manual') or false }
