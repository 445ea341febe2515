-- API keys, stored only as SHA-256 hashes of the secret. Revocation writes a newer row.
CREATE TABLE IF NOT EXISTS api_keys
(
    key_id      String,
    user_id     String,
    name        String,
    key_hash    String,
    rate_limit  Nullable(UInt32),
    created_at  DateTime64(3, 'UTC'),
    revoked_at  Nullable(DateTime64(3, 'UTC')),
    version     UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY key_id;
