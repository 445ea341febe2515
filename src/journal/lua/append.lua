-- append: rows of one user to this instance's stream of the user's partition.
-- The hot state's record script will append the same way, in its own atomic step.
-- KEYS[1] {p}:j:<instance>  the stream        KEYS[2] {p}:fenced  instances whose journal was taken over
-- ARGV[1] instance id  ARGV[2] appended at (ms)  ARGV[3] rows this stream may hold unshipped
-- ARGV[4..] table, json, table, json, ...
-- Returns 'OK', 'FENCED' (another instance took this one's journal over: it must rejoin under
-- a new id) or 'FULL' (the bound; nothing appended).
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 'FENCED' end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 'FULL' end
for i = 4, #ARGV, 2 do
  redis.call('XADD', KEYS[1], '*', 't', ARGV[i], 'a', ARGV[2], 'j', ARGV[i + 1])
end
return 'OK'
