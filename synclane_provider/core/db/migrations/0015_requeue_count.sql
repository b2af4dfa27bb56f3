-- 0015 requeue count: how many times a person (or the requeue DAG) gave a job fresh attempts after it had failed,
-- been deferred or abandoned. A window abandoned again after several requeues is stuck: no retry helps it, and
-- the health check says so once (see core/ops/health.py). Rows made before this migration count from 0.
ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS requeue_count int NOT NULL DEFAULT 0;
