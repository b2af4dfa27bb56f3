-- 0014 owners_in_trouble: the planner's look at the owners whose period it stretches.
--
-- Every planning run reads the owners of its queue that are degraded or failing (their recurring period is
-- stretched, see core/declare/backoff.py). Once every owner has a row (the finish of any attempt writes it),
-- reading them by the primary key would read every owner of the queue every minute; this partial index holds
-- only the few in trouble.
CREATE INDEX IF NOT EXISTS owners_in_trouble ON {schema}.owners (queue, owner) WHERE health <> 'healthy';
