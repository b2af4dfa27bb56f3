-- 0003 named constraints: every rule on a row says what it guards, so an error names the rule broken.
--
-- A hand-written UPDATE that breaks one now fails with, e.g., "violates check constraint
-- jobs_running_means_leased" rather than "jobs_check1".

ALTER TABLE {schema}.jobs RENAME CONSTRAINT jobs_mode_check TO jobs_mode_is_known;
ALTER TABLE {schema}.jobs RENAME CONSTRAINT jobs_status_check TO jobs_status_is_known;
ALTER TABLE {schema}.jobs RENAME CONSTRAINT jobs_processed_count_check TO jobs_processed_count_not_negative;
ALTER TABLE {schema}.jobs RENAME CONSTRAINT jobs_attempt_count_check TO jobs_attempt_count_not_negative;
ALTER TABLE {schema}.jobs RENAME CONSTRAINT jobs_check TO jobs_window_starts_before_it_ends;
ALTER TABLE {schema}.jobs RENAME CONSTRAINT jobs_check1 TO jobs_running_means_leased;

COMMENT ON CONSTRAINT jobs_running_means_leased ON {schema}.jobs IS
    'A job is running exactly when a worker holds its lease (leased_by and lease_expires_at are set).';
COMMENT ON COLUMN {schema}.jobs.error IS
    'The last error of this job: kept while it waits and runs again, so the reason for a retry stays in '
    'view; cleared when the job completes.';
