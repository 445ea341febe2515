-- Agents that ignore their pause: the record of an agent whose llm_call events
-- kept arriving after its pause and its grace period, written once per pause when the flag
-- is raised, with the calls and their cost up to then.
CREATE TABLE IF NOT EXISTS ignored_pauses
(
    user_id       String,
    agent_id      String,
    at            DateTime64(3, 'UTC'),
    -- the agent's version counter when it was raised (newest wins at a rebuild)
    version       UInt64,
    -- when the pause it ignored began (epoch ms)
    paused_at_ms  UInt64,
    calls         UInt64,
    cost_nano     Int64
)
ENGINE = MergeTree
ORDER BY (user_id, agent_id, at);

CREATE MATERIALIZED VIEW IF NOT EXISTS audit_ignored_pauses TO audit_log AS
SELECT
    user_id,
    at,
    version AS seq,
    agent_id,
    'ignoring_pause' AS action,
    'calls_after_pause' AS reason,
    'system' AS actor,
    concat('{"paused_at_ms":', toString(paused_at_ms), ',"calls":', toString(calls), ',"spent_nano":', toString(cost_nano), '}') AS details
FROM ignored_pauses;
