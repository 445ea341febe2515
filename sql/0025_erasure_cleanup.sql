-- Erasing a user (burnrate users erase, storage/erasure.ts) deletes their rows with
-- ALTER ... DELETE: the parts that held them are written again without them, and the old
-- parts stay on disk, inactive, until the table's cleanup removes them. By default a table
-- looks every 30-40 s, backing off to every 300 s while idle: the erased rows stayed on disk
-- that long (measured on chDB 26.7, which keeps no old part beyond its cleanup:
-- old_parts_lifetime 0). Each table holding user data looks each second instead (a look
-- that finds nothing costs a listing of the table's parts in memory). The inner tables of
-- hourly_dimensions and hourly_dimension_keys get the same at start-up (their names are
-- ClickHouse's: storage/erasure.ts shortenCleanup).
ALTER TABLE events MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE hourly_cost MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE runs MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE agent_configs MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE pause_transitions MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE budget_alerts MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE ignored_pauses MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE run_stops MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE api_keys MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE dead_letters MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
ALTER TABLE audit_log MODIFY SETTING cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, max_cleanup_delay_period = 1;
