-- 0007 monitor indexes: what the operator's views (the Airflow page, `airflow synclane`) read, from indexes.
--
-- The indexes cover only columns a job's status change already rewrites (status, completed_at) or
-- that never change after insert (owner, type; lane only when its owner moves), so a cursor save or a
-- heartbeat stays a HOT update.

-- Jobs of one status, newest first: the count per status, the jobs listing filtered by status, and the
-- owners with failed, deferred or abandoned jobs, without reading the completed history.
CREATE INDEX IF NOT EXISTS jobs_by_status
    ON {schema}.jobs (queue, status, id) INCLUDE (owner, type, lane);

-- Jobs completed lately: "done in the last hour" reads only the last hour.
CREATE INDEX IF NOT EXISTS jobs_completed_recently
    ON {schema}.jobs (queue, completed_at)
    WHERE status = 'completed';

-- Jobs enqueued by hand (a few among millions): listing them must not walk the whole history. The mode
-- never changes after insert.
CREATE INDEX IF NOT EXISTS jobs_manual
    ON {schema}.jobs (queue, id)
    WHERE mode = 'manual';
