-- Cost by any dimension (GET /costs). Each event's metadata, as its top-level scalar values
-- by key: strings as they are, numbers and booleans as their JSON text (objects, arrays and
-- nulls are no dimension). Computed by ClickHouse as rows are inserted; for rows stored
-- before this migration it is computed as they are read, until the mutation below has
-- written it.
ALTER TABLE events ADD COLUMN IF NOT EXISTS dims Map(LowCardinality(String), String) MATERIALIZED
    mapFromArrays(
        arrayMap(kv -> kv.1, arrayFilter(kv -> JSONType(kv.2) IN ('String', 'Int64', 'UInt64', 'Double', 'Bool'), JSONExtractKeysAndValuesRaw(metadata))),
        arrayMap(kv -> if(JSONType(kv.2) = 'String', JSONExtractString(kv.2), kv.2),
                 arrayFilter(kv -> JSONType(kv.2) IN ('String', 'Int64', 'UInt64', 'Double', 'Bool'), JSONExtractKeysAndValuesRaw(metadata))));
ALTER TABLE events MATERIALIZE COLUMN dims;
-- What each metadata value's events add up to per UTC hour, agent and model. Grouping 10 M
-- events by a metadata key read from the events took 1.0-1.9 s (the map of every row);
-- from here, 40-90 ms with the group of the events without the key (hourly_cost's total
-- less the keyed rows). A key whose every event has a value of its own (a request id) makes
-- as many rows here as events, and grouping by it is no faster than a scan.
-- POPULATE fills it with the events stored before, in the statement that creates it, so
-- running the migration again after a crash adds nothing twice (IF NOT EXISTS). A batch the
-- shipper delivers twice reaches it once, as for hourly_cost (sql/0007).
CREATE MATERIALIZED VIEW IF NOT EXISTS hourly_dimensions
ENGINE = SummingMergeTree
ORDER BY (user_id, key, hour, value, agent_id, model)
SETTINGS non_replicated_deduplication_window = 10000
POPULATE AS
SELECT
    user_id,
    key,
    toStartOfHour(timestamp) AS hour,
    value,
    agent_id,
    model,
    sum(cost_nano) AS cost_nano,
    count() AS events,
    countIf(event_type = 'llm_call') AS llm_calls,
    sum(input_tokens) AS input_tokens,
    sum(output_tokens) AS output_tokens
FROM events
ARRAY JOIN mapKeys(dims) AS key, mapValues(dims) AS value
GROUP BY user_id, key, hour, value, agent_id, model;
