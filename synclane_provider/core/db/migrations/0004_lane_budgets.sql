-- 0004 lane budgets: one row per lane that has a rate budget or has been throttled.
--
-- tat is the lane's theoretical arrival time (GCRA, see ratelimit.py): the instant by which every unit of
-- its rate budget taken so far is paid for. A worker takes units before each page with one
-- INSERT ... ON CONFLICT DO UPDATE that moves tat forward and returns how long to wait; no lock is held
-- while it waits. paused_until is the end of the last wait a server named (a 429's Retry-After): no job of
-- the lane starts a page before it. Rows are small and few (one per lane); no index besides the key.

CREATE TABLE IF NOT EXISTS {schema}.lane_budgets (
    queue        text        NOT NULL,
    lane         text        NOT NULL,
    tat          timestamptz,
    paused_until timestamptz,
    PRIMARY KEY (queue, lane)
);
