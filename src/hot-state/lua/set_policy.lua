-- set_policy: POST /config (memory.ts setPolicy()): store the policy; a changed threshold
-- ends a manual override. KEYS[1] :a  KEYS[2] :w  KEYS[3] :m  (see lib.lua)
-- ARGV[1] now (ms)  ARGV[2] agent TTL (ms)  ARGV[3] threshold (nano-USD integer)
-- ARGV[4] auto_resume (0|1)  ARGV[5] webhook url ('' for none)
-- Returns NEEDS_LOAD, or {transition or nil}.
if not loaded() then return NEEDS_LOAD end
local st = read_state()
local changed = st.threshold ~= tonumber(ARGV[3])
st.threshold, st.threshold_s, st.auto_resume = tonumber(ARGV[3]), ARGV[3], ARGV[4] == '1'
redis.call('HSET', A, 'threshold', ARGV[3], 'auto_resume', ARGV[4], 'configured', '1')
if ARGV[5] ~= '' then
  st.webhook = ARGV[5]
  redis.call('HSET', A, 'webhook', ARGV[5])
else
  st.webhook = false
  redis.call('HDEL', A, 'webhook')
end
local out = false
if changed and st.override then
  st.override = false
  save_state(st)
  out = transition(st, 'threshold_changed')
end
touch(tonumber(ARGV[2]))
return { out }
