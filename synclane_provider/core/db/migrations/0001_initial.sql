-- 0001 initial: the jobs table and its indexes, as released in 0.1.0.
--
-- Released: never edit this file; a change to the schema is a new migration with the next number.
-- Every statement is idempotent, so applying it to a table made by 0.1.0 (which recorded no version)
-- changes nothing but the version it records.

CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {schema}.jobs (
    id               bigserial PRIMARY KEY,
    queue            text        NOT NULL,
    owner            text        NOT NULL,
    lane             text        NOT NULL,
    type             text        NOT NULL,
    mode             text        NOT NULL CHECK (mode IN ('initial', 'recurring', 'manual')),
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'completed', 'failed', 'deferred', 'abandoned')),
    priority         integer     NOT NULL DEFAULT 0,
    window_start     timestamptz,
    window_end       timestamptz,
    dedup_key        text        NOT NULL,
    cursor           text,
    processed_count  bigint      NOT NULL DEFAULT 0 CHECK (processed_count >= 0),
    attempt_count    integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    error            text,
    next_run_at      timestamptz NOT NULL DEFAULT now(),
    leased_by        text,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    heartbeat_at     timestamptz,
    completed_at     timestamptz,
    CHECK (window_start IS NULL OR window_end IS NULL OR window_start < window_end),
    CHECK ((status = 'running') = (leased_by IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- Guarantee 1: planning is repeatable; concurrent planners create each job once.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_planned_once
    ON {schema}.jobs (queue, owner, type, dedup_key);

-- Guarantee 2: a lane runs one job at a time, across every process sharing the table.
-- Also how running rows (and expired leases) are found without indexing lease_expires_at,
-- which keeps cursor saves and heartbeats HOT updates.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_one_running_per_lane
    ON {schema}.jobs (queue, lane) WHERE status = 'running';

-- The take: the next waiting job in declared type order, newest window first.
CREATE INDEX IF NOT EXISTS jobs_waiting_in_order
    ON {schema}.jobs (queue, priority, window_end DESC NULLS LAST, id)
    WHERE status IN ('pending', 'failed', 'deferred');

-- Walking lanes that have waiting work, the head of one lane, and whether a
-- deferred job's lane is otherwise idle.
CREATE INDEX IF NOT EXISTS jobs_waiting_by_lane
    ON {schema}.jobs (queue, lane, priority, window_end DESC NULLS LAST, id)
    WHERE status IN ('pending', 'failed', 'deferred');

-- An owner's jobs: operations and sensors (by status, initial-load progress), and the planner's read of
-- what exists, answered from the index alone. Only columns that never change after insert are included,
-- so cursor saves and heartbeats stay HOT updates.
CREATE INDEX IF NOT EXISTS jobs_by_owner
    ON {schema}.jobs (queue, owner, type, status) INCLUDE (mode, window_start, window_end, created_at);

-- When the next waiting job becomes due: what an idle worker's trigger sleeps until.
CREATE INDEX IF NOT EXISTS jobs_waiting_by_time
    ON {schema}.jobs (queue, next_run_at)
    WHERE status IN ('pending', 'failed', 'deferred');
