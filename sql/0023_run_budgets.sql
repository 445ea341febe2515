-- Run budgets: what one run of an agent may cost (0: no limit), and the record of each run
-- the budget stopped, written once, when the llm_call that took the run over it is counted.
ALTER TABLE agent_configs ADD COLUMN IF NOT EXISTS run_budget_nano Int64 DEFAULT 0;

CREATE TABLE IF NOT EXISTS run_stops
(
    user_id     String,
    agent_id    String,
    run_id      String,
    at          DateTime64(3, 'UTC'),
    -- the agent's version counter when the run stopped (names its record and message)
    version     UInt64,
    -- what the run's events cost with the one that stopped it, its open holds, its budget
    spent_nano  Int64,
    held_nano   Int64,
    budget_nano Int64
)
ENGINE = MergeTree
ORDER BY (user_id, agent_id, run_id, at)
-- A batch the shipper sends again (same insert_deduplication_token) is stored once.
SETTINGS non_replicated_deduplication_window = 10000;

CREATE MATERIALIZED VIEW IF NOT EXISTS audit_run_stops TO audit_log AS
SELECT
    user_id,
    at,
    version AS seq,
    agent_id,
    'run_paused' AS action,
    'run_budget' AS reason,
    'system' AS actor,
    concat('{"run_id":', toJSONString(run_id), ',"spent_nano":', toString(spent_nano), ',"held_nano":', toString(held_nano),
           ',"budget_nano":', toString(budget_nano), '}') AS details
FROM run_stops;
