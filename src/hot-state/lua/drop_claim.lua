-- drop_claim: forget a claim on an event id that nobody stored (its instance died before
-- the INSERT, or the INSERT failed): the next retry of the event is then a new event.
-- A claim made after ARGV[1] (a retry that took it over) is left alone.
-- KEYS[1] :e:<event_id>
-- ARGV[1] the time of the stale claim (ms)
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 2) == 'r:' then
  local sep = string.find(v, ':', 3, true)
  if tonumber(string.sub(v, 3, sep - 1)) <= tonumber(ARGV[1]) then redis.call('DEL', KEYS[1]) end
end
return 1
