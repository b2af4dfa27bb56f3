-- 0018 planned rosters: what the planner last found settled of each queue's owner source, as digests, so that a
-- planning run whose owners are the ones it found settled before reads only the coverage rows short of now.
--
-- A queue's owners are cut into buckets by a checksum of their names; a bucket's digest covers its owners'
-- names, lanes and lane widths and the queue's job types, and the whole source's digest has bucket -1. A run
-- writes a bucket's digest once it has found every owner-type of the bucket with a coverage row in the lane
-- the source gives (nothing to record or move), and the whole one when every bucket matches. A bucket whose
-- digest differs (an owner connected, moved or left) has its owners compared with their coverage rows one by
-- one, as before this table; the others are covered by the read of what is short.
--
-- Deleting coverage rows (the hand-made way to make the planner forget an owner) or emptying the table forgets
-- every digest, so that the next run compares every owner again.
CREATE TABLE IF NOT EXISTS {schema}.planned_rosters (
    queue  text NOT NULL,
    bucket int  NOT NULL,
    digest text NOT NULL,
    PRIMARY KEY (queue, bucket)
);

CREATE OR REPLACE FUNCTION {schema}.forget_planned_rosters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {schema}.planned_rosters;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS coverage_deleted_forgets_rosters ON {schema}.coverage;
CREATE TRIGGER coverage_deleted_forgets_rosters
    AFTER DELETE OR TRUNCATE ON {schema}.coverage
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.forget_planned_rosters();
