-- What was billed: every quantity of an llm_call, by the price library's names
-- (input_tokens, cache_write_1h_tokens, input_audio_tokens, web_searches, ...), and those the
-- price data had no price for, so a cost can be checked against its invoice.
ALTER TABLE events ADD COLUMN IF NOT EXISTS quantities Map(LowCardinality(String), UInt64) AFTER cache_write_tokens;
ALTER TABLE events ADD COLUMN IF NOT EXISTS unpriced_quantities Array(LowCardinality(String)) AFTER quantities;
