-- Every event burnrate acknowledged: the source of truth. Totals, pause flags and the
-- dedup set in the hot state are rebuilt from here.
CREATE TABLE IF NOT EXISTS events
(
    user_id            String,
    agent_id           String,
    -- server receive time in microseconds, strictly increasing per instance, so events
    -- of one millisecond keep their order and a page cursor never splits a tie
    timestamp          DateTime64(6, 'UTC'),
    event_id           UUID,
    event_type         LowCardinality(String),
    model              String,
    input_tokens       UInt64,
    output_tokens      UInt64,
    cache_read_tokens  UInt64,
    cache_write_tokens UInt64,
    tool_name          Nullable(String),
    metadata           String,
    cost_nano          Int64,
    price_fallback     Bool
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(timestamp)
ORDER BY (user_id, agent_id, timestamp, event_id);
