-- The provider's service tier an llm_call ran at (batch, flex, priority ...), as the
-- provider reported it; '' when it reported none. PRICES_FILE service_tiers prices it.
ALTER TABLE events ADD COLUMN IF NOT EXISTS service_tier LowCardinality(String) DEFAULT '' AFTER unpriced_quantities;
