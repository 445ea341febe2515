-- append: rows of one user to this instance's stream of the user's partition (stream.lua
-- is prepended).
-- KEYS[1] {p}:j:<instance>  the stream        KEYS[2] {p}:fenced  instances whose journal was taken over
-- ARGV[1] instance id  ARGV[2] appended at (ms)  ARGV[3] rows this stream may hold unshipped
-- ARGV[4..] table, json, table, json, ...
-- Returns 'OK', 'FENCED' or 'FULL' (nothing appended): stream_closed.
local closed = stream_closed(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[3]))
if closed then return closed end
for i = 4, #ARGV, 2 do
  stream_append(KEYS[1], ARGV[2], ARGV[i], ARGV[i + 1])
end
return 'OK'
