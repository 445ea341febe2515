-- Hourly cost per user, agent and model (UTC hours), filled as events are inserted.
-- Grafana and GET /agents/{id}/hourly read this instead of the raw events.
CREATE TABLE IF NOT EXISTS hourly_cost
(
    user_id       String,
    agent_id      String,
    hour          DateTime('UTC'),
    model         String,
    cost_nano     Int64,
    events        UInt64,
    llm_calls     UInt64,
    input_tokens  UInt64,
    output_tokens UInt64
)
ENGINE = SummingMergeTree
ORDER BY (user_id, agent_id, hour, model);

CREATE MATERIALIZED VIEW IF NOT EXISTS hourly_cost_mv TO hourly_cost AS
SELECT
    user_id,
    agent_id,
    toStartOfHour(timestamp) AS hour,
    model,
    sum(cost_nano) AS cost_nano,
    count() AS events,
    countIf(event_type = 'llm_call') AS llm_calls,
    sum(input_tokens) AS input_tokens,
    sum(output_tokens) AS output_tokens
FROM events
GROUP BY user_id, agent_id, hour, model;
