-- 0023 lane windows: a lane's rate budget may keep several windows at once (100 per 10 s and 250,000 a day).
--
-- tats holds each window's theoretical arrival time, shortest window first, and turn_at when the last take
-- could send (see ratelimit.py and take_lane_budget); tat, which held the one window's, is now the first of
-- tats, computed from it so that a look at the table reads as before. Each row (one per lane) is rewritten once.
ALTER TABLE {schema}.lane_budgets ADD COLUMN tats timestamptz[], ADD COLUMN turn_at timestamptz;
UPDATE {schema}.lane_budgets SET tats = ARRAY[tat] WHERE tat IS NOT NULL;
ALTER TABLE {schema}.lane_budgets DROP COLUMN tat;
ALTER TABLE {schema}.lane_budgets ADD COLUMN tat timestamptz GENERATED ALWAYS AS (tats[1]) STORED;
