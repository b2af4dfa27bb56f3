-- 0008 freshness index: how far an owner's data reaches, per job type, read with one index probe.
--
-- Freshness is the newest completed window of an owner's type (for a snapshot, which has no window, when it
-- completed). Read as max() over the owner's completed jobs, it cost every one of them: with 5-minute jobs
-- kept 30 days that is 8,640 rows per owner and type, for each owner on a page of the operator's views and
-- for every listed owner in each health check and planning run's gauges. Ordered by that reach, the newest
-- is the first entry of the owner-type's range: the statements probe it with ORDER BY … DESC LIMIT 1.
--
-- The key is the owner, type and window (never changed after insert) and columns a completion writes anyway
-- (status, completed_at): a cursor save or a heartbeat stays a HOT update.
CREATE INDEX IF NOT EXISTS jobs_completed_reach
    ON {schema}.jobs (queue, owner, type, (coalesce(window_end, completed_at)))
    WHERE status = 'completed';
