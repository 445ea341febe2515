-- Settings of the schema applied at start-up from the environment (the retention TTLs), by
-- name: the value last applied, so a start applies an ALTER only when the setting changed.
-- '' is "none" (keep everything). Newest row wins.
CREATE TABLE IF NOT EXISTS schema_settings
(
    name       String,
    value      String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(applied_at)
ORDER BY name;
