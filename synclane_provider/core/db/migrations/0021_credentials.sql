-- 0021 credentials: each owner's credentials -- an API key, or an OAuth access token with its refresh token and
-- expiry -- kept by SyncLane rather than by each handler, so that one refresh serves every process and a rotated
-- refresh token is never lost.
--
-- sealed is the credential encrypted by the engine (Fernet, with the key from Airflow's configuration) before it
-- reaches the table: the table never holds a clear value, and nothing reads one back but the engine with the key.
-- expires_at is when the access token stops working (NULL: an API key, or an expiry the provider did not say);
-- refreshed_at when the engine last refreshed it. needs_reconnecting_at is set when the provider refused the
-- grant itself (invalid_grant): only new credentials from a person help, and setting them clears it.
CREATE TABLE IF NOT EXISTS {schema}.credentials (
    queue                     text        NOT NULL,
    owner                     text        NOT NULL,
    kind                      text        NOT NULL CONSTRAINT credentials_kind_is_known CHECK (kind IN ('api_key', 'oauth')),
    sealed                    text        NOT NULL,
    expires_at                timestamptz,
    refreshed_at              timestamptz,
    needs_reconnecting_at     timestamptz,
    needs_reconnecting_reason text,
    updated_at                timestamptz NOT NULL,
    PRIMARY KEY (queue, owner),
    CONSTRAINT credentials_reconnecting_says_why
        CHECK ((needs_reconnecting_at IS NULL) = (needs_reconnecting_reason IS NULL))
);
