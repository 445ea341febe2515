-- Runs: one row per (user, agent, run) holding what GET /agents/{id}/runs and GET /runs/{id}
-- show, filled as events are inserted, so neither read aggregates the events themselves.
-- Each INSERT adds a row per run it touches; merges (and every read, GROUP BY) fold them:
-- min/max of the times, sums of the counts and of the cost by model. The start is its
-- agent_start's time (NULL until one arrives), the end its agent_end's (NULL while open).
CREATE TABLE IF NOT EXISTS runs
(
    user_id    String,
    agent_id   String,
    run_id     String,
    first_at   SimpleAggregateFunction(min, DateTime64(6, 'UTC')),
    last_at    SimpleAggregateFunction(max, DateTime64(6, 'UTC')),
    start_at   SimpleAggregateFunction(min, Nullable(DateTime64(6, 'UTC'))),
    end_at     SimpleAggregateFunction(max, Nullable(DateTime64(6, 'UTC'))),
    cost_nano  SimpleAggregateFunction(sum, Int64),
    events     SimpleAggregateFunction(sum, UInt64),
    llm_calls  SimpleAggregateFunction(sum, UInt64),
    tool_calls SimpleAggregateFunction(sum, UInt64),
    -- the llm_calls by model: (models, cost_nano, calls, input_tokens, output_tokens), models sorted
    by_model   SimpleAggregateFunction(sumMap, Tuple(Array(String), Array(Int64), Array(UInt64), Array(UInt64), Array(UInt64))),
    -- GET /runs/{id} knows the run, not its agents: in the table's order that read took every
    -- run of the user (100,000 rows for 100,000 runs); in (user_id, run_id) order, one granule.
    PROJECTION by_run (SELECT * ORDER BY user_id, run_id, agent_id)
)
ENGINE = AggregatingMergeTree
ORDER BY (user_id, agent_id, run_id)
-- A batch the shipper sends again (same insert_deduplication_token) reaches this table once,
-- as it reaches hourly_cost once (sql/0007). Merges fold rows, so the projection is rebuilt
-- on merge (as hourly_cost's, sql/0016).
SETTINGS non_replicated_deduplication_window = 10000, deduplicate_merge_projection_mode = 'rebuild';

CREATE MATERIALIZED VIEW IF NOT EXISTS runs_mv TO runs AS
SELECT
    user_id,
    agent_id,
    run_id,
    min(timestamp) AS first_at,
    max(timestamp) AS last_at,
    minIfOrNull(timestamp, event_type = 'agent_start') AS start_at,
    maxIfOrNull(timestamp, event_type = 'agent_end') AS end_at,
    -- events.cost_nano: the column, not this SELECT's sum of the same name
    sum(events.cost_nano) AS cost_nano,
    count() AS events,
    countIf(event_type = 'llm_call') AS llm_calls,
    countIf(event_type = 'tool_call') AS tool_calls,
    sumMap(if(event_type = 'llm_call',
              ([model], [events.cost_nano], [toUInt64(1)], [input_tokens], [output_tokens]),
              ([], [], [], [], []))) AS by_model
FROM events
WHERE run_id != ''
GROUP BY user_id, agent_id, run_id;

-- Events stored with a run_id before this view existed (sql/0018 on): their runs, from the
-- events themselves, once. A run already in the table is left out whole, so running this
-- again (a crash before the migration was recorded) adds nothing twice: each run is one row
-- of one block, stored or not. Migrations run before the shipper starts, so no event reaches
-- both the view and this statement; an instance of an earlier release shipping meanwhile
-- could leave the earlier part of a run it ships then out of it.
INSERT INTO runs
SELECT
    user_id,
    agent_id,
    run_id,
    min(timestamp) AS first_at,
    max(timestamp) AS last_at,
    minIfOrNull(timestamp, event_type = 'agent_start') AS start_at,
    maxIfOrNull(timestamp, event_type = 'agent_end') AS end_at,
    sum(events.cost_nano) AS cost_nano,
    count() AS events,
    countIf(event_type = 'llm_call') AS llm_calls,
    countIf(event_type = 'tool_call') AS tool_calls,
    sumMap(if(event_type = 'llm_call',
              ([model], [events.cost_nano], [toUInt64(1)], [input_tokens], [output_tokens]),
              ([], [], [], [], []))) AS by_model
FROM events
WHERE run_id != '' AND (user_id, agent_id, run_id) NOT IN (SELECT user_id, agent_id, run_id FROM runs)
GROUP BY user_id, agent_id, run_id;
