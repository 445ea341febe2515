-- The metadata keys of each user's events per UTC hour, and how many events carry each: what
-- GET /costs/dimensions and Grafana's key variable offer to group cost by. hourly_dimensions
-- (sql/0019) knows them too, but a row per value, agent and model, in key order: listing a
-- range's keys there reads every row of the user's range, and a key with a value per event (a
-- request id) makes that as many rows as events. 3 M events of one user over 30 days, a fifth
-- of them with a request id: 1.35 M rows read, 160-1180 ms for 30 days (chDB 26.7, a shared
-- 2-core machine); here 20 K rows, 15-17 ms, whatever the values. What it costs the inserts:
-- its view's work over 1.2 M such events took 250-790 ms, beside 2.1-3.0 s for
-- hourly_dimensions' and 0.2-0.4 s for hourly_cost's.
-- POPULATE fills it with the events stored before, in the statement that creates it
-- (IF NOT EXISTS: running the migration again after a crash adds nothing twice). A batch the
-- shipper delivers twice reaches it once, as for hourly_cost (sql/0007).
CREATE MATERIALIZED VIEW IF NOT EXISTS hourly_dimension_keys
ENGINE = SummingMergeTree
ORDER BY (user_id, hour, key)
SETTINGS non_replicated_deduplication_window = 10000
POPULATE AS
SELECT
    user_id,
    toStartOfHour(timestamp) AS hour,
    key,
    count() AS events
FROM events
ARRAY JOIN mapKeys(dims) AS key
GROUP BY user_id, hour, key;
