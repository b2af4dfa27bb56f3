-- 0005 lane width: a lane may run up to k jobs at once (an API that allows k concurrent requests per account).
--
-- Each job carries its lane's width (lane_width, copied from the owner source when the job is planned or
-- enqueued, and when the planner moves an owner's waiting jobs, exactly as the lane itself is), and a running
-- job holds one numbered slot of its lane (lane_slot, 0 … lane_width - 1, chosen by the take). The guarantee is
-- the unique index over running rows' (queue, lane, lane_slot): at most lane_width jobs of a lane run at once,
-- enforced by the database and never by a check-then-act. With width 1 every running job holds slot 0, which
-- is exactly the index it replaces (one running job per lane).
--
-- lane_slot is NOT NULL DEFAULT 0, and only written by a take: a worker of the previous release, still running
-- during a rolling upgrade, takes jobs without choosing a slot, so they run in slot 0, still one at a time in
-- a lane of width 1. Neither column is touched by cursor saves or heartbeats, which stay HOT updates.

ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS lane_width integer NOT NULL DEFAULT 1
    CONSTRAINT jobs_lane_width_at_least_one CHECK (lane_width >= 1);
ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS lane_slot integer NOT NULL DEFAULT 0
    CONSTRAINT jobs_lane_slot_not_negative CHECK (lane_slot >= 0);

-- A running job's slot is one of its lane's: a width lowered since the job was last run cannot leave a slot
-- outside the lane (the take chooses again; only a running row is checked, since only it holds its slot).
ALTER TABLE {schema}.jobs DROP CONSTRAINT IF EXISTS jobs_running_slot_in_lane;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_running_slot_in_lane
    CHECK (status <> 'running' OR lane_slot < lane_width);

-- Guarantee 2, k wide: at most lane_width running jobs per lane, across every process sharing the table.
-- Also how running rows (and expired leases) are found, as the index it replaces was.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_one_running_per_lane_slot
    ON {schema}.jobs (queue, lane, lane_slot) WHERE status = 'running';

DROP INDEX IF EXISTS {schema}.jobs_one_running_per_lane;
