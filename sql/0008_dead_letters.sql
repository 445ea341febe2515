-- Rows ClickHouse refused for their content: the shipper moves such a row here,
-- with the error, instead of retrying it forever or holding back the rows behind it. Kept as
-- the journal had it (its JSON text), for an operator to look at and, once fixed, insert.
CREATE TABLE IF NOT EXISTS dead_letters
(
    at DateTime64(3, 'UTC'),
    target_table LowCardinality(String),
    row String,
    error String
)
ENGINE = MergeTree
ORDER BY at
SETTINGS non_replicated_deduplication_window = 10000;
