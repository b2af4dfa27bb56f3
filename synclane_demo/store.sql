-- The demo application's own tables: connected accounts, and the orders and products synced for them
-- (landed by synclane_provider.core.Destination: see store.py).
--
-- {schema} is replaced by the quoted schema name; values are always parameters.

-- name: create_tables
-- The application's tables; idempotent. Accounts are what the owner source reads.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.accounts (
    id           text PRIMARY KEY,
    lane         text,
    connected    boolean     NOT NULL DEFAULT true,
    connected_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {schema}.orders (
    account     text        NOT NULL,
    id          text        NOT NULL,
    placed_at   timestamptz NOT NULL,
    total_cents integer     NOT NULL,
    currency    text        NOT NULL,
    status      text        NOT NULL,
    updated_at  timestamptz,
    synced_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, id)
);
ALTER TABLE {schema}.orders ADD COLUMN IF NOT EXISTS updated_at timestamptz;
CREATE INDEX IF NOT EXISTS orders_by_time ON {schema}.orders (account, placed_at);
CREATE TABLE IF NOT EXISTS {schema}.products (
    account     text        NOT NULL,
    id          text        NOT NULL,
    name        text        NOT NULL,
    price_cents integer     NOT NULL,
    synced_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, id)
);

-- name: connect_account
-- Connect an account (or leave a connected one as it is): the demo's five accounts are connected this way.
INSERT INTO {schema}.accounts (id, lane) VALUES (%(id)s, %(lane)s)
ON CONFLICT (id) DO NOTHING;

-- name: connected_accounts
-- The owner source: every connected account with its lane (null: its own).
SELECT id, lane FROM {schema}.accounts WHERE connected ORDER BY id;
