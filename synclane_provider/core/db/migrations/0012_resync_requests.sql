-- 0012 resync requests: a range synced again is one request, recorded with who asked, why and when, and its
-- jobs carry the request's key.
--
-- A request's jobs are manual jobs (the planner, lag and initial-load progress leave manual jobs out already)
-- whose request_key names the request; freshness leaves them out too, so a range fetched again never reads as
-- data brought up to date. One row per queue and key: the key makes a request idempotent (a second call with
-- it inserts no row, hence no jobs). owners is NULL for a request of every owner the source listed.
CREATE TABLE IF NOT EXISTS {schema}.resync_requests (
    queue          text        NOT NULL,
    key            text        NOT NULL,
    type           text        NOT NULL,
    window_start   timestamptz NOT NULL,
    window_end     timestamptz NOT NULL,
    owners         text[],
    reason         text        NOT NULL,
    requested_by   text,
    requested_at   timestamptz NOT NULL,
    jobs           int         NOT NULL,
    cancelled_at   timestamptz,
    cancelled_by   text,
    PRIMARY KEY (queue, key),
    CONSTRAINT resync_requests_window_is_ordered CHECK (window_start < window_end)
);

ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS request_key text;

-- A request's jobs (progress, cancel, requeue of its failures), among all the others.
CREATE INDEX IF NOT EXISTS jobs_by_request
    ON {schema}.jobs (queue, request_key)
    WHERE request_key IS NOT NULL;
