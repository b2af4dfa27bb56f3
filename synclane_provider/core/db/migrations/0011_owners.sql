-- 0011 owners: an owner's state, one row per queue and owner, beside the jobs that sync for it.
--
-- Until now an owner existed only through its jobs. This row says how the owner is doing as a whole and
-- whether it may run at all:
--
-- * health (healthy, degraded, failing) and consecutive_failures: how its attempts have been ending, with the
--   last error and since when it has been failing;
-- * paused_at, paused_reason, paused_by: a pause (by its handler, raising OwnerPaused, or by a person): no job
--   of a paused owner is taken until it is resumed (paused_at set back to NULL);
-- * last_clean_at: when a job of the owner last completed without a failed attempt;
-- * alerted_at, alerted_for: what the health check last alerted about this owner and when, so that it alerts
--   once per event, not on every run while it lasts.
--
-- No row means a healthy owner that is not paused: rows are written when something happens to an owner, so
-- tables made before this migration need none. The primary key is also what the take statements probe to
-- skip a paused owner's jobs (one index lookup per candidate job).
CREATE TABLE IF NOT EXISTS {schema}.owners (
    queue                text        NOT NULL,
    owner                text        NOT NULL,
    health               text        NOT NULL DEFAULT 'healthy'
                         CONSTRAINT owners_health_is_known CHECK (health IN ('healthy', 'degraded', 'failing')),
    consecutive_failures integer     NOT NULL DEFAULT 0,
    last_error           text,
    failing_since        timestamptz,
    paused_at            timestamptz,
    paused_reason        text,
    paused_by            text,
    last_clean_at        timestamptz,
    alerted_at           timestamptz,
    alerted_for          text,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, owner)
);
