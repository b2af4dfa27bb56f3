-- 0010 coverage lanes: the lane and lane width an owner's waiting jobs were last planned or moved into, kept on
-- its coverage rows, so that a planning run learns from its one read of the coverage which owners the owner
-- source has moved, and moves the jobs of those alone. Before this, every run looked at every owner's waiting
-- jobs to find the few whose lane had changed: a read that grew with the table (at 100,000 owners, seconds per
-- run) to find nothing, run after run. NULL: not recorded yet (rows made before this migration, or computed
-- from jobs inserted by hand); the next run looks at that owner's jobs once and records it.
ALTER TABLE {schema}.coverage ADD COLUMN IF NOT EXISTS lane text;

ALTER TABLE {schema}.coverage ADD COLUMN IF NOT EXISTS lane_width int;
