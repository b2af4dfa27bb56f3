-- 0020 announcements: how far each queue's completed work has been announced to Airflow as asset events.
--
-- The planning DAG's assets task announces, every run, the jobs completed since the queue's mark and moves the
-- mark, so that downstream DAGs learn of new data within a run of the planning DAG however long a worker slot
-- runs, and each completion is announced once whichever task announces it. One row per queue; a person may
-- move the mark back to announce a span again.
CREATE TABLE IF NOT EXISTS {schema}.announcements (
    queue            text        NOT NULL PRIMARY KEY,
    announced_until  timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
