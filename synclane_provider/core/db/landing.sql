-- Landing a page of records into a user's PostgreSQL table (see landing.py).
--
-- Identifiers are composed by landing.py with psycopg.sql (the table, its columns, the staging table's
-- name); values are always parameters or COPY data. Placeholders in braces are those composables.

-- name: unique_indexes
-- The table's columns and their types, and the column sets of its unique indexes that ON CONFLICT can infer
-- (valid, whole table, plain columns). Read once per destination, at its first page.
SELECT (SELECT array_agg(a.attname::text ORDER BY a.attnum)
        FROM pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
       (SELECT array_agg(a.atttypid::int8 ORDER BY a.attnum)
        FROM pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS types,
       (SELECT coalesce(array_agg(array_to_string(ARRAY(
                   SELECT a.attname::text FROM unnest(i.indkey) AS k(n)
                   JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = k.n
                   ORDER BY a.attname), ',')), ARRAY[]::text[])
        FROM pg_index AS i
        WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
          AND i.indexprs IS NULL) AS unique_keys
FROM pg_class AS c
WHERE c.oid = to_regclass({table_name});

-- name: create_stage
-- The page's staging table, one per destination and connection: the target's columns, no constraints, and
-- emptied at every commit, so a page that failed or was rolled back leaves nothing for the next one.
CREATE TEMPORARY TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS SELECT * FROM {table} WITH NO DATA;

-- name: copy_page
-- The page's rows into the staging table (COPY: one round trip whatever the page's size). In text: a value
-- may come as the API gave it (a time as an ISO string) and the server reads it as the column's type.
COPY {stage} ({columns}) FROM STDIN;

-- name: land_page
-- The staged page into the table, in one statement. A new key is inserted; an existing row is rewritten
-- only when the guard allows it: not older than the stored row by the version column, and (when content is
-- compared) different from it. A row the guard refuses writes no tuple at all (no dead row, no trigger, nothing
-- for replicas). Every part of the statement sees the table as it was before it, so the stale count (staged
-- rows older than the stored ones) is taken from the rows as they stood: {stale} probes the key's index once
-- per staged row (a join would be planned as a hash of the whole table, the staging table having no
-- statistics). Safe to repeat: a page landed twice finds its rows stored and, when content is compared,
-- writes nothing the second time.
WITH written AS (
    INSERT INTO {table} AS target ({columns})
    SELECT {columns} FROM {stage}
    ON CONFLICT ({key}) {on_conflict}
    RETURNING (target.xmax = 0) AS inserted
)
SELECT count(*) FILTER (WHERE written.inserted)::int AS inserted,
       count(*) FILTER (WHERE NOT written.inserted)::int AS updated,
       ({stale})::int AS stale
FROM written;

-- name: create_seen
-- Where a snapshot's pages note the keys they landed, by job, in the table's own database and schema: what
-- the snapshot saw, kept across its attempts (a failed job continues from its cursor) and committed with each
-- page, until the page that completes it deletes the rows not seen.
CREATE TABLE IF NOT EXISTS {seen} AS SELECT 0::bigint AS job, {key} FROM {table} WITH NO DATA;

-- name: index_seen
-- A job's keys found without reading the others'.
CREATE INDEX IF NOT EXISTS {seen_index} ON {seen} (job);

-- name: note_seen
-- The page's keys, seen by the snapshot job (in the page's transaction).
INSERT INTO {seen} (job, {key}) SELECT {job}, {key} FROM {stage};

-- name: unseen_counts
-- Before deleting: the keys the snapshot saw, the owner's rows it did not see, and the owner's rows (rows
-- already marked deleted count as gone).
SELECT (SELECT count(*) FROM {seen} WHERE job = {job}) AS seen,
       (SELECT count(*) FROM {table} AS t
        WHERE t.{owner_column} = {owner} AND {live}
          AND NOT EXISTS (SELECT FROM {seen} AS s WHERE s.job = {job} AND {match})) AS unseen,
       (SELECT count(*) FROM {table} AS t WHERE t.{owner_column} = {owner} AND {live}) AS stored;

-- name: delete_unseen
-- The owner's rows the completed snapshot did not see.
DELETE FROM {table} AS t
WHERE t.{owner_column} = {owner}
  AND NOT EXISTS (SELECT FROM {seen} AS s WHERE s.job = {job} AND {match});

-- name: mark_unseen
-- The same, marked deleted instead (now), once: a row already marked keeps its time.
UPDATE {table} AS t SET {deleted} = now()
WHERE t.{owner_column} = {owner} AND {live}
  AND NOT EXISTS (SELECT FROM {seen} AS s WHERE s.job = {job} AND {match});

-- name: forget_seen
-- The completed snapshot's keys, no longer needed.
DELETE FROM {seen} WHERE job = {job};
