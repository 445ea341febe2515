-- seen: the cost an event id was counted with, while its minute is in the window.
-- KEYS[1] :a  KEYS[2] :w  KEYS[3] :m  (see lib.lua)  KEYS[4] :e:<event_id>
-- ARGV[1] now (ms)
-- Returns NEEDS_LOAD (an agent not loaded may have the id in ClickHouse), or {cost or nil}.
if not loaded() then return NEEDS_LOAD end
return { seen_cost(KEYS[4], minute_of(tonumber(ARGV[1]))) or false }
