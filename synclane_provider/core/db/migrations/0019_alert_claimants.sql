-- 0019 alert claimants: which health check claimed the owner's last alert (alerted_by), so that the same check
-- run again reports it again. Airflow can run a check's task a second time after the first try ended (its end
-- not yet recorded when the scheduler restarted, say); the first try's claim would otherwise leave the second
-- with nothing to report, and the run would end green with the alert never raised. Rows made before this
-- migration were claimed by no named check.
ALTER TABLE {schema}.owners ADD COLUMN IF NOT EXISTS alerted_by text;
