-- Grafana's cost panels read a user's hourly_cost over a time range. The table's
-- order, (user_id, agent_id, hour, model), cannot narrow by hour across agents, so each read
-- took the user's whole history: with 10 M events a day and 30 days kept, 7.44 M rows in
-- 34-167 ms, growing with every day (the table keeps everything). A projection in
-- (user_id, hour) order reads the range: 485 K rows, 20-54 ms (chDB 26.7). A SummingMergeTree
-- merges rows, so its projections must be rebuilt on merge rather than refused.
ALTER TABLE hourly_cost MODIFY SETTING deduplicate_merge_projection_mode = 'rebuild';
ALTER TABLE hourly_cost ADD PROJECTION IF NOT EXISTS by_user_hour (SELECT * ORDER BY user_id, hour, agent_id, model);
-- Rows stored before this migration: rebuilt in the background (a mutation).
ALTER TABLE hourly_cost MATERIALIZE PROJECTION by_user_hour;
