-- One config per (user, agent): POST /config is an upsert, so rows are versioned and
-- the newest version wins (read with argMax, so before a merge too).
CREATE TABLE IF NOT EXISTS agent_configs
(
    user_id            String,
    agent_id           String,
    threshold_nano     Int64,
    slack_webhook_url  Nullable(String),
    auto_resume        Bool,
    updated_at         DateTime64(3, 'UTC'),
    version            UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (user_id, agent_id);
