-- Every change of an agent's pause state, newest row = current state. Kept as a log so
-- operators can see who paused what and why; the hot state's pause flags are rebuilt
-- from the latest row per agent.
CREATE TABLE IF NOT EXISTS pause_transitions
(
    user_id    String,
    agent_id   String,
    at         DateTime64(3, 'UTC'),
    version    UInt64,
    is_paused  Bool,
    -- budget | manual | auto_resume | override_cleared | threshold_changed
    reason     LowCardinality(String),
    -- true while a manual resume of an agent over budget suppresses auto-pause, until its
    -- total falls to the threshold or the threshold changes
    override   Bool,
    total_nano Int64
)
ENGINE = MergeTree
ORDER BY (user_id, agent_id, version);
