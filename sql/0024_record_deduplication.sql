-- The records the budget rules write beside the events (alert levels crossed, agents flagged
-- for ignoring their pause) and the audit log the views fill from every record: a batch the
-- shipper sends again (same insert_deduplication_token) is stored once, as events and pause
-- transitions are (sql/0007). Without the window these tables kept a batch sent twice twice.
ALTER TABLE budget_alerts MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE ignored_pauses MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE audit_log MODIFY SETTING non_replicated_deduplication_window = 10000;
