-- One config per (user, agent): POST /config is an upsert, so rows are versioned and
-- the newest wins (read with argMax / FINAL).
CREATE TABLE IF NOT EXISTS agent_configs
(
    user_id            String,
    agent_id           String,
    threshold_nano     Int64,
    slack_webhook_url  Nullable(String),
    auto_resume        Bool,
    updated_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY (user_id, agent_id);
