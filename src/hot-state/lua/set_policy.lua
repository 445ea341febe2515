-- set_policy: POST /config (memory.ts setPolicy()): store the policy and journal its
-- agent_configs row; a changed threshold ends a manual override.
-- KEYS[1..6], ARGV[1..7] (lib.lua)  ARGV[8] threshold (nano-USD integer)
-- ARGV[9] auto_resume (0|1)  ARGV[10] webhook url ('' for none)  ARGV[11] the config row (JSON,
-- without "replaced": the config it replaces is appended here)  ARGV[12] actor (the key id)
-- ARGV[13] the new config as shown (JSON)  ARGV[14] the alert levels (comma-separated, ascending)
-- ARGV[15] the velocity limit (nano-USD integer, 0: none)  ARGV[16] its window (minutes)
-- Returns NEEDS_LOAD, FENCED, FULL, or {transition or false}.
local closed = journal_closed(true)
if closed then return closed end
local st = read_state(A, W, M, ARGV[5])
if not st then return NEEDS_LOAD end
local replaced = ''
if st.configured then replaced = redis.call('HGET', A, 'shown') or '' end
local changed = st.threshold ~= tonumber(ARGV[8])
st.threshold, st.threshold_s, st.auto_resume = tonumber(ARGV[8]), ARGV[8], ARGV[9] == '1'
-- A level kept keeps its state (policy.ts carryAlerts); a new one starts armed.
local alerted = 0
local i = 0
for level in string.gmatch(ARGV[14], '[^,]+') do
  i = i + 1
  for j, old in ipairs(st.levels) do
    if old == level and math.floor(st.alerted / 2 ^ (j - 1)) % 2 == 1 then alerted = alerted + 2 ^ (i - 1) end
  end
end
redis.call('HSET', A, 'threshold', ARGV[8], 'auto_resume', ARGV[9], 'configured', '1', 'shown', ARGV[13],
  'alert_at', ARGV[14], 'alerted', alerted, 'vlimit', ARGV[15], 'vwindow', ARGV[16])
if ARGV[10] ~= '' then
  st.webhook = ARGV[10]
  redis.call('HSET', A, 'webhook', ARGV[10])
else
  st.webhook = false
  redis.call('HDEL', A, 'webhook')
end
journal('agent_configs', string.sub(ARGV[11], 1, -2) .. ',"replaced":' .. cjson.encode(replaced) .. '}')
local out = false
if changed and st.override then
  st.override = false
  save_state(st)
  out = transition(st, 'threshold_changed', ARGV[12])
end
touch(st)
return { out }
