-- rewrite: a journal stream written again with only the entries its journal has not
-- shipped, for an erasure (burnrate users erase). XTRIM, which drops shipped entries, marks
-- those of a node that still holds others as deleted, and the node keeps their bytes (in
-- memory, and in an RDB or AOF written from it) until every entry of it is gone. Written
-- again, the stream has the same entries, ids and last id, in nodes that hold nothing else.
-- KEYS[1] {p}:j:<instance>  ARGV[1] the id its journal has shipped up to ('0-0': none)
-- Returns how many entries it kept.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then last = info[i + 1] end
end
local kept = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+')
redis.call('DEL', KEYS[1])
for _, entry in ipairs(kept) do
  redis.call('XADD', KEYS[1], entry[1], unpack(entry[2]))
end
if #kept == 0 then
  -- An empty stream with the same last id: the next append's id stays above every shipped one.
  redis.call('XADD', KEYS[1], last, 'x', '')
  redis.call('XDEL', KEYS[1], last)
else
  redis.call('XSETID', KEYS[1], last)
end
return #kept
