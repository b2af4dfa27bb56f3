-- For tests only: a later migration that adds a partial index (not idempotent either) and counts its run.
CREATE INDEX jobs_by_probe ON {schema}.jobs (probe) WHERE probe IS NOT NULL;

INSERT INTO {schema}.probe_runs (name) VALUES ('probe_index');
