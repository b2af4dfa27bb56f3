-- What the operator's views read (the Airflow page and `airflow synclane`), one statement per view.
--
-- Every statement reads from indexes and a bounded number of rows, whatever the size of the history:
-- lanes and owners are walked one index probe each (a loose index scan), a page at a time, from after the
-- last one shown (%(after)s). {schema} and %(now)s as in queries.sql.

-- name: queue_counts
-- How many jobs of a queue are in each status, counted up to %(cap)s + 1 each (jobs_by_status, from the index
-- alone): a count that reaches past the cap says "at least", so the cost stays bounded however long the
-- history grows. One subquery per status, each status a constant, so that each is planned for how common
-- its status is (a rare one from the index, not by reading the table until the limit).
SELECT (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = %(queue)s
                              AND j.status = 'pending' LIMIT %(cap)s + 1) AS counted)::bigint AS pending,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = %(queue)s
                              AND j.status = 'running' LIMIT %(cap)s + 1) AS counted)::bigint AS running,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = %(queue)s
                              AND j.status = 'completed' LIMIT %(cap)s + 1) AS counted)::bigint AS completed,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = %(queue)s
                              AND j.status = 'failed' LIMIT %(cap)s + 1) AS counted)::bigint AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = %(queue)s
                              AND j.status = 'deferred' LIMIT %(cap)s + 1) AS counted)::bigint AS deferred,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = %(queue)s
                              AND j.status = 'abandoned' LIMIT %(cap)s + 1) AS counted)::bigint AS abandoned;

-- name: queue_recent
-- A queue's last hour and its backlog: jobs and records completed in the hour before now, since when the
-- longest-due waiting job has been due (NULL when nothing waiting is due), leaving out the work a pause holds
-- (an owner paused, or a lane throttled until later: not overdue, held), and how many owners are paused.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
SELECT (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.status = 'completed'
          AND j.completed_at > clock.now - interval '1 hour')::bigint AS done_last_hour,
       (SELECT coalesce(sum(j.processed_count), 0) FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.status = 'completed'
          AND j.completed_at > clock.now - interval '1 hour')::bigint AS records_last_hour,
       (SELECT min(j.next_run_at) FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred')
          AND j.next_run_at <= clock.now
          AND {owner_of_j_not_paused}
          AND NOT EXISTS (
              SELECT 1 FROM {schema}.lane_budgets AS b
              WHERE b.queue = j.queue AND b.lane = j.lane AND b.throttled_until > clock.now
          )) AS due_since,
       (SELECT count(*) FROM {schema}.owners AS o
        WHERE o.queue = %(queue)s AND o.paused_at IS NOT NULL)::bigint AS owners_paused,
       clock.now
FROM clock;

-- name: lanes
-- One page of a queue's busy lanes (a job running or waiting), by name after %(after)s: the running jobs
-- (a lane k wide runs up to k, one row each, in slot order; one row with no job when none runs), how many
-- wait and how many of them a paused owner holds, when the next one not held is due, until when a throttle
-- holds the whole lane (a server's named wait), and the latest error among the waiting ones.
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
),
waiting_lanes AS (
    (
        SELECT j.lane FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred')
          AND j.lane > coalesce(%(after)s::text, '')
        ORDER BY j.lane LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT j.lane FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred') AND j.lane > w.lane
        ORDER BY j.lane LIMIT 1
    )
    FROM waiting_lanes AS w WHERE w.lane IS NOT NULL
),
page AS (
    SELECT lane FROM (
        (SELECT lane FROM waiting_lanes WHERE lane IS NOT NULL LIMIT %(limit)s)
        UNION
        (
            SELECT j.lane FROM {schema}.jobs AS j
            WHERE j.queue = %(queue)s AND j.status = 'running' AND j.lane > coalesce(%(after)s::text, '')
            ORDER BY j.lane LIMIT %(limit)s
        )
    ) AS busy
    ORDER BY lane
    LIMIT %(limit)s
)
SELECT page.lane,
       r.id AS running_id, r.owner AS running_owner, r.type AS running_type, r.mode AS running_mode,
       r.window_start AS running_window_start, r.window_end AS running_window_end, r.cursor AS running_cursor,
       r.processed_count AS running_records, r.attempt_count AS running_attempt, r.leased_by AS running_worker,
       r.started_at AS running_started_at, clock.now - r.heartbeat_at AS heartbeat_age,
       r.lease_expires_at AS running_lease_expires_at, r.lane_slot AS running_slot, r.lane_width AS running_width,
       w.waiting, w.held, w.next_due, throttle.throttled_until, throttle.quota_until, throttle.learnt_interval,
       throttle.learnt_from, throttle.learnt_at, e.id AS error_job_id, e.error AS last_error,
       e.status AS error_status, clock.now
FROM page
CROSS JOIN clock
LEFT JOIN {schema}.jobs AS r ON r.queue = %(queue)s AND r.lane = page.lane AND r.status = 'running'
CROSS JOIN LATERAL (
    SELECT count(*)::bigint AS waiting, count(*) FILTER (WHERE NOT {owner_of_j_not_paused})::bigint AS held,
           min(j.next_run_at) FILTER (WHERE {owner_of_j_not_paused}) AS next_due
    FROM {schema}.jobs AS j
    WHERE j.queue = %(queue)s AND j.lane = page.lane AND j.status IN ('pending', 'failed', 'deferred')
) AS w
LEFT JOIN LATERAL (
    SELECT CASE WHEN b.throttled_until > clock.now THEN b.throttled_until END AS throttled_until,
           CASE WHEN b.quota_until > clock.now THEN b.quota_until END AS quota_until,
           b.learnt_interval, b.learnt_from, b.learnt_at
    FROM {schema}.lane_budgets AS b
    WHERE b.queue = %(queue)s AND b.lane = page.lane
) AS throttle ON true
LEFT JOIN LATERAL (
    SELECT j.id, j.error, j.status
    FROM {schema}.jobs AS j
    WHERE j.queue = %(queue)s AND j.lane = page.lane AND j.status IN ('pending', 'failed', 'deferred')
      AND j.error IS NOT NULL
    ORDER BY j.id DESC
    LIMIT 1
) AS e ON true
ORDER BY page.lane, r.lane_slot;

-- name: owners
-- One page of a queue's owners, by name after %(after)s (only %(owner)s when given; with %(troubled)s only
-- owners with deferred or abandoned jobs, or paused, degraded or failing ones: a job waiting to retry is routine
-- until its attempts are spent): its health, pause and records (all its work, tallied on its row in the owners
-- table, one probe of its key), the initial load's slices and records, how far its data
-- reaches per declared type, %(types)s, by queries.sql's rule (fresh_until_of_o_t: planned jobs only, and what
-- retention deleted; the owner's freshness is its stalest type), and its troubled jobs with the latest error.
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
),
all_owners AS (
    (
        SELECT j.owner FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.owner > coalesce(%(after)s::text, '')
        ORDER BY j.owner LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT j.owner FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.owner > o.owner
        ORDER BY j.owner LIMIT 1
    )
    FROM all_owners AS o WHERE o.owner IS NOT NULL
),
page AS (
    -- the owners with jobs, and those with only a row of their own (paused, say, before their first plan)
    SELECT owner FROM (
        (
            SELECT owner FROM all_owners
            WHERE owner IS NOT NULL AND %(owner)s::text IS NULL AND NOT %(troubled)s
            LIMIT %(limit)s
        )
        UNION
        (
            SELECT o.owner FROM {schema}.owners AS o
            WHERE %(owner)s::text IS NULL AND NOT %(troubled)s
              AND o.queue = %(queue)s AND o.owner > coalesce(%(after)s::text, '')
            ORDER BY o.owner
            LIMIT %(limit)s
        )
    ) AS known
    ORDER BY owner
    LIMIT %(limit)s
),
troubled_page AS (
    SELECT owner FROM (
        SELECT j.owner FROM {schema}.jobs AS j
        WHERE %(troubled)s AND %(owner)s::text IS NULL
          AND j.queue = %(queue)s AND j.status IN ('deferred', 'abandoned')
          AND j.owner > coalesce(%(after)s::text, '')
        UNION
        SELECT o.owner FROM {schema}.owners AS o
        WHERE %(troubled)s AND %(owner)s::text IS NULL
          AND o.queue = %(queue)s AND (o.paused_at IS NOT NULL OR o.health <> 'healthy')
          AND o.owner > coalesce(%(after)s::text, '')
    ) AS troubled
    ORDER BY owner
    LIMIT %(limit)s
),
one_owner AS (
    SELECT %(owner)s::text AS owner
    WHERE EXISTS (SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = %(queue)s AND j.owner = %(owner)s)
       OR EXISTS (SELECT 1 FROM {schema}.owners AS o WHERE o.queue = %(queue)s AND o.owner = %(owner)s)
),
owners AS (
    SELECT owner FROM page UNION ALL SELECT owner FROM troubled_page UNION ALL SELECT owner FROM one_owner
)
SELECT owners.owner,
       i.initial_total, i.initial_completed, i.initial_abandoned, i.initial_running, i.initial_records,
       f.fresh_until, f.fresh_type, clock.now - f.fresh_until AS lag,
       t.retrying, t.deferred, t.abandoned, e.id AS error_job_id, e.type AS error_type, e.status AS error_status,
       e.error AS last_error, coalesce(state.records, 0) AS records,
       coalesce(state.health, 'healthy') AS health, coalesce(state.consecutive_failures, 0) AS consecutive_failures,
       state.paused_at, state.paused_reason, state.paused_by,
       clock.now
FROM owners
CROSS JOIN clock
LEFT JOIN {schema}.owners AS state ON state.queue = %(queue)s AND state.owner = owners.owner
CROSS JOIN LATERAL (
    SELECT count(*)::bigint AS initial_total,
           count(*) FILTER (WHERE j.status = 'completed')::bigint AS initial_completed,
           count(*) FILTER (WHERE j.status = 'abandoned')::bigint AS initial_abandoned,
           count(*) FILTER (WHERE j.status = 'running')::bigint AS initial_running,
           coalesce(sum(j.processed_count), 0)::bigint AS initial_records
    FROM {schema}.jobs AS j
    WHERE j.queue = %(queue)s AND j.owner = owners.owner AND j.mode = 'initial'
) AS i
LEFT JOIN LATERAL (
    -- The stalest type (that has completed anything), and how far it reaches.
    SELECT fresh.fresh_until, t.type AS fresh_type
    FROM (SELECT owners.owner) AS o
    CROSS JOIN unnest(%(types)s::text[]) AS t(type)
    {fresh_until_of_o_t}
    WHERE fresh.fresh_until IS NOT NULL
    ORDER BY fresh.fresh_until, t.type
    LIMIT 1
) AS f ON true
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.status = 'failed')::bigint AS retrying,
           count(*) FILTER (WHERE j.status = 'deferred')::bigint AS deferred,
           count(*) FILTER (WHERE j.status = 'abandoned')::bigint AS abandoned
    FROM {schema}.jobs AS j
    WHERE j.queue = %(queue)s AND j.owner = owners.owner AND j.status IN ('failed', 'deferred', 'abandoned')
) AS t
LEFT JOIN LATERAL (
    SELECT j.id, j.type, j.status, j.error
    FROM {schema}.jobs AS j
    WHERE j.queue = %(queue)s AND j.owner = owners.owner AND j.status IN ('failed', 'deferred', 'abandoned')
      AND j.error IS NOT NULL
    ORDER BY j.id DESC
    LIMIT 1
) AS e ON true
ORDER BY owners.owner;

-- name: holds
-- Which of the jobs %(ids)s wait held by a pause, and by which: their owner paused, their lane on quota until a
-- reset far away (lane_budgets.quota_until), or throttled until a time to come (a server's named wait,
-- lane_budgets.throttled_until). The jobs view says so instead of showing them overdue. One probe of the owners
-- key and of the lane budget key per job.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
SELECT j.id, NOT {owner_of_j_not_paused} AS owner_paused,
       CASE WHEN b.throttled_until > clock.now THEN b.throttled_until END AS throttled_until,
       CASE WHEN b.quota_until > clock.now THEN b.quota_until END AS quota_until
FROM {schema}.jobs AS j
CROSS JOIN clock
LEFT JOIN {schema}.lane_budgets AS b ON b.queue = j.queue AND b.lane = j.lane
                                    AND (b.throttled_until > clock.now OR b.quota_until > clock.now)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('pending', 'failed', 'deferred')
  AND (b.lane IS NOT NULL OR NOT {owner_of_j_not_paused});
