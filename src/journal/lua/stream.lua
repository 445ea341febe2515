-- How every script that appends to a journal stream writes it: the journal's own append
-- and the hot state's scripts, which journal their changes in their own atomic step.
--
-- stream_closed: checked before the script changes anything. 'FENCED' when another
-- instance took this instance's streams over (it rejoins under a new id and calls again);
-- 'FULL' when the stream holds `bound` rows unshipped (nil: no bound); nil when it may go on.
local function stream_closed(stream, fenced, instance, bound)
  if redis.call('SISMEMBER', fenced, instance) == 1 then return 'FENCED' end
  if bound and redis.call('XLEN', stream) >= bound then return 'FULL' end
  return nil
end

-- One row of a table as an entry: t the table, a the time it was appended at (ms, text),
-- j the row as the JSON the shipper sends to ClickHouse (journal/redis-streams.ts).
local function stream_append(stream, at, table_name, json)
  redis.call('XADD', stream, '*', 't', table_name, 'a', at, 'j', json)
end
