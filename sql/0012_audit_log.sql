-- The audit log: who paused or resumed what and why, every config change with its
-- old and new values, every key created or revoked. Records are appended, never updated or
-- deleted by the service (no TTL, no mutation).
--
-- They are not written by the service itself: materialized views derive them from the rows
-- it already writes, in the same INSERT. A pause and its record are stored together or not
-- at all, and a batch the shipper sends again (same deduplication token) stores neither
-- twice (deduplicate_blocks_in_dependent_materialized_views, set by the client).
CREATE TABLE IF NOT EXISTS audit_log
(
    user_id   String,
    at        DateTime64(3, 'UTC'),
    -- orders the records of one millisecond as they happened: the source row's version
    -- (microseconds, bumped past the last: storage/version.ts), or its time in microseconds
    seq       UInt64,
    -- orders what seq cannot tell apart (and pages them)
    id        UUID DEFAULT generateUUIDv4(),
    -- '' for records of the user rather than of one agent (keys)
    agent_id  String,
    -- pause | resume | override_cleared | config | key_created | key_revoked
    action    LowCardinality(String),
    -- budget | manual | auto_resume | override_cleared | threshold_changed | config_set | cli
    reason    LowCardinality(String),
    -- the id of the API key whose request caused it, or 'system'
    actor     String,
    -- JSON: what changed (webhook URLs masked)
    details   String
)
ENGINE = MergeTree
ORDER BY (user_id, at, seq, id);

-- Who caused a transition or a config: the key id, or 'system' (the budget rules).
ALTER TABLE pause_transitions ADD COLUMN IF NOT EXISTS actor String DEFAULT 'system';
ALTER TABLE agent_configs ADD COLUMN IF NOT EXISTS actor String DEFAULT 'system';
-- The config as the audit shows it (JSON, webhook URL masked), and the one it replaced
-- ('' for the first): written by the hot state, which knows the old one at the moment it
-- replaces it.
ALTER TABLE agent_configs ADD COLUMN IF NOT EXISTS shown String DEFAULT '';
ALTER TABLE agent_configs ADD COLUMN IF NOT EXISTS replaced String DEFAULT '';

CREATE MATERIALIZED VIEW IF NOT EXISTS audit_pause_transitions TO audit_log AS
SELECT
    user_id,
    at,
    version AS seq,
    agent_id,
    multiIf(reason IN ('override_cleared', 'threshold_changed'), 'override_cleared', is_paused, 'pause', 'resume') AS action,
    reason,
    actor,
    concat('{"total_nano":', toString(total_nano), ',"override":', if(override, 'true', 'false'), '}') AS details
FROM pause_transitions;

CREATE MATERIALIZED VIEW IF NOT EXISTS audit_agent_configs TO audit_log AS
SELECT
    user_id,
    updated_at AS at,
    version AS seq,
    agent_id,
    'config' AS action,
    'config_set' AS reason,
    actor,
    concat('{"old":', if(replaced = '', 'null', replaced), ',"new":', if(shown = '', 'null', shown), '}') AS details
FROM agent_configs;

-- A key's first row is its creation, a later version its revocation (src/auth/api-keys.ts).
CREATE MATERIALIZED VIEW IF NOT EXISTS audit_api_keys TO audit_log AS
SELECT
    user_id,
    if(revoked_at IS NULL, created_at, assumeNotNull(revoked_at)) AS at,
    toUInt64(toUnixTimestamp64Micro(at)) AS seq,
    '' AS agent_id,
    if(revoked_at IS NULL, 'key_created', 'key_revoked') AS action,
    'cli' AS reason,
    'system' AS actor,
    concat('{"key_id":', toJSONString(key_id), ',"name":', toJSONString(name), '}') AS details
FROM api_keys;
