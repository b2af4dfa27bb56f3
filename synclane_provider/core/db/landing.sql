-- Landing a page of records into a user's PostgreSQL table (see landing.py).
--
-- Identifiers are composed by landing.py with psycopg.sql (the table, its columns, their types); values are
-- always parameters. Placeholders in braces are those composables.

-- name: unique_indexes
-- The table's columns, their types (without modifiers: the insert applies those) and whether a value of the type
-- is sent as text (arrays and composites: a page's column is one array, and an array of arrays would flatten),
-- and the column sets of its unique indexes that ON CONFLICT can infer (valid, whole table, plain columns).
-- Read once per destination, at its first page.
SELECT (SELECT array_agg(a.attname::text ORDER BY a.attnum)
        FROM pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
       (SELECT array_agg(format_type(a.atttypid, NULL) ORDER BY a.attnum)
        FROM pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS types,
       (SELECT array_agg(t.typcategory IN ('A', 'C') ORDER BY a.attnum)
        FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS sent_as_text,
       (SELECT coalesce(array_agg(array_to_string(ARRAY(
                   SELECT a.attname::text FROM unnest(i.indkey) AS k(n)
                   JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = k.n
                   ORDER BY a.attname), ',')), ARRAY[]::text[])
        FROM pg_index AS i
        WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
          AND i.indexprs IS NULL) AS unique_keys
FROM pg_class AS c
WHERE c.oid = to_regclass({table_name});

-- name: land_page
-- A page into the table, in one statement and one round trip. Each column comes as one array parameter, sent in
-- binary (each cast to the column's type's array, or, for a column sent as text, to text[] and each value cast
-- in the page's select), so a value as an API gives it (a time as an ISO string) lands as the column's type.
-- Each row of the page looks up the stored row of its key once (one index probe: the LIMIT keeps the lookup a
-- per-row probe, never a hash of the whole table). A new key is inserted with a plain insert; a stored row is
-- offered to ON CONFLICT … DO UPDATE only when the guard allows it: not older than the stored row by the
-- version column, and (when content is compared) different from it. A row the guard refuses is not touched at
-- all: no tuple, no row lock, nothing in the WAL, no trigger. The ON CONFLICT's WHERE repeats the guard against
-- the row as it is when written (another transaction may have changed it since). A key that another
-- transaction inserts meanwhile fails the plain insert with a unique violation: the page is then landed by
-- upsert_page instead. A snapshot's page also notes its keys as seen by the job (note_seen). Every part of
-- the statement sees the table as it was before it, so the stale count is taken from the rows as they stood.
-- Safe to repeat: a page landed twice finds its rows stored and, when content is compared, writes nothing.
WITH page AS (
    SELECT page.*, stored.synclane_found, stored.synclane_stale, stored.synclane_write
    FROM (SELECT {values} FROM unnest({arrays}) AS given ({columns})) AS page
    LEFT JOIN LATERAL (
        SELECT true AS synclane_found, {stale} AS synclane_stale, {write} AS synclane_write
        FROM {table} AS target
        WHERE {match}
        LIMIT 1
    ) AS stored ON true
),
inserted AS (
    INSERT INTO {table} ({columns})
    SELECT {columns} FROM page WHERE page.synclane_found IS NULL
    RETURNING 1
),
written AS (
    INSERT INTO {table} AS target ({columns})
    SELECT {columns} FROM page WHERE page.synclane_write
    ON CONFLICT ({key}) {on_conflict}
    RETURNING (target.xmax = 0) AS inserted
){seen}
SELECT ((SELECT count(*) FROM inserted) + (SELECT count(*) FILTER (WHERE inserted) FROM written))::int AS inserted,
       (SELECT count(*) FILTER (WHERE NOT inserted) FROM written)::int AS updated,
       (SELECT count(*) FILTER (WHERE synclane_stale) FROM page)::int AS stale;

-- name: upsert_page
-- The page when land_page met a key inserted meanwhile: every row through ON CONFLICT … DO UPDATE … WHERE the
-- guard, which finds such a key whatever the statement's snapshot; stale rows are counted by one probe each.
WITH page AS (
    SELECT {values} FROM unnest({arrays}) AS given ({columns})
),
written AS (
    INSERT INTO {table} AS target ({columns})
    SELECT {columns} FROM page
    ON CONFLICT ({key}) {on_conflict}
    RETURNING (target.xmax = 0) AS inserted
){seen}
SELECT count(*) FILTER (WHERE written.inserted)::int AS inserted,
       count(*) FILTER (WHERE NOT written.inserted)::int AS updated,
       (SELECT count(*) FROM page WHERE EXISTS (SELECT FROM {table} AS target WHERE {match} AND {stale}))::int AS stale
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
-- Part of land_page for a snapshot's page: its keys, seen by the job, written in the page's statement.
,
seen AS (
    INSERT INTO {seen} (job, {key}) SELECT %(job)s, {key} FROM page
)

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
