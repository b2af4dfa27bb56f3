-- The demo application's own tables: connected accounts, and the orders and products synced for them.
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
    synced_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, id)
);
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
-- Connect an account (or leave a connected one as it is): the demo's four accounts are connected this way.
INSERT INTO {schema}.accounts (id, lane) VALUES (%(id)s, %(lane)s)
ON CONFLICT (id) DO NOTHING;

-- name: connected_accounts
-- The owner source: every connected account with its lane (null: its own).
SELECT id, lane FROM {schema}.accounts WHERE connected ORDER BY id;

-- name: upsert_orders
-- Store one page of orders. A page may be stored twice (a crash between this and the cursor save):
-- the upsert makes that harmless, and only rows that changed are written.
INSERT INTO {schema}.orders (account, id, placed_at, total_cents, currency, status)
SELECT %(account)s, o.id, o.placed_at, o.total_cents, o.currency, o.status
FROM unnest(%(ids)s::text[], %(placed_ats)s::timestamptz[], %(totals)s::integer[], %(currencies)s::text[],
            %(statuses)s::text[]) AS o(id, placed_at, total_cents, currency, status)
ON CONFLICT (account, id) DO UPDATE
SET placed_at = excluded.placed_at,
    total_cents = excluded.total_cents,
    currency = excluded.currency,
    status = excluded.status,
    synced_at = now()
WHERE (orders.placed_at, orders.total_cents, orders.currency, orders.status)
      IS DISTINCT FROM (excluded.placed_at, excluded.total_cents, excluded.currency, excluded.status);

-- name: upsert_products
-- Store one page of the catalogue, the same way.
INSERT INTO {schema}.products (account, id, name, price_cents)
SELECT %(account)s, p.id, p.name, p.price_cents
FROM unnest(%(ids)s::text[], %(names)s::text[], %(prices)s::integer[]) AS p(id, name, price_cents)
ON CONFLICT (account, id) DO UPDATE
SET name = excluded.name,
    price_cents = excluded.price_cents,
    synced_at = now()
WHERE (products.name, products.price_cents) IS DISTINCT FROM (excluded.name, excluded.price_cents);
