-- 0024 lane learning: what a lane's budget learnt from the API's answers, and a quota waited out.
--
-- learnt_interval is the spacing between requests the lane keeps besides its declared windows (NULL: nothing
-- learnt): read from the rate-limit headers of the API's answers (learnt_from 'headers': what is left until the
-- reset, spread evenly), or cut by the API's refusals (learnt_from 'refusals': each 429 doubles it, and it
-- shrinks back towards the declared rate as time passes). learnt_at is when it was last learnt; learnt_tat its
-- theoretical arrival time, as tats[i] for a declared window. quota_until holds the lane until a reset far away
-- (an hourly or daily quota used up): its jobs wait with their cursors, no worker waiting with them.
-- history_tat paces history (initial slices, re-syncs) to its share of the budget while recurring work of the
-- lane is due. Adding columns without defaults rewrites nothing.
ALTER TABLE {schema}.lane_budgets
    ADD COLUMN learnt_interval interval,
    ADD COLUMN learnt_from text,
    ADD COLUMN learnt_at timestamptz,
    ADD COLUMN learnt_tat timestamptz,
    ADD COLUMN quota_until timestamptz,
    ADD COLUMN history_tat timestamptz,
    ADD CONSTRAINT lane_budgets_learnt_from_known CHECK (learnt_from IN ('headers', 'refusals'));
