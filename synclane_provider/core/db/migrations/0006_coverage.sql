-- 0006 coverage: what the planner knows about each owner's coverage, kept apart from the jobs that made it,
-- so that retention can delete old jobs without the planner planning their windows again.
--
-- One row per queue, owner and job type that has planned (initial or recurring) jobs: the same aggregates
-- the planner used to compute from every job the owner ever had (oldest initial slice, newest window end,
-- first and last creation), kept up to date by the planner's insert in the same statement, and only ever
-- widened (a merge of least/greatest), so merging any jobs into it again changes nothing. Pruning adds the
-- jobs it deletes (pruned_count, last_pruned_completion: what freshness needs of them). Hand-made changes:
-- delete an owner's row here together with its jobs to make the planner forget them.

CREATE TABLE IF NOT EXISTS {schema}.coverage (
    queue                  text        NOT NULL,
    owner                  text        NOT NULL,
    type                   text        NOT NULL,
    has_initial            boolean     NOT NULL DEFAULT false,
    initial_start          timestamptz,
    covered_until          timestamptz,
    first_created_at       timestamptz,
    last_created_at        timestamptz,
    pruned_count           bigint      NOT NULL DEFAULT 0
                           CONSTRAINT coverage_pruned_count_not_negative CHECK (pruned_count >= 0),
    last_pruned_completion timestamptz,
    PRIMARY KEY (queue, owner, type)
);

-- Every table made before this migration: its coverage, read once from the jobs.
INSERT INTO {schema}.coverage (queue, owner, type, has_initial, initial_start, covered_until, first_created_at,
                               last_created_at)
SELECT queue, owner, type,
       bool_or(mode = 'initial'),
       min(window_start) FILTER (WHERE mode = 'initial'),
       max(window_end),
       min(created_at),
       max(created_at)
FROM {schema}.jobs
WHERE mode <> 'manual'
GROUP BY queue, owner, type
ON CONFLICT (queue, owner, type) DO NOTHING;

-- Retention: a queue's completed recurring and manual jobs, oldest completion first, found without reading
-- the rest of the history. Written once, when a job completes (its status changes then anyway).
CREATE INDEX IF NOT EXISTS jobs_completed_by_age
    ON {schema}.jobs (queue, completed_at)
    WHERE status = 'completed' AND mode <> 'initial';

-- Retention: cancelled jobs are abandoned ones; abandoned jobs are few (they wait for a person).
CREATE INDEX IF NOT EXISTS jobs_abandoned
    ON {schema}.jobs (queue, id)
    WHERE status = 'abandoned';

-- An owner's initial load (progress, the initial-load sensor): its initial jobs alone, however many
-- recurring jobs the owner has had since.
CREATE INDEX IF NOT EXISTS jobs_initial_by_owner
    ON {schema}.jobs (queue, owner, type)
    WHERE mode = 'initial';
