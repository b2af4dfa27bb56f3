-- 0017 land counts: what the job's pages did to their destination tables, row by row (see core/db/landing.py).
--
-- inserted, updated and deleted rows were written; unchanged rows equalled the stored ones and stale rows were
-- older than them, so neither was. Each cursor save and the finish that completes a job write the totals of the
-- pages committed so far, across attempts (a retry adds what its pages write to what its earlier attempts'
-- pages wrote). Rows made before this migration count from 0.
ALTER TABLE {schema}.jobs
    ADD COLUMN IF NOT EXISTS inserted_count bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS updated_count bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS unchanged_count bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS stale_count bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS deleted_count bigint NOT NULL DEFAULT 0;
