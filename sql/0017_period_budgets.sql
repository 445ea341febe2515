-- Period budgets: an agent's (or a fleet's) limits over calendar periods in a time zone and
-- rolling windows of days, as JSON (hot-state/meters.ts PeriodBudget[]: each a period spec and
-- its limit in nano-USD). '[]' is none, so a config written before this migration has none.
ALTER TABLE agent_configs ADD COLUMN IF NOT EXISTS period_budgets String DEFAULT '[]';
