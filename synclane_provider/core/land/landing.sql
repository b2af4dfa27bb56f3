-- Landing a page of records into a user's PostgreSQL table (see landing.py).
--
-- Identifiers are composed by page_statements.py and landing.py with psycopg.sql (the table, its columns, their
-- types); values are always parameters. Placeholders in braces are those composables.

-- name: unique_indexes
-- The table's columns, their types (without modifiers: the insert applies those), whether a value of the type
-- is sent as text (arrays and composites: a page's column is one array, and an array of arrays would flatten),
-- the type a page copied into the table sends the column's values as (text for every string type: their
-- binary form is the same),
-- the column sets of its unique indexes that ON CONFLICT can infer (valid, whole table, plain columns), and
-- of those the ones ordered as a comparison of their columns orders them (default operator classes, each
-- column's collation its type's, the index's the column's), which can find the stored keys of a page's range,
-- and the columns whose values Python compares as such an index orders them (bounded_as_sent: integers, uuids,
-- dates and times, and strings when the database's collation orders them by code point -- C, POSIX, C.UTF-8
-- or the builtin provider, in UTF8 -- as Python orders str): a page's bounds in those are taken by the client.
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
       (SELECT array_agg(CASE WHEN t.typcategory = 'S' THEN 'text'::regtype::oid ELSE t.oid END ORDER BY a.attnum)
        FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS copied_as,
       keys.unique_keys,
       keys.ordered_keys,
       (SELECT array_agg(
                   t.oid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'uuid'::regtype, 'date'::regtype,
                             'timestamp'::regtype, 'timestamptz'::regtype)
                   OR (t.oid IN ('text'::regtype, 'varchar'::regtype) AND code_points.ordered)
                   ORDER BY a.attnum)
        FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS bounded_as_sent
FROM pg_class AS c,
     -- Each unique index ON CONFLICT can infer, read once: its columns' names, sorted, joined by commas; and
     -- whether it orders its keys as comparing their columns does (every column in its default operator class
     -- and its type's collation, the index's collation the column's).
     LATERAL (
         SELECT coalesce(array_agg(idx.key), ARRAY[]::text[]) AS unique_keys,
                coalesce(array_agg(idx.key) FILTER (WHERE idx.ordered), ARRAY[]::text[]) AS ordered_keys
         FROM (
             SELECT array_to_string(ARRAY(
                        SELECT a.attname::text FROM unnest(i.indkey) AS k(n)
                        JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = k.n
                        ORDER BY a.attname), ',') AS key,
                    NOT EXISTS (
                        SELECT FROM unnest(i.indkey::int2[], i.indclass::oid[], i.indcollation::oid[])
                             AS k(n, opclass, coll)
                        JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = k.n
                        JOIN pg_type AS t ON t.oid = a.atttypid
                        JOIN pg_opclass AS o ON o.oid = k.opclass
                        WHERE NOT o.opcdefault OR k.coll <> a.attcollation OR a.attcollation <> t.typcollation
                    ) AS ordered
             FROM pg_index AS i
             WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
               AND i.indexprs IS NULL
         ) AS idx
     ) AS keys,
     -- datlocprovider is read through jsonb: a server before PostgreSQL 15 has no such column (and only libc).
     (SELECT pg_encoding_to_char(d.encoding) = 'UTF8'
             AND CASE coalesce(to_jsonb(d) ->> 'datlocprovider', 'c')
                     WHEN 'b' THEN true
                     WHEN 'c' THEN d.datcollate IN ('C', 'POSIX', 'C.UTF-8', 'C.utf8')
                     ELSE false
                 END AS ordered
      FROM pg_database AS d
      WHERE d.datname = current_database()) AS code_points
WHERE c.oid = to_regclass({table_name});

-- name: land_page
-- A page into the table, in one statement and one round trip. Each column comes as one array parameter, sent in
-- binary (each cast to the column's type's array, or, for a column sent as text, to text[] and each value cast
-- in the page's select), so a value as an API gives it (a time as an ISO string) lands as the column's type;
-- the owner column, the same in every row, comes as one value. Each row of the page looks up the stored row of
-- its key once (one index probe: the LIMIT keeps the lookup a per-row probe, never a hash of the whole table),
-- unless no stored key lies between the page's least and greatest keys (stored_in_page_range, one probe for the
-- page: a first landing of keys in order then skips a probe a row). A new key is inserted with a plain insert; a
-- stored row is offered to ON CONFLICT … DO UPDATE only when the guard allows it: not older than the stored
-- row by the version column, and (when content is compared) different from it. A row the guard refuses is not
-- touched at all: no tuple, no row lock, nothing in the WAL, no trigger. The ON CONFLICT's WHERE repeats the
-- guard against the row as it is when written (another transaction may have changed it since). A key that
-- another transaction inserts meanwhile fails the plain insert with a unique violation: the page is then
-- landed by upsert_page instead. A snapshot's page also notes its keys as seen by the job (note_seen). Every
-- part of the statement sees the table as it was before it, so the stale count is taken from the rows as they
-- stood. Safe to repeat: a page landed twice finds its rows stored and, when content is compared, writes
-- nothing.
WITH given AS (
    SELECT {values} FROM unnest({arrays}) AS given ({array_columns})
),
page AS (
    SELECT page.*, stored.synclane_found, stored.synclane_stale, stored.synclane_write
    FROM given AS page
    LEFT JOIN LATERAL (
        SELECT true AS synclane_found, {stale} AS synclane_stale, {write} AS synclane_write
        FROM {table} AS target
        WHERE {match}{probe_gate}
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

-- name: stored_in_page_range
-- Whether a stored key lies between the least and the greatest key of the page (given, whose keys have no
-- nulls), found with one descent of the key's unique index (its order is the comparison's: default operator
-- classes and collations, which landing.py checks before using this). False means no key of the page is stored.
-- In land_page it keeps the rows from a probe each; alone (page_range_stored) it lets a page be copied. The
-- bounds (lowest, highest) are the page's least and greatest keys, or, when every key column's type has min
-- and max, each column's least and greatest value: one pass over the page and no sort, and still below and
-- above every key of the page in the index's order.
SELECT coalesce((
    SELECT ROW({target_key}) <= ROW({highest})
    FROM {table} AS target
    WHERE ROW({target_key}) >= ROW({lowest})
    ORDER BY {target_key}
    LIMIT 1
), false)
FROM ({lowest_of_page}) AS lowest, ({highest_of_page}) AS highest

-- name: page_range_stored
-- Before a page of new keys is copied into the table: whether the table holds a key in the page's range
-- (stored_in_page_range) -- when it does not, no row of the page is stored and a COPY inserts them all. Only
-- the key columns are sent (the CTE given), or, when the client can take the page's bounds (see
-- bounded_as_sent in unique_indexes), only the bounds, and no CTE. Another transaction may insert one of the
-- keys before the copy: the copy then fails on the unique index, and the page is landed by land_page instead.
{given}{stored_in_page_range}

-- name: copy_page
-- A page whose keys are all new (page_range_stored), copied into the table in binary: the rows inserted as by an
-- INSERT (defaults, constraints, triggers), in batches, one WAL record per batch and heap page.
COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)

-- name: upsert_page
-- The page when land_page met a key inserted meanwhile: every row through ON CONFLICT … DO UPDATE … WHERE the
-- guard, which finds such a key whatever the statement's snapshot; stale rows are counted by one probe each.
WITH page AS (
    SELECT {values} FROM unnest({arrays}) AS given ({array_columns})
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

-- name: lock_seen
-- Held by whoever creates the table of keys seen (create_seen, index_seen) until its transaction ends: the
-- creations of several workers' first pages take turns instead of colliding in the catalogue.
SELECT pg_advisory_xact_lock(hashtextextended({name}, 0));

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
