-- The journal's shipper may deliver a batch twice (a crash between its INSERT and its
-- acknowledgement): it sends the same insert_deduplication_token again, and ClickHouse
-- stores the block once. Non-replicated MergeTree tables keep no such window by default
-- (replicated ones do: replicated_deduplication_window). The materialized view's target
-- needs the window as well: its blocks carry tokens derived from the source block's, so a
-- repeated batch does not reach hourly_cost twice, while two different batches that happen
-- to aggregate to the same row are both kept (measured on chDB 26.7).
ALTER TABLE events MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE hourly_cost MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE pause_transitions MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE agent_configs MODIFY SETTING non_replicated_deduplication_window = 10000;
