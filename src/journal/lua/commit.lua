-- commit: the batch recorded by begin.lua is in ClickHouse: move the cursors past it.
-- KEYS[1] ship:<instance>  ARGV[1] the caller  ARGV[2] the batch's token
-- Returns {'OK', JSON ranges} (the caller then trims the streams up to them), or {'FENCED'}
-- when the caller no longer owns the journal (the new owner ships the batch again, same
-- token), or {'STALE'} when that batch is no longer the one under way.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return { 'FENCED' } end
local raw = redis.call('HGET', KEYS[1], 'intent')
if not raw then return { 'STALE' } end
local intent = cjson.decode(raw)
if intent.token ~= ARGV[2] then return { 'STALE' } end
for p, range in pairs(intent.ranges) do redis.call('HSET', KEYS[1], 'c' .. p, range[2]) end
redis.call('HDEL', KEYS[1], 'intent')
return { 'OK', cjson.encode(intent.ranges) }
