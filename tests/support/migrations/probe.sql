-- For tests only: a migration after the shipped ones. Not idempotent (a second run fails: the column
-- exists), and it counts its runs, so a migration applied twice cannot go unnoticed.
ALTER TABLE {schema}.jobs ADD COLUMN probe integer;

CREATE TABLE {schema}.probe_runs (
    name text NOT NULL,
    backend integer NOT NULL DEFAULT pg_backend_pid()
);

INSERT INTO {schema}.probe_runs (name) VALUES ('probe');
