-- 0013 paused owners: the paused owners of a queue, found without reading the owners that are not (the planner
-- looks for them on every run; paused owners are few, owners with a row may be every owner of the queue).
CREATE INDEX IF NOT EXISTS owners_paused ON {schema}.owners (queue) WHERE paused_at IS NOT NULL;
