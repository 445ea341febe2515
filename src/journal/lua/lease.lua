-- lease: keep, or take over, the ownership of an instance's journal. Judged by
-- Redis's own clock, so no two instances' clocks have to agree.
-- KEYS[1] ship:<instance>  hash: owner, until (ms, Redis time), seq, intent, c<partition>
-- ARGV[1] the caller  ARGV[2] lease (ms)  ARGV[3] 'renew' (the owner keeps it) or 'take'
-- (another instance takes it once its lease has run out)
-- Returns 'HELD' (renewed or taken: the caller owns it until now + lease), 'FENCED' (renew:
-- the caller was taken for dead and another instance owns it) or 'ALIVE' (take: the owner's
-- lease runs). A renew that finds no owner at all (Redis lost the key) takes it back: nobody
-- else took it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = redis.call('HGET', KEYS[1], 'owner')
if ARGV[3] == 'renew' then
  if owner and owner ~= ARGV[1] then return 'FENCED' end
elseif owner ~= ARGV[1] and tonumber(redis.call('HGET', KEYS[1], 'until') or '0') > now then
  return 'ALIVE'
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'until', now + tonumber(ARGV[2]))
return 'HELD'
