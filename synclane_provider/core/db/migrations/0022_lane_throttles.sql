-- 0022 lane throttles: lane_budgets.paused_until is named throttled_until.
--
-- A lane is throttled (a server named a wait: a 429's Retry-After holds every job of the lane until it ends);
-- an owner is paused (by a person or its handler, until resumed). The column said "paused" for the first, the
-- owners table says it for the second: one word now means one thing in the tables as in the page and the docs.
-- Renaming a column takes a brief ACCESS EXCLUSIVE lock on lane_budgets (a few rows, one per lane) and rewrites
-- nothing. Workers of the release before this one read the old name: stop them before upgrading.
ALTER TABLE {schema}.lane_budgets RENAME COLUMN paused_until TO throttled_until;
