-- The run an event belongs to: one task of an agent, from its agent_start to its agent_end
-- (the clients make one per start() and send it on every event; an agent_start without one
-- opens the run its own event_id names). '' for none, so events stored before this
-- migration belong to no run.
ALTER TABLE events ADD COLUMN IF NOT EXISTS run_id String DEFAULT '' AFTER tool_name;
