-- 0002 stop reason: a running job can be asked to stop after its current page.
--
-- Set by a cancel while the job runs (e.g. the account was disconnected); the worker holding the job
-- reads it with every cursor save and then ends the job abandoned, with this text as its error. Not
-- indexed: cursor saves return it and stay HOT updates.

ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS stop_reason text;
