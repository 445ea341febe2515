-- begin: record the batch an instance is about to INSERT, before the INSERT.
-- KEYS[1] ship:<instance>  hash: owner, seq, intent (JSON), c<partition> (last shipped id)
-- ARGV[1] the caller (the owner: the instance itself, or the one that took its journal over)
-- ARGV[2] JSON {p: [first id, last id]} of the batch
-- Returns {'OK', token}, or {'FENCED'} when the caller no longer owns this journal: it must
-- not INSERT (its batch may be shipped by the new owner under another token).
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner ~= ARGV[1] then return { 'FENCED' } end
if redis.call('HEXISTS', KEYS[1], 'intent') == 1 then return { 'BUSY' } end
-- The epoch names this life of the hash: a Redis that lost it (no AOF, a flush) starts the
-- sequence again, and a token must never repeat one ClickHouse may still remember.
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then
  local t = redis.call('TIME')
  epoch = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('HSET', KEYS[1], 'epoch', epoch)
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
local token = KEYS[1] .. ':' .. epoch .. ':' .. seq
redis.call('HSET', KEYS[1], 'intent', cjson.encode({ token = token, ranges = cjson.decode(ARGV[2]) }))
return { 'OK', token }
