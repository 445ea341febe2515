-- A skip index on event_id: an instance taking over another's stale reservation looks up
-- whether those events are stored already (HotState.reserve), without reading the agents'
-- whole history.
ALTER TABLE events ADD INDEX IF NOT EXISTS idx_event_id event_id TYPE bloom_filter(0.01) GRANULARITY 4;
