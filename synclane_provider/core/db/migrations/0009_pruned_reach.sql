-- 0009 pruned reach: how far the planned jobs that retention deleted reached, so that lag survives a prune.
--
-- An owner's lag is now minus the end of its newest completed window (for a snapshot, its completion). With a
-- retention shorter than the lag a check tolerates, a prune deleted the very jobs that lag is read from: an
-- owner a day and a half behind then read from the initial slices left, weeks behind. A prune now keeps the
-- newest reach among the completed planned jobs it deletes (coalesce(window_end, completed_at)), widened only,
-- beside the newest completion (last_pruned_completion, which freshness reads). Rows pruned before this
-- migration did not record it: their reach is unknown (NULL) until the next prune of that owner and type.
--
-- pruned_count (how many jobs a prune deleted per owner and type) is dropped: nothing read it, and the
-- prune's own log line and return value say how many it deleted.
ALTER TABLE {schema}.coverage ADD COLUMN IF NOT EXISTS last_pruned_reach timestamptz;

ALTER TABLE {schema}.coverage DROP COLUMN IF EXISTS pruned_count;
