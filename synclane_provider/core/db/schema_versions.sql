-- The statements that read and record a schema's version (schema.py runs them; the migrations themselves
-- are the numbered files in migrations/).
--
-- {schema} is replaced by the quoted schema name; %(schema_name)s is the same name as a value, for the
-- catalog. Reading needs no right beyond USAGE on the schema and SELECT on schema_migrations, so a role
-- with data rights only can start against an up-to-date schema.

-- name: schema_objects
-- The tables and indexes in the schema, by name: whether the jobs table and the version table exist, and
-- which indexes are missing. A catalog read: nothing is locked, nothing needs a right.
SELECT c.relname::text AS name, CASE WHEN c.relkind IN ('i', 'I') THEN 'index' ELSE 'table' END AS kind
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema_name)s
  AND c.relkind IN ('r', 'p', 'i', 'I');

-- name: applied_migrations
-- The migrations the schema has had, in order.
SELECT version, name, applied_at
FROM {schema}.schema_migrations
ORDER BY version;

-- name: lock_schema
-- Serialises every change to one schema's tables (a migration, an index re-created) across processes until
-- the transaction ends; whoever waited reads the version again before changing anything. Also takes the
-- lock 0.1.0 held around its schema script, so a 0.1.0 process starting during a rolling upgrade waits too.
SELECT pg_advisory_xact_lock(hashtext('synclane.create_schema')),
       pg_advisory_xact_lock(hashtext('synclane.schema'), hashtext(%(schema_name)s));

-- name: create_version_table
-- Where the applied migrations are recorded: created in the transaction of the first migration applied.
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: record_migration
-- One migration applied, in the same transaction as the migration itself: a migration applied twice fails
-- here and is rolled back whole.
INSERT INTO {schema}.schema_migrations (version, name)
VALUES (%(version)s, %(name)s);
