-- Alerts before the pause: each agent's levels, fractions of its threshold, and a
-- record of every level an event crossed. The default level, 0.8, is every agent's that
-- has no config or a config written before this migration.
ALTER TABLE agent_configs ADD COLUMN IF NOT EXISTS alert_at Array(Float64) DEFAULT [0.8];

CREATE TABLE IF NOT EXISTS budget_alerts
(
    user_id        String,
    agent_id       String,
    at             DateTime64(3, 'UTC'),
    -- the agent's version counter when it fired (orders it among the agent's transitions)
    version        UInt64,
    level          Float64,
    total_nano     Int64,
    threshold_nano Int64
)
ENGINE = MergeTree
ORDER BY (user_id, agent_id, at);

CREATE MATERIALIZED VIEW IF NOT EXISTS audit_budget_alerts TO audit_log AS
SELECT
    user_id,
    at,
    version AS seq,
    agent_id,
    'alert' AS action,
    'budget_level' AS reason,
    'system' AS actor,
    concat('{"level":', toString(level), ',"total_nano":', toString(total_nano), ',"threshold_nano":', toString(threshold_nano), '}') AS details
FROM budget_alerts;
