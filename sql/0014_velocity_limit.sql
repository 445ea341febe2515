-- Spend-velocity limits: an agent's (or a fleet's) spend within its last
-- velocity_window_minutes minutes may not go over velocity_limit_nano. 0 is no limit (the API
-- takes only limits above 0), so a config written before this migration has none.
ALTER TABLE agent_configs ADD COLUMN IF NOT EXISTS velocity_limit_nano Int64 DEFAULT 0;
ALTER TABLE agent_configs ADD COLUMN IF NOT EXISTS velocity_window_minutes UInt8 DEFAULT 5;
