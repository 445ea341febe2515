-- A batch INSERT that failed ambiguously (a timeout after the server stored it) is retried
-- with the same insert_deduplication_token: ClickHouse then stores it once, in the events
-- table and in the hourly view. Replicated tables deduplicate by default; these need the
-- window set.
ALTER TABLE events MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE hourly_cost MODIFY SETTING non_replicated_deduplication_window = 10000;
