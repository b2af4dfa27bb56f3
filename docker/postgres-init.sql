-- Runs once, when the PostgreSQL container is first created: a database for Airflow's own metadata,
-- next to the "synclane" database that holds SyncLane's jobs table and the demo's tables.
CREATE DATABASE synclane_airflow;
