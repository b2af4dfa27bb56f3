-- Every statement the engine runs, one per name. Each returns rows (RETURNING or SELECT).
--
-- {schema} is replaced by the quoted schema name (psycopg.sql.Identifier);
-- values are always parameters. %(now)s is the caller's clock: NULL means the
-- database's own time, a value pins it (tests do this). Statements that must
-- be atomic are one statement.

-- fragment: lanes_with_waiting_work
-- The CTE ``lanes``: each lane of the queue with waiting work (pending, failed or deferred), walked through
-- the lane index one lane at a time (a loose index scan: one probe a lane, however many jobs wait in it), and
-- a last row with lane NULL. Used by finish_and_take, take_many and worker_wakeup.
lanes AS (
    (
        SELECT j.lane FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred')
        ORDER BY j.lane LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT j.lane FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred') AND j.lane > lanes.lane
        ORDER BY j.lane LIMIT 1
    )
    FROM lanes WHERE lanes.lane IS NOT NULL
)

-- fragment: free_slots_of_j
-- The slots of job j's lane that no running job holds (a lane k wide has slots 0 to k-1), lowest first, as
-- free.lane_slot with free.place, its place among them (from 1); no row when every slot is held. The job the
-- statement is finishing (CTE ``finished``) holds none any more. The i-th job of the lane's line goes into its i-th
-- free slot (see finish_and_take), so that takes of several jobs of one wide lane at once each ask for a slot of
-- their own. It depends on j's lane alone: the look among the first due jobs checks each lane once (memoized by
-- lane), however many of those jobs are in it. Used twice by finish_and_take, and twice by take_many.
CROSS JOIN LATERAL (
    SELECT slot.n AS lane_slot, row_number() OVER (ORDER BY slot.n) AS place
    FROM generate_series(0, j.lane_width - 1) AS slot(n)
    WHERE NOT EXISTS (
        SELECT 1 FROM {schema}.jobs AS busy
        WHERE busy.queue = j.queue AND busy.lane = j.lane AND busy.status = 'running'
          AND busy.lane_slot = slot.n
          AND busy.id NOT IN (SELECT id FROM finished)
    )
) AS free

-- fragment: coverage_merged
-- A coverage row (alias c) written again for its owner and type: it keeps what it covered and takes in what the
-- new jobs cover (the oldest start, the newest end). Its lane is kept: only move_lanes changes it.
ON CONFLICT (queue, owner, type) DO UPDATE
SET has_initial = c.has_initial OR excluded.has_initial,
    initial_start = least(c.initial_start, excluded.initial_start),
    covered_until = greatest(c.covered_until, excluded.covered_until),
    first_created_at = least(c.first_created_at, excluded.first_created_at),
    last_created_at = greatest(c.last_created_at, excluded.last_created_at)

-- fragment: owner_of_j_not_paused
-- Job j's owner is not paused (no row in the owners table, or one whose paused_at is NULL): one probe of the
-- owners primary key. Every way of taking a waiting job, and every count of waiting work a worker wakes or
-- stops on, checks it, so that a paused owner's jobs wait without being taken or waking anyone, and its
-- lane-mates run on. Used by finish_and_take, take_many, queue_activity and worker_wakeup.
NOT EXISTS (
    SELECT 1 FROM {schema}.owners AS paused_owner
    WHERE paused_owner.queue = j.queue AND paused_owner.owner = j.owner AND paused_owner.paused_at IS NOT NULL
)

-- fragment: owner_paused
-- The INSERT that pauses owner %(owner)s of queue %(queue)s, by %(paused_by)s for %(paused_reason)s, as the
-- first statement of a WITH: its row made when missing; a pause already in place is kept as it was (the first
-- reason stands). %(last_error)s, when not NULL, becomes the owner's last error (a handler's pause: the error
-- that made it pause, which the health check's alert names). Used by pause_owner and pause_owner_and_release.
paused AS (
    INSERT INTO {schema}.owners AS o (queue, owner, paused_at, paused_reason, paused_by, last_error, updated_at)
    VALUES (%(queue)s, %(owner)s, coalesce(%(now)s::timestamptz, statement_timestamp()), %(paused_reason)s,
            %(paused_by)s, %(last_error)s, coalesce(%(now)s::timestamptz, statement_timestamp()))
    ON CONFLICT (queue, owner) DO UPDATE
    SET paused_at = coalesce(o.paused_at, excluded.paused_at),
        paused_reason = CASE WHEN o.paused_at IS NULL THEN excluded.paused_reason ELSE o.paused_reason END,
        paused_by = CASE WHEN o.paused_at IS NULL THEN excluded.paused_by ELSE o.paused_by END,
        last_error = coalesce(excluded.last_error, o.last_error),
        updated_at = excluded.updated_at
    RETURNING o.*
)

-- fragment: let_go
-- The columns (of a SET) of a job no worker holds any more, as of now: unleased, no stop asked of it, due now or,
-- when its lane waits out a quota (lane_budgets.quota_until), at the quota's reset. Every statement that takes a
-- job out of a worker's hands writes them so (handed_back, abandon_job).
next_run_at = greatest(coalesce(%(now)s::timestamptz, statement_timestamp()),
                       (SELECT b.quota_until FROM {schema}.lane_budgets AS b
                        WHERE b.queue = jobs.queue AND b.lane = jobs.lane)),
    leased_by = NULL,
    lease_expires_at = NULL,
    stop_reason = NULL

-- fragment: handed_back
-- The columns (of a SET) of a job handed back to wait at its cursor, due now: the interrupted attempt does
-- not count, and it is let go. One hand-back, whoever hands it back: its worker stopping (job_released) or an
-- operator (release_running).
attempt_count = greatest(attempt_count - 1, 0),
    {let_go}

-- fragment: job_released
-- Job %(id)s handed back as pending at its cursor, the attempt not counted, fenced on the lease; abandoned
-- instead, with the cancel's reason stamped now, when a cancel had asked it to stop. Returns the job as left. Used by
-- release and pause_owner_and_release.
UPDATE {schema}.jobs
SET status = CASE WHEN stop_reason IS NOT NULL THEN 'abandoned' ELSE 'pending' END,
    error = coalesce(stop_reason, error),
    heartbeat_at = CASE WHEN stop_reason IS NOT NULL THEN coalesce(%(now)s::timestamptz, statement_timestamp())
                        ELSE heartbeat_at END,
    processed_count = %(processed_count)s,
    {handed_back}
WHERE id = %(id)s AND leased_by = %(worker)s AND status = 'running'
RETURNING *

-- fragment: j_counts_for_freshness
-- Job j is one its owner's freshness is read from: a completed planned job (initial or recurring). A manual job
-- (a re-sync's, request_key set, or one enqueued by hand) is left out, as the planner leaves it out of coverage:
-- it fetches a range again or once, and says nothing of whether the plan keeps the owner up to date (a paused
-- or failing owner must not look fresh after one; a hand job's window may even end in the future). The one
-- rule of freshness, for every read of it: freshness (when each type was last brought up to date),
-- fresh_until_of_o_t (how far it reaches, which lag is measured from) and prune (what retention records of the
-- jobs it deletes, for both to read).
(j.status = 'completed' AND j.mode <> 'manual')

-- fragment: fresh_until_of_o_t
-- How far the data of owner o.owner and type t.type reaches, as fresh.fresh_until: the end of its newest
-- completed window that counts for freshness (j_counts_for_freshness; a snapshot, which has no window, reaches
-- when it completed), or of the newest one retention deleted (the coverage row's last_pruned_reach), whichever
-- is later; NULL when there is none. One probe of jobs_completed_reach, newest first (the few manual jobs at its
-- top are stepped over), and one of the coverage key, whatever the history holds. Used by window_lags and, in
-- monitor.sql, the owners view.
CROSS JOIN LATERAL (
    SELECT greatest(
        (
            SELECT coalesce(j.window_end, j.completed_at)
            FROM {schema}.jobs AS j
            WHERE j.queue = %(queue)s AND j.owner = o.owner AND j.type = t.type
              AND {j_counts_for_freshness}
              AND coalesce(j.window_end, j.completed_at) IS NOT NULL
            ORDER BY coalesce(j.window_end, j.completed_at) DESC
            LIMIT 1
        ),
        (
            SELECT c.last_pruned_reach FROM {schema}.coverage AS c
            WHERE c.queue = %(queue)s AND c.owner = o.owner AND c.type = t.type
        )
    ) AS fresh_until
) AS fresh

-- fragment: completed_span
-- The CTEs before, span and moved: the span of completions reader %(purpose)s has not read yet, claimed. The
-- reader's mark (marks) moves up to %(settle)s before now, and the span runs from the old mark (excluded) to the
-- new one (included); a reader with no mark yet starts %(first_look)s before the new one (NULL: from the
-- beginning). The mark stays %(settle)s behind now because a completion is stamped in its statement and
-- committed moments later: a mark at now could pass a job before its commit shows it. The old mark is read with
-- its row locked and written after (moved selects from span): two claims at once take turns, the second from
-- where the first left off, so no completion is read twice (but by two first claims at once, which both start
-- from %(first_look)s). A mark is never moved back. Used by announce_completed and tally_records.
before AS (
    SELECT m.reached FROM {schema}.marks AS m
    WHERE m.queue = %(queue)s AND m.purpose = %(purpose)s
    FOR UPDATE
),
span AS (
    SELECT upto,
           coalesce((SELECT reached FROM before), upto - %(first_look)s::interval, '-infinity') AS since
    FROM (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) - %(settle)s::interval AS upto) AS mark
),
moved AS (
    INSERT INTO {schema}.marks AS m (queue, purpose, reached, updated_at)
    SELECT %(queue)s, %(purpose)s, span.upto, statement_timestamp() FROM span
    ON CONFLICT (queue, purpose) DO UPDATE
    SET reached = greatest(m.reached, excluded.reached), updated_at = excluded.updated_at
)

-- fragment: jobs_completed_in_span
-- The FROM and WHERE of the queue's jobs (alias j) completed within the claimed span (completed_span).
FROM {schema}.jobs AS j, span
WHERE j.queue = %(queue)s AND j.status = 'completed'
  AND j.completed_at > span.since AND j.completed_at <= span.upto

-- fragment: finish_the_job
-- The CTE ``finished``: each job named in the statement's CTE ``ending`` (one row per attempt ended: the job's id,
-- its worker, the status asked for, processed_count, the landed counts inserted … deleted (NULL: as last saved),
-- error, delay, owner_failed), if it is still that worker's, leaves running for how its attempt ended (a cancel's
-- abandonment for any end but completion), its lease and lane slot freed. Used by finish_and_take (one row) and
-- finish_many.
finished AS (
    UPDATE {schema}.jobs AS done
    SET status = CASE WHEN done.stop_reason IS NOT NULL AND e.status <> 'completed' THEN 'abandoned'
                      ELSE e.status END,
        processed_count = e.processed_count,
        inserted_count = coalesce(e.inserted, done.inserted_count),
        updated_count = coalesce(e.updated, done.updated_count),
        unchanged_count = coalesce(e.unchanged, done.unchanged_count),
        stale_count = coalesce(e.stale, done.stale_count),
        deleted_count = coalesce(e.deleted, done.deleted_count),
        error = CASE WHEN done.stop_reason IS NOT NULL AND e.status <> 'completed' THEN done.stop_reason
                     ELSE e.error END,
        next_run_at = clock.now + CASE WHEN done.stop_reason IS NOT NULL AND e.status <> 'completed'
                                       THEN interval '0' ELSE e.delay END,
        heartbeat_at = CASE WHEN done.stop_reason IS NOT NULL AND e.status <> 'completed' THEN clock.now
                            ELSE done.heartbeat_at END,
        completed_at = CASE WHEN e.status = 'completed'
                            THEN coalesce(%(now)s::timestamptz, clock_timestamp()) END,
        leased_by = NULL,
        lease_expires_at = NULL,
        stop_reason = NULL
    FROM clock, ending AS e
    WHERE done.id = e.id AND done.leased_by = e.worker AND done.status = 'running'
    RETURNING done.id, done.owner, done.type, done.lane, done.status, done.error, done.mode,
              e.status AS asked, e.owner_failed
)

-- fragment: owner_health_after_the_finish
-- finish_and_take's second part, the CTE ``owner_health``: the owner's row follows how the attempt ended.
owner_health AS (
    -- The owner's health follows how the attempt ended (core/declare/stretch.py): a completion resets it, an
    -- attempt that failed for the owner (owner_failed: not a throttle, and not turned into a cancel's
    -- abandonment) counts one more failure in a row, degraded from %(degraded_after)s, failing from
    -- %(failing_after)s. Upserted on the owner's row, which this statement creates when it has none. A
    -- completion of an owner already healthy, with no failure in a row and a clean run stamped within the last
    -- minute, writes nothing: last_clean_at is kept to the minute, so that a busy owner's finishes do not each
    -- rewrite (and lock) its row.
    INSERT INTO {schema}.owners AS o
        (queue, owner, health, consecutive_failures, last_error, failing_since, last_clean_at, updated_at)
    SELECT %(queue)s, f.owner,
           CASE WHEN f.status = 'completed' OR %(degraded_after)s > 1 THEN %(healthy)s
                WHEN %(failing_after)s > 1 THEN %(degraded)s ELSE %(failing)s END,
           CASE WHEN f.status = 'completed' THEN 0 ELSE 1 END,
           CASE WHEN f.status <> 'completed' THEN f.error END,
           CASE WHEN f.status <> 'completed' AND %(failing_after)s <= 1 THEN clock.now END,
           CASE WHEN f.status = 'completed' THEN clock.now END,
           clock.now
    FROM finished AS f, clock
    WHERE (f.status = 'completed' AND NOT EXISTS (
              SELECT 1 FROM {schema}.owners AS clean
              WHERE clean.queue = %(queue)s AND clean.owner = f.owner
                AND clean.consecutive_failures = 0 AND clean.last_clean_at > clock.now - interval '1 minute'
          ))
       OR (f.owner_failed AND f.status = f.asked)
    -- In owner order: two statements writing several owners' rows lock them in the same order, never in a cycle.
    ORDER BY f.owner
    ON CONFLICT (queue, owner) DO UPDATE
    SET consecutive_failures = CASE WHEN excluded.consecutive_failures = 0 THEN 0
                                    ELSE o.consecutive_failures + 1 END,
        health = CASE WHEN excluded.consecutive_failures = 0 THEN %(healthy)s
                      WHEN o.consecutive_failures + 1 >= %(failing_after)s THEN %(failing)s
                      WHEN o.consecutive_failures + 1 >= %(degraded_after)s THEN %(degraded)s
                      ELSE %(healthy)s END,
        last_error = coalesce(excluded.last_error, o.last_error),
        failing_since = CASE WHEN excluded.consecutive_failures = 0 THEN NULL
                             WHEN o.consecutive_failures + 1 >= %(failing_after)s
                             THEN coalesce(o.failing_since, excluded.updated_at)
                        END,
        last_clean_at = coalesce(excluded.last_clean_at, o.last_clean_at),
        updated_at = excluded.updated_at
    RETURNING 1
)

-- fragment: first_load_news
-- finish_and_take's third part, the CTE ``first_load_news``: an initial job that completed the owner's first
-- load of its type notifies the table's channel.
first_load_news AS (
    -- A job of the owner's still running elsewhere is not waiting: it sends its own as it completes. Two
    -- finishing side by side each see the other running and both send; neither can miss it.
    SELECT pg_notify(%(channel)s, %(payload)s) FROM finished
    WHERE finished.mode = 'initial' AND finished.status = 'completed'
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.jobs AS rest
          WHERE rest.queue = %(queue)s AND rest.owner = finished.owner AND rest.type = finished.type
            AND rest.status IN ('pending', 'failed', 'deferred') AND rest.mode = 'initial'
      )
)

-- fragment: held_or_expired
-- finish_and_take's first way to take: a job this worker already holds, else one whose lease expired.
SELECT id, lost_worker, lane_slot FROM (
        SELECT j.id, nullif(j.leased_by, %(worker)s) AS lost_worker, j.lane_slot
        FROM {schema}.jobs AS j, clock
        WHERE %(take)s AND (SELECT n FROM finish_first) >= 0
          AND j.queue = %(queue)s
          AND j.status = 'running'
          AND j.id IS DISTINCT FROM %(finished)s
          AND (j.leased_by = %(worker)s OR j.lease_expires_at < clock.now)
        ORDER BY j.leased_by = %(worker)s DESC, j.lease_expires_at
        LIMIT 1
        FOR UPDATE OF j SKIP LOCKED
    ) AS held_or_expired

-- fragment: first_due_in_queue_order
-- The rest of a WHERE (after a first condition) and the ORDER BY that read the queue's due waiting jobs (alias
-- first) from the head of the queue: declared type order, newest window first, through jobs_waiting_in_order.
-- Used by among_first_due and take_many.
AND first.queue = %(queue)s
              AND first.status IN ('pending', 'failed', 'deferred')
              AND first.next_run_at <= clock.now
            ORDER BY first.priority, first.window_end DESC NULLS LAST, first.id

-- fragment: first_due_whose_turn_has_come
-- The rest of a FROM and its WHERE, after a subquery ``first_due`` of first due jobs: each of them, as its row j
-- (its newest version once locked), whose turn in its lane's line has come, with the free slot its place in the
-- line gives it (free). Used by among_first_due and take_many.
JOIN {schema}.jobs AS j ON j.id = first_due.id
        {free_slots_of_j}
        CROSS JOIN clock
        WHERE j.status IN ('pending', 'failed', 'deferred')
          AND j.next_run_at <= clock.now
          AND {owner_of_j_not_paused}
          AND (j.status <> 'deferred' OR NOT EXISTS (
              SELECT 1 FROM {schema}.jobs AS other
              WHERE other.queue = j.queue AND other.lane = j.lane
                AND other.status IN ('pending', 'failed') AND other.next_run_at <= clock.now
                AND NOT EXISTS (
                    SELECT 1 FROM {schema}.owners AS o
                    WHERE o.queue = other.queue AND o.owner = other.owner AND o.paused_at IS NOT NULL
                )
          ))
          -- The job's place in its lane's line: one scan of the lane's waiting jobs in index order, which stops at
          -- the line's lane_width-th job (at once when the job heads its lane). Deferred jobs stand behind the
          -- others and are counted among themselves (one goes only when no other job of its lane is due, above).
          -- Written on first_due rather than on j, so that the planner cannot move it into the look at j's free
          -- slots (which then stays one look per lane): it runs only where a free slot was found.
          AND free.place = array_position(
              ARRAY(
                  SELECT j.id FROM {schema}.jobs AS j
                  WHERE j.queue = %(queue)s AND j.lane = first_due.lane
                    AND j.status IN ('pending', 'failed', 'deferred')
                    AND (j.status = 'deferred') = (first_due.status = 'deferred')
                    AND j.next_run_at <= clock.now
                    AND {owner_of_j_not_paused}
                  ORDER BY j.priority, j.window_end DESC NULLS LAST, j.id
                  LIMIT first_due.lane_width
              ),
              first_due.id
          )

-- fragment: among_first_due
-- finish_and_take's second way to take: the first of the first few due jobs in queue order whose turn in its
-- lane has come.
SELECT id, NULL, lane_slot FROM (
        SELECT j.id, free.lane_slot
        FROM (
            SELECT first.id, first.priority, first.window_end, first.status, first.lane, first.lane_width
            FROM {schema}.jobs AS first, clock
            WHERE %(take)s AND (SELECT n FROM finish_first) >= 0
              {first_due_in_queue_order}
            LIMIT 32
        ) AS first_due
        {first_due_whose_turn_has_come}
        ORDER BY first_due.priority, first_due.window_end DESC NULLS LAST, first_due.id
        LIMIT 1
        FOR UPDATE OF j SKIP LOCKED
    ) AS among_first_due

-- fragment: heads_of_lanes
-- The FROM of the heads of the lanes with waiting work (lanes, lanes_with_waiting_work): each lane's first due job
-- of an owner not paused (deferred jobs only where no other is due), as lane_head and its row j, with the free
-- slots of its lane (free). One index probe a lane. Used by head_of_a_free_lane and take_many.
FROM lanes
        CROSS JOIN LATERAL (
            SELECT head.id FROM (
                (
                    SELECT j.id, j.priority, j.window_end FROM {schema}.jobs AS j, clock
                    WHERE j.queue = %(queue)s AND j.lane = lanes.lane
                      AND j.status IN ('pending', 'failed') AND j.next_run_at <= clock.now
                      AND {owner_of_j_not_paused}
                    ORDER BY j.priority, j.window_end DESC NULLS LAST, j.id
                    LIMIT 1
                )
                UNION ALL
                (
                    SELECT j.id, j.priority, j.window_end FROM {schema}.jobs AS j, clock
                    WHERE j.queue = %(queue)s AND j.lane = lanes.lane
                      AND j.status = 'deferred' AND j.next_run_at <= clock.now
                      AND {owner_of_j_not_paused}
                    ORDER BY j.priority, j.window_end DESC NULLS LAST, j.id
                    LIMIT 1
                )
                LIMIT 1
            ) AS head
        ) AS lane_head
        JOIN {schema}.jobs AS j ON j.id = lane_head.id
        {free_slots_of_j}
        CROSS JOIN clock

-- fragment: head_still_due_in_a_free_slot
-- The rest of a WHERE over heads_of_lanes: a lane's head (its newest version once locked) still due, in its lane's
-- lowest free slot. Used by head_of_a_free_lane and take_many.
AND lanes.lane IS NOT NULL
          AND free.place = 1
          AND j.status IN ('pending', 'failed', 'deferred')
          AND j.next_run_at <= clock.now

-- fragment: head_of_a_free_lane
-- finish_and_take's third way to take: the best head of a lane with a free slot, one index probe a lane.
SELECT id, NULL, lane_slot FROM (
        SELECT j.id, free.lane_slot
        {heads_of_lanes}
        WHERE %(take)s AND (SELECT n FROM finish_first) >= 0
          {head_still_due_in_a_free_slot}
        ORDER BY j.priority, j.window_end DESC NULLS LAST, j.id
        LIMIT 1
        FOR UPDATE OF j SKIP LOCKED
    ) AS head_of_a_free_lane

-- fragment: running_for_a_lease
-- The rest of a SET (after leased_by) of a job (alias j) just taken: leased for %(lease)s from now, an attempt
-- counted and started now unless it was taken over running (a lost worker's, or a take resent), which keeps its
-- attempt, start and stop request. Used by take_the_candidate and take_many.
lease_expires_at = clock.now + %(lease)s::interval,
        attempt_count = CASE WHEN j.status = 'running' THEN j.attempt_count ELSE j.attempt_count + 1 END,
        started_at = CASE WHEN j.status = 'running' THEN j.started_at
                          ELSE coalesce(%(now)s::timestamptz, clock_timestamp()) END,
        heartbeat_at = clock.now,
        stop_reason = CASE WHEN j.status = 'running' THEN j.stop_reason END

-- fragment: take_the_candidate
-- finish_and_take's last part, the CTE ``taken``: the job found leased to this worker, in the lane slot found.
taken AS (
    UPDATE {schema}.jobs AS j
    SET status = 'running',
        lane_slot = candidate.lane_slot,
        leased_by = %(worker)s,
        {running_for_a_lease}
    FROM candidate, clock
    WHERE j.id = candidate.id
    RETURNING j.*, candidate.lost_worker
)

-- fragment: throttle_left_on_its_lane
-- The seconds left of the throttle or quota on the lane of the job just taken (taken), NULL when there is none.
-- Used by finish_and_take and take_many.
(SELECT greatest(extract(epoch FROM greatest(b.throttled_until, b.quota_until) - clock.now), 0)::float8
        FROM {schema}.lane_budgets AS b, clock
        WHERE b.queue = taken.queue AND b.lane = taken.lane) AS throttle_left

-- name: finish_and_take
-- How a worker moves on, in one statement: write how its last job ended (when %(finished)s names one),
-- then lease its next job (when %(take)s). Done together, other workers never see the lane free in
-- between, so a lane whose next job is this worker's best choice passes straight to it instead of being
-- raced for by every idle worker.
--
-- Finishing leaves running for completed, failed, deferred or abandoned, with the final count (and, when
-- %(landed)s is not NULL, what the job's pages landed: see save_page), the error
-- (if any) and the delay before the next attempt; it is fenced on the lease, and frees the lane. A cancel that
-- asked the job to stop (stop_reason) wins over any end but completion: a page that failed after the cancel
-- (an account being disconnected typically answers 401) ends the job abandoned with the cancel's reason,
-- stamped now (retention keeps it that long from here), never failed and retried.
--
-- The next job is one the worker already holds (a take whose reply was lost), else an expired lease (a
-- lost worker's job: taken without a new attempt, in the slot it held, and returned with the lost worker's
-- id in lost_worker so that the taker writes the lost attempt down as a failure), else the first due waiting
-- job whose turn in its lane has come, in declared type order and newest window first. A lane's waiting jobs
-- start in a line: its due jobs of owners not paused, in that order, deferred jobs behind the others (a deferred
-- job only goes when nothing else of its lane is due); its first in line is its head. A lane of width k has slots
-- 0 … k-1 (the job's lane_width, copied from the owner source); with f of them free, the first f of its line may
-- start, the i-th in the i-th lowest free slot. Row locks are skipped, never waited on, and a job below them is
-- never taken instead: a take that finds a lane's head locked (another worker's take of it, which may yet lose
-- its race for the lane and hand it back) passes over the whole lane, so that no job starts before the job ahead
-- of it in its lane. Two takes that read the lane at different moments (a job inserted, requeued or fallen due
-- between them) may still each see another head; they are stopped by jobs_one_running_per_lane_slot (the
-- caller retries on that unique violation, which also undoes the finish): the index, not this search, is what
-- keeps a lane at most k wide.
--
-- The due job is looked for in two ways that give the same answer. First among the first few due jobs in
-- queue order (read in that order, so the search stops at the first job whose turn has come, without a sort):
-- with many lanes one of them is almost always in a free lane, and only then is the job's place in its lane's line
-- looked up (one index probe of the lane when the job heads it). When none is (few lanes,
-- all busy, or one lane holding the head of the queue), the lanes that have waiting jobs are walked one index
-- probe each and the best head of a lane with a free slot is taken; scanning every due job instead would read the
-- whole queue only to find nothing.
--
-- Lock order: the finish is written before anything is taken (finish_first gates every way of taking, as an
-- init plan, evaluated before the first row is locked). A take whose snapshot still showed a job as waiting
-- locks that job's newest version before rechecking it, and keeps the lock; a finish of that job waits for
-- it. Written first, the finish waits holding nothing that take could wait for. Written after the take (as
-- the planner placed it when the finish was referenced only by a busy lane's check), it waited holding the
-- new job's entry in jobs_one_running_per_lane_slot, which that take could be waiting on: a deadlock, broken
-- after deadlock_timeout (1 s). See docs/performance.md and bench/lock_order.py.
--
-- The owner's row (owners) follows how the attempt ended, in this statement too (owner_health below): a
-- completion makes the owner healthy, a failure of the owner's counts towards degraded and failing.
--
-- An initial job that completes with no other initial job of its owner and type still waiting may be that
-- owner's first load done: the finish notifies the table's channel (%(channel)s, %(payload)s: the queue),
-- delivered as it commits, to wake whoever watches for first loads (the initial-load asset watcher, the sensor's
-- trigger) now rather than at its next poll -- in this statement, so that a finished job costs no statement of
-- its own. Every other completion sends nothing: a NOTIFY serializes the commits of every session that sends
-- one (PostgreSQL holds one lock per database from the commit's start until it is on disk), so a notification
-- per history slice would put a queue's workers in single file.
--
-- Returns one row: finished (whether the named job was written; false means its lease was lost),
-- finished_status and finished_error (what was written), the leased job's columns (all NULL when nothing was
-- taken), lost_worker, throttle_left: the seconds left of the throttle or quota on the taken job's lane (NULL:
-- none), which the worker waits out before its first page, and notified (how many notifications the finish
-- sent: 0 or 1).
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
),
ending AS (
    SELECT %(finished)s::bigint AS id, %(worker)s::text AS worker, %(status)s::text AS status,
           %(processed_count)s::bigint AS processed_count,
           (%(landed)s::bigint[])[1] AS inserted, (%(landed)s::bigint[])[2] AS updated,
           (%(landed)s::bigint[])[3] AS unchanged, (%(landed)s::bigint[])[4] AS stale,
           (%(landed)s::bigint[])[5] AS deleted,
           %(error)s::text AS error, %(delay)s::interval AS delay, %(owner_failed)s::boolean AS owner_failed
    WHERE %(finished)s::bigint IS NOT NULL
),
{finish_the_job},
finish_first AS (
    SELECT count(*) AS n FROM finished
),
{owner_health_after_the_finish},
{first_load_news},
{lanes_with_waiting_work},
candidate AS (
    {held_or_expired}
    UNION ALL
    {among_first_due}
    UNION ALL
    {head_of_a_free_lane}
    LIMIT 1
),
{take_the_candidate}
SELECT EXISTS (SELECT 1 FROM finished) AS finished,
       (SELECT f.status FROM finished AS f) AS finished_status, (SELECT f.error FROM finished AS f) AS finished_error,
       taken.*,
       {throttle_left_on_its_lane},
       (SELECT count(*) FROM first_load_news) AS notified
FROM (SELECT) AS one
LEFT JOIN taken ON true;

-- name: finish_many
-- How a worker process running many jobs at once writes the ends of several attempts in one statement: each as
-- finish_and_take writes its finish (fenced on its own worker's lease, a cancel's abandonment winning over any end
-- but completion, the owner's health following, a first load's notification), with no take: the jobs' workers
-- take again with take_many. One statement for a batch rather than one a job: the ends of pages that return
-- together cost one round trip, one plan and one commit. The attempts ended are given as arrays of one value a
-- job, each in the same order (%(ids)s, %(workers)s, %(statuses)s, %(processed_counts)s, the landed counts
-- %(inserted)s … %(deleted)s, NULL where a job's are as last saved, %(errors)s, %(delays)s, %(owner_failed)s),
-- of distinct owners: an owner's row is written once a statement.
--
-- Returns a row for each job named, in the given order: finished (false: its lease was lost), finished_status and
-- finished_error as written, and lane_has_work: whether the job's lane may have work due now (it is waiting again
-- itself, or another job of its lane is due), which tells the workers whether a take could find some.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
),
ending AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(workers)s::text[], %(statuses)s::text[], %(processed_counts)s::bigint[],
        %(inserted)s::bigint[], %(updated)s::bigint[], %(unchanged)s::bigint[], %(stale)s::bigint[],
        %(deleted)s::bigint[], %(errors)s::text[], %(delays)s::interval[], %(owner_failed)s::boolean[]
    ) WITH ORDINALITY AS e(id, worker, status, processed_count, inserted, updated, unchanged, stale, deleted,
                          error, delay, owner_failed, place)
),
{finish_the_job},
{owner_health_after_the_finish},
{first_load_news}
SELECT f.id IS NOT NULL AS finished, f.status AS finished_status, f.error AS finished_error,
       f.status IN ('pending', 'failed', 'deferred') OR EXISTS (
           SELECT 1 FROM {schema}.jobs AS w
           WHERE w.queue = %(queue)s AND w.lane = f.lane
             AND w.status IN ('pending', 'failed', 'deferred') AND w.next_run_at <= clock.now
       ) AS lane_has_work,
       (SELECT count(*) FROM first_load_news) AS notified
FROM ending AS e
CROSS JOIN clock
LEFT JOIN finished AS f ON f.id = e.id
ORDER BY e.place;

-- name: take_many
-- Several takes in one statement, for a worker process that runs many jobs at once, each leased to a worker id of
-- its own: up to n = cardinality(%(workers)s) jobs (%(workers)s: distinct ids, none holding a job but after a
-- lost reply), leased for %(lease)s. finish_and_take's take, its rules and its order, n times over, with no finish:
-- first the jobs one of these workers already holds (a take_many whose reply was lost, sent again: each goes back
-- to the worker holding it), then expired leases, the longest expired first (taken over without a new attempt, in
-- the slot they hold, the lost worker's id in lost_worker), then due waiting jobs in queue order (declared type
-- order, newest window first) whose turn in their lane has come: each lane's line as finish_and_take reads it
-- (deferred jobs behind the others, a paused owner's jobs left out), row locks skipped, and a lane whose head is
-- locked passed over whole, so that no job starts before the job ahead of it in its lane. The i-th job not held
-- goes to the i-th worker not holding one.
--
-- For simplicity a lane starts at most one waiting job per statement (as a DISTINCT ON lane would): its head, in
-- its lowest free slot; a lane k wide gets its next jobs from the statements that follow. So no two jobs of the
-- statement ask for one lane slot (a job taken over keeps the slot it holds, which a lane's free slots leave out),
-- and with lanes one wide the jobs taken are those n finish_and_take takes in a row would take.
--
-- The heads are looked for in finish_and_take's two ways: first among the first due jobs of the queue (32 a
-- worker), a read that stops once it has found n; where it found fewer, the lanes with waiting work it gave none
-- of are walked, one index probe each, for their best heads. Every head the first look misses comes after every
-- head it found (it read the due jobs ahead of it) or is locked, so together they give the best n. Each part is
-- read only as far as the n jobs need (the UNION ALL under its LIMIT), so nothing more is locked. Two statements
-- that read a lane at different moments may still each see another head: jobs_one_running_per_lane_slot stops the
-- second, and the caller retries (TakingMany.take).
--
-- Returns a row for each job taken, in the order of %(workers)s: the job's columns (leased_by: the worker it went
-- to), lost_worker and throttle_left, as finish_and_take returns them.
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
),
finished AS (
    -- No job is finished here: what free_slots_of_j leaves out of the running jobs holding a slot.
    SELECT NULL::bigint AS id WHERE false
),
{lanes_with_waiting_work},
held_or_expired AS (
    SELECT j.id, j.lane_slot, j.lease_expires_at, j.priority, j.window_end,
           CASE WHEN j.leased_by = ANY(%(workers)s::text[]) THEN j.leased_by END AS holder,
           CASE WHEN j.leased_by <> ALL(%(workers)s::text[]) THEN j.leased_by END AS lost_worker
    FROM {schema}.jobs AS j, clock
    WHERE j.queue = %(queue)s
      AND j.status = 'running'
      AND (j.leased_by = ANY(%(workers)s::text[]) OR j.lease_expires_at < clock.now)
    ORDER BY j.leased_by = ANY(%(workers)s::text[]) DESC, j.lease_expires_at
    LIMIT cardinality(%(workers)s::text[])
    FOR UPDATE OF j SKIP LOCKED
),
first_heads AS (
    SELECT j.id, j.lane, free.lane_slot, j.priority, j.window_end
    FROM (
        SELECT first.id, first.priority, first.window_end, first.status, first.lane, first.lane_width
        FROM {schema}.jobs AS first, clock
        WHERE cardinality(%(workers)s::text[]) > 0
          {first_due_in_queue_order}
        LIMIT 32 * cardinality(%(workers)s::text[])
    ) AS first_due
    {first_due_whose_turn_has_come}
      -- Only a lane's head, in its lowest free slot: < 2, not = 1, which the planner would carry over to the place
      -- in line (equal to it) and look that up for every job read, in busy lanes too.
      AND free.place < 2
    ORDER BY first_due.priority, first_due.window_end DESC NULLS LAST, first_due.id
    LIMIT cardinality(%(workers)s::text[])
    FOR UPDATE OF j SKIP LOCKED
),
walked_heads AS (
    SELECT j.id, free.lane_slot, j.priority, j.window_end
    {heads_of_lanes}
    WHERE lanes.lane NOT IN (SELECT lane FROM first_heads)
      {head_still_due_in_a_free_slot}
    ORDER BY j.priority, j.window_end DESC NULLS LAST, j.id
    LIMIT cardinality(%(workers)s::text[])
    FOR UPDATE OF j SKIP LOCKED
),
found AS (
    SELECT id, lane_slot, holder, lost_worker, lease_expires_at, priority, window_end FROM held_or_expired
    UNION ALL
    SELECT id, lane_slot, NULL, NULL, NULL, priority, window_end FROM first_heads
    UNION ALL
    SELECT id, lane_slot, NULL, NULL, NULL, priority, window_end FROM walked_heads
    LIMIT cardinality(%(workers)s::text[])
),
assigned AS (
    -- Each job found goes to the worker holding it; the others, in the order found (expired leases, the longest
    -- expired first, then queue order), to the workers holding none, in the order given.
    SELECT found.id, found.lane_slot, found.lost_worker,
           coalesce(found.holder, (ARRAY(
               SELECT w.worker FROM unnest(%(workers)s::text[]) WITH ORDINALITY AS w(worker, place)
               WHERE w.worker NOT IN (SELECT holder FROM found WHERE holder IS NOT NULL)
               ORDER BY w.place
           ))[row_number() OVER (
               PARTITION BY found.holder IS NULL
               ORDER BY found.lease_expires_at, found.priority, found.window_end DESC NULLS LAST, found.id
           )]) AS worker
    FROM found
),
taken AS (
    UPDATE {schema}.jobs AS j
    SET status = 'running', lane_slot = assigned.lane_slot, leased_by = assigned.worker,
        {running_for_a_lease}
    FROM assigned, clock
    WHERE j.id = assigned.id
    RETURNING j.*, assigned.lost_worker
)
SELECT taken.*, {throttle_left_on_its_lane}
FROM taken
ORDER BY array_position(%(workers)s::text[], taken.leased_by);

-- name: save_page
-- After a page: store the cursor and the absolute record count, and renew the lease. Fenced on the lease:
-- zero rows means another worker holds the job now. Absolute values make a retried save harmless. Returns
-- the stop reason a cancel may have set meanwhile: the worker then ends the job after this page; and the
-- seconds left of the throttle or quota on the job's lane (NULL: none), to wait out before the next page; and
-- whether the job's owner has been paused meanwhile (one probe of the owners key): the worker then hands the
-- job back at the cursor just saved instead of asking for another page. %(landed)s, when not NULL, is what the
-- job's pages landed so far (inserted, updated, unchanged, stale, deleted: absolute, like the count), committed
-- with the cursor in the page's transaction.
UPDATE {schema}.jobs
SET cursor = %(cursor)s,
    processed_count = %(processed_count)s,
    inserted_count = coalesce((%(landed)s::bigint[])[1], inserted_count),
    updated_count = coalesce((%(landed)s::bigint[])[2], updated_count),
    unchanged_count = coalesce((%(landed)s::bigint[])[3], unchanged_count),
    stale_count = coalesce((%(landed)s::bigint[])[4], stale_count),
    deleted_count = coalesce((%(landed)s::bigint[])[5], deleted_count),
    heartbeat_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    lease_expires_at = coalesce(%(now)s::timestamptz, statement_timestamp()) + %(lease)s::interval
WHERE id = %(id)s AND leased_by = %(worker)s AND status = 'running'
RETURNING lease_expires_at, stop_reason,
    (SELECT greatest(extract(epoch FROM greatest(b.throttled_until, b.quota_until)
                                      - coalesce(%(now)s::timestamptz, statement_timestamp())), 0)::float8
     FROM {schema}.lane_budgets AS b
     WHERE b.queue = jobs.queue AND b.lane = jobs.lane) AS throttle_left,
    {owner_of_jobs_paused};

-- fragment: turn_of_b
-- When a take from the lane budget row b may send (take_lane_budget): the latest of now, the end of a throttle
-- or a quota, each window's theoretical arrival time (moved back by the previous request's lateness, %(late)s)
-- less what it allows ahead of it, and the learnt pace's.
greatest((SELECT now FROM clock), b.throttled_until, b.quota_until, b.learnt_tat + %(late)s::interval,
         (SELECT max(b.tats[w.i] + %(late)s::interval - w.allowance) FROM windows AS w))

-- fragment: turn_of_b_is_far
-- The turn is further away than the worker waits (take_lane_budget): not taken, the lane held as a quota.
coalesce({turn_of_b} - (SELECT now FROM clock) > %(longest)s::interval, false)

-- fragment: history_waits_b
-- A history take while fresh work is due, before history's own turn in the lane budget row b: it takes nothing
-- and waits for that turn (then takes again), leaving the lane's turns meanwhile to the fresh work.
((SELECT due FROM fresh) AND coalesce(b.history_tat > (SELECT now FROM clock), false))

-- fragment: learnt_pace_of_b
-- The spacing the lane budget row b learnt, now: as read from the API's headers, or, cut by its refusals,
-- shrinking back as the rate grows by %(regrowth)s requests a second every second since the cut (so a lane
-- halved from 10 a second is back at 10 in five seconds at 1 a second per second). NULL: nothing learnt.
CASE WHEN b.learnt_from = 'refusals' AND %(regrowth)s > 0
     THEN make_interval(secs => 1 / (1 / greatest(extract(epoch FROM b.learnt_interval), 1e-6)
                                     + %(regrowth)s * greatest(extract(epoch FROM (SELECT now FROM clock) - b.learnt_at), 0)))
     ELSE b.learnt_interval END

-- fragment: owner_of_jobs_paused
-- Whether the owner of the row ``jobs`` is paused (one probe of the owners key), as owner_paused: not one more page
-- is asked for it. Used by save_page, page_clearance and take_lane_budget.
EXISTS (SELECT 1 FROM {schema}.owners AS o
        WHERE o.queue = jobs.queue AND o.owner = jobs.owner AND o.paused_at IS NOT NULL) AS owner_paused

-- name: page_clearance
-- Right before a page is requested, when the worker has waited since the table last told it about the job (its
-- turn in the lane's rate budget, a throttle on its lane, or the time between the job's take, with the previous job's
-- finish, and its run): whether the page may still go. A pause or a cancel that came meanwhile stops it before it
-- is sent, not after: the worker hands the job back instead (release). Returns, while the job is still this
-- worker's (fenced on the lease; no row: lost), the stop reason a cancel may have set and whether the owner has
-- been paused. Writes nothing: one probe of the jobs key and one of the owners key.
SELECT stop_reason, {owner_of_jobs_paused}
FROM {schema}.jobs
WHERE id = %(id)s AND leased_by = %(worker)s AND status = 'running';

-- name: take_lane_budget
-- Before a page (or before more requests within one, job.spend): take units of the lane's rate budget, shared
-- by every worker on every machine, in each of its windows, shortest first (usually one): %(costs)s is the
-- units x each rate's interval, %(allowances)s how far ahead of its turn each window lets them go (its burst,
-- less the room the units after the first need). GCRA per window (see ratelimit.reserve_all): the requests go
-- at turn_at, when every window allows them -- never before now, the end of a throttle or quota, or the turn of
-- what the lane learnt (learnt_pace_of_b, %(units)s at a time, no burst) -- and each window's tats[i] moves
-- forward by its cost from then (or from where the last taker left it, if later), so no window is ever exceeded.
-- A lane that learnt nothing and declares no window (no costs) takes nothing and is told its throttle.
-- %(late)s: how long after its turn this job's previous request left (a busy machine); the lane's turns move
-- back by as much, so the next request is spaced from when the last one really went.
-- A turn further away than %(longest)s (a daily window used up) is not taken: nothing moves, the lane is held
-- by quota_until to then, and the wait returned tells the worker to hand its job back until then.
-- Fresh first: a take for history (%(history)s: an initial slice or a re-sync, of type priority %(priority)s, in
-- a lane with a declared rate) while a recurring job of the lane is running or due keeps to its share of the
-- budget as well: history's own turn, history_tat, moves by %(history_cost)s (the units' cost over the share).
-- Before that turn it reserves nothing (reserving ahead would take the lane's turns from the fresh work):
-- again says to wait the answer's wait and take again. When such a recurring job waits, due, for a lane whose
-- %(lane_width)s slots are all taken, and would be taken first (type order), yield_lane says so: the worker
-- hands the history job back after this page.
-- One statement, no lock held afterwards: the row lock is the statement's own, so concurrent takers line up in
-- turns and each gets its own wait. Returns wait: the seconds to sleep before sending (0: at once). Before a
-- page (%(id)s names the job, %(worker)s its worker), it also says whether the page may still go, as
-- page_clearance does, at no extra round trip: held (the job is still the worker's), its stop reason and
-- owner_paused; a page that waits for its turn asks page_clearance again once it has waited.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
),
recurring AS (
    SELECT j.status, j.priority, {owner_of_j_not_paused} AS owner_free
    FROM {schema}.jobs AS j, clock
    WHERE %(history)s AND j.queue = %(queue)s AND j.lane = %(lane)s AND j.mode = 'recurring'
      AND (j.status = 'running' OR (j.status IN ('pending', 'failed') AND j.next_run_at <= clock.now))
),
fresh AS (
    SELECT EXISTS (SELECT 1 FROM recurring AS r WHERE r.status = 'running' OR r.owner_free) AS due,
           EXISTS (SELECT 1 FROM recurring AS r WHERE r.status <> 'running' AND r.owner_free
                                                  AND r.priority <= %(priority)s)
           AND (SELECT count(*) FROM {schema}.jobs AS j
                WHERE %(history)s AND j.queue = %(queue)s AND j.lane = %(lane)s AND j.status = 'running')
               >= %(lane_width)s AS waiting
),
windows AS (
    SELECT w.cost, w.allowance, w.i
    FROM unnest(%(costs)s::interval[], %(allowances)s::interval[]) WITH ORDINALITY AS w(cost, allowance, i)
),
taken AS (
    INSERT INTO {schema}.lane_budgets AS b (queue, lane, tats, turn_at)
    SELECT %(queue)s, %(lane)s, coalesce(array_agg(clock.now + w.cost ORDER BY w.i) FILTER (WHERE w.i IS NOT NULL), '{{}}'),
           clock.now
    FROM clock LEFT JOIN windows AS w ON true
    GROUP BY clock.now
    ON CONFLICT (queue, lane) DO UPDATE
    SET turn_at = CASE WHEN {history_waits_b} THEN b.history_tat ELSE {turn_of_b} END,
        tats = CASE WHEN {history_waits_b} OR {turn_of_b_is_far} THEN b.tats
               ELSE coalesce((SELECT array_agg(greatest(b.tats[w.i] + %(late)s::interval, turn.at) + w.cost ORDER BY w.i)
                              FROM windows AS w, (SELECT {turn_of_b} AS at) AS turn), '{{}}') END,
        learnt_tat = CASE WHEN b.learnt_interval IS NULL OR {history_waits_b} OR {turn_of_b_is_far} THEN b.learnt_tat
                          ELSE {turn_of_b} + %(units)s * {learnt_pace_of_b} END,
        quota_until = CASE WHEN NOT {history_waits_b} AND {turn_of_b_is_far} THEN {turn_of_b} ELSE b.quota_until END,
        history_tat = CASE WHEN (SELECT due FROM fresh) AND NOT {history_waits_b} AND NOT {turn_of_b_is_far}
                           THEN {turn_of_b} + %(history_cost)s::interval ELSE b.history_tat END
    RETURNING b.turn_at, b.learnt_interval IS NOT NULL AS paced,
              (SELECT due FROM fresh) AND b.turn_at = b.history_tat AS again
)
SELECT greatest(extract(epoch FROM taken.turn_at - clock.now), 0)::float8 AS wait, taken.paced, taken.again,
       (SELECT waiting FROM fresh) AS yield_lane,
       jobs.id IS NOT NULL AS held, jobs.stop_reason, {owner_of_jobs_paused}
FROM taken
CROSS JOIN clock
LEFT JOIN {schema}.jobs ON jobs.id = %(id)s AND jobs.leased_by = %(worker)s AND jobs.status = 'running';

-- name: throttle_lane
-- A server named a wait (429 + Retry-After) for a job of this lane: the wait is the lane's, not the job's.
-- Records when the lane may send again (a later throttle already recorded is kept), and moves the lane's
-- waiting jobs' next_run_at to that instant, so that idle workers take other lanes' jobs meanwhile instead of
-- taking this lane's only to wait. Runs before the throttled job's finish, whose take must not see the lane
-- free. A job that starts in the lane during the throttle anyway (inserted or requeued since, or running beside)
-- waits it out before its next page (save_page, finish_and_take and take_lane_budget return what is left).
-- Returns throttled_until and how many waiting jobs were held back.
WITH throttled AS (
    INSERT INTO {schema}.lane_budgets AS b (queue, lane, throttled_until)
    VALUES (%(queue)s, %(lane)s, coalesce(%(now)s::timestamptz, statement_timestamp()) + %(wait)s::interval)
    ON CONFLICT (queue, lane) DO UPDATE
    SET throttled_until = greatest(b.throttled_until, excluded.throttled_until)
    RETURNING b.throttled_until
),
held AS (
    UPDATE {schema}.jobs AS j
    SET next_run_at = throttled.throttled_until
    FROM throttled
    WHERE j.queue = %(queue)s AND j.lane = %(lane)s
      AND j.status IN ('pending', 'failed', 'deferred')
      AND j.next_run_at < throttled.throttled_until
    RETURNING j.id
)
SELECT throttled.throttled_until, (SELECT count(*) FROM held)::int AS held
FROM throttled;

-- name: learn_lane
-- What an API's answer said of the lane's limit (job.observe): %(pace)s, the spacing that spends what is left
-- evenly until the reset, becomes the lane's learnt pace (NULL: the answer did not say), and a turn reserved at
-- a slower pace learnt before comes no later than one new pace from now; %(hold)s, when nothing is
-- left, holds the lane until the reset -- as a throttle, or, further away than the worker waits (%(quota)s), as
-- a quota, which its jobs wait out handed back. The lane's waiting jobs move to the end of the hold, as
-- throttle_lane moves them. Returns the pace and hold as recorded.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
),
learnt AS (
    INSERT INTO {schema}.lane_budgets AS b (queue, lane, learnt_interval, learnt_from, learnt_at, throttled_until,
                                            quota_until)
    SELECT %(queue)s, %(lane)s, %(pace)s::interval, CASE WHEN %(pace)s::interval IS NOT NULL THEN 'headers' END,
           clock.now, CASE WHEN NOT %(quota)s THEN clock.now + %(hold)s::interval END,
           CASE WHEN %(quota)s THEN clock.now + %(hold)s::interval END
    FROM clock
    ON CONFLICT (queue, lane) DO UPDATE
    SET learnt_interval = coalesce(excluded.learnt_interval, b.learnt_interval),
        learnt_from = coalesce(excluded.learnt_from, b.learnt_from),
        learnt_at = CASE WHEN excluded.learnt_interval IS NOT NULL THEN excluded.learnt_at ELSE b.learnt_at END,
        learnt_tat = CASE WHEN excluded.learnt_interval IS NOT NULL
                          THEN least(b.learnt_tat, excluded.learnt_at + excluded.learnt_interval)
                          ELSE b.learnt_tat END,
        throttled_until = greatest(b.throttled_until, excluded.throttled_until),
        quota_until = greatest(b.quota_until, excluded.quota_until)
    RETURNING b.learnt_interval, b.quota_until,
              CASE WHEN %(hold)s::interval IS NOT NULL THEN greatest(b.throttled_until, b.quota_until) END AS held_until
),
held AS (
    UPDATE {schema}.jobs AS j
    SET next_run_at = learnt.held_until
    FROM learnt
    WHERE learnt.held_until IS NOT NULL
      AND j.queue = %(queue)s AND j.lane = %(lane)s
      AND j.status IN ('pending', 'failed', 'deferred')
      AND j.next_run_at < learnt.held_until
    RETURNING j.id
)
SELECT learnt.learnt_interval, learnt.quota_until, learnt.held_until, (SELECT count(*) FROM held)::int AS held
FROM learnt;

-- name: cut_lane_pace
-- The API refused a request of the lane (a 429) and its answers say nothing of its limit: halve the lane's rate
-- (double its learnt pace, from what it is now, and at least from one unit of the declared rate, %(unit)s); it
-- grows back as learnt_pace_of_b says. A lane that learnt from headers in the last minute is left to them.
-- Returns the pace as cut (no row: left to the headers).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
INSERT INTO {schema}.lane_budgets AS b (queue, lane, learnt_interval, learnt_from, learnt_at)
SELECT %(queue)s, %(lane)s, 2 * %(unit)s::interval, 'refusals', clock.now
FROM clock
ON CONFLICT (queue, lane) DO UPDATE
SET learnt_interval = 2 * greatest(coalesce({learnt_pace_of_b}, %(unit)s::interval), %(unit)s::interval),
    learnt_from = 'refusals',
    learnt_at = (SELECT now FROM clock),
    learnt_tat = coalesce(b.learnt_tat, (SELECT now FROM clock))
WHERE b.learnt_from IS DISTINCT FROM 'headers' OR b.learnt_at < (SELECT now FROM clock) - interval '1 minute'
RETURNING b.learnt_interval;

-- name: paused_owners
-- The queue's paused owners, whom the planner gives no new jobs (found through owners_paused, however many
-- owners have rows).
SELECT owner FROM {schema}.owners WHERE queue = %(queue)s AND paused_at IS NOT NULL;

-- name: pause_owner
-- Pause an owner (see the fragment owner_paused): no job of it is taken until it is resumed, and a job of it
-- running now is handed back at its cursor after its page in flight (save_page says so). Returns the owner's
-- row as left.
WITH {owner_paused}
SELECT * FROM paused;

-- name: resume_owner
-- Resume a paused owner: its waiting jobs are taken again from their cursors (nothing else about it changes;
-- its health stays as its attempts made it). Safe to repeat; no row: the owner has none (it was never paused).
UPDATE {schema}.owners
SET paused_at = NULL, paused_reason = NULL, paused_by = NULL,
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp())
WHERE queue = %(queue)s AND owner = %(owner)s
RETURNING *;

-- name: list_owners
-- The rows of a queue's owners table, by owner name after %(after)s, at most %(limit)s; with %(troubled)s only
-- those paused or not healthy.
SELECT * FROM {schema}.owners
WHERE queue = %(queue)s AND owner > coalesce(%(after)s::text, '')
  AND (NOT %(troubled)s OR paused_at IS NOT NULL OR health <> 'healthy')
ORDER BY owner
LIMIT %(limit)s;

-- name: pause_owner_and_release
-- A handler said its owner is to be paused (OwnerPaused): in one statement, the owner is paused and the job
-- handed back as pending at its cursor, the attempt not counted, fenced on the lease -- as release does, and
-- abandoned instead when a cancel had asked it to stop. Together, so that no moment exists in which the job is
-- waiting and its owner not yet paused (another worker could take it and ask for another page), and no crash
-- leaves the owner paused with its job running. The pause is written even when the lease was lost: the handler
-- has said what it knows of the owner. Returns the job as left (no row: the lease was lost).
WITH {owner_paused}
{job_released}

-- name: renew_leases
-- Heartbeat of a worker process's running jobs while slow pages are in flight: every job whose renewal is due,
-- in one statement, so that hundreds of jobs running at once cost one statement per renewal interval, not one
-- each. Each job (%(ids)s, pairwise with %(workers)s and %(leases)s) is fenced like save_page on the worker that
-- holds it and renewed by its own queue's lease. Safe to repeat: it sets absolute values. It locks only the
-- rows it renews, each still its worker's (no two processes renew one job: each is leased by one worker).
-- Returns the leases renewed; a job missing from them is no longer its worker's (taken over, handed back).
UPDATE {schema}.jobs AS j
SET heartbeat_at = clock.now,
    lease_expires_at = clock.now + r.lease
FROM unnest(%(ids)s::bigint[], %(workers)s::text[], %(leases)s::interval[]) AS r(id, worker, lease),
     (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock
WHERE j.id = r.id AND j.leased_by = r.worker AND j.status = 'running'
RETURNING j.id, j.leased_by, j.lease_expires_at;

-- name: release
-- Graceful stop: hand the job back as pending with its cursor; the interrupted attempt does not count. A job a
-- cancel asked to stop (stop_reason) is not handed back to be run by the next worker: it ends abandoned with
-- the cancel's reason, stamped now, as the cancel promised. Returns the job as left.
{job_released}

-- name: read_coverage
-- What exists per owner and type for a batch of owners: the planner's one read per batch, from the coverage
-- table (one row per owner and type), so that it costs the same however long the owners' history is and
-- whatever retention has deleted. Owner-types already covered from the horizon start up to the current
-- period are left out, so a repeated plan reads next to nothing; the planning rule itself (planning.py)
-- decides what is missing for the rest, in the order of the owners and types given.
--
-- The current period comes per type (%(period_starts)s), and per owner and type for the owners with a period
-- of their own (%(own_owners)s, %(own_types)s, %(own_period_starts)s, pairwise; Owner.every).
--
-- Each owner's lane and lane width as the owner source gives them now come along (%(lanes)s, %(lane_widths)s,
-- pairwise with %(owners)s; sent as array literals, see store.array_literal). A row whose coverage records
-- another lane or width (or none) comes back too, with moved set, so that the run moves that owner's waiting
-- jobs (move_lanes); lacking says whether the planning rule has something to add. An owner the source has
-- not moved costs the run nothing more.
--
-- The batch's owner-types are joined to the queue's coverage rows in one pass (a hash join, for the planner's
-- batches of 20,000 owners; the server knows the arrays' lengths): probing each owner-type's row by the
-- primary key cost 5 us a probe, one second for 100,000 owners' 200,000 owner-types.
--
-- An owner-type with jobs but no coverage row yet (jobs inserted with SQL by hand, or a row deleted to make
-- the planner forget) gets its row here, computed once from its jobs; an upsert that merges, so two planners
-- doing it at once agree, and the row it returns is the one the planner goes on with.
WITH wanted AS (
    SELECT o.owner, o.lane, o.lane_width, t.type, t.horizon_start,
           coalesce(own.period_start, t.period_start) AS period_start, o.position AS owner_position,
           t.position AS type_position
    FROM unnest(%(owners)s::text[], %(lanes)s::text[], %(lane_widths)s::int[])
         WITH ORDINALITY AS o(owner, lane, lane_width, position)
    CROSS JOIN unnest(%(types)s::text[], %(horizon_starts)s::timestamptz[], %(period_starts)s::timestamptz[])
         WITH ORDINALITY AS t(type, horizon_start, period_start, position)
    -- The current period of the owner-types whose owner has a period of its own (usually none).
    LEFT JOIN unnest(%(own_owners)s::text[], %(own_types)s::text[], %(own_period_starts)s::timestamptz[])
         AS own(owner, type, period_start) ON own.owner = o.owner AND own.type = t.type
),
known AS (
    -- Each wanted owner-type with its coverage row, if it has one, that may lack something or has moved: the
    -- filter runs in the join, so an owner-type that is up to date (a repeated plan's every one) goes no
    -- further than the join and is never stored for the steps below.
    SELECT w.*, c.owner IS NOT NULL AS has_row, c.has_initial, c.initial_start, c.covered_until,
           c.first_created_at, c.last_created_at, c.lane AS covered_lane, c.lane_width AS covered_width
    FROM wanted AS w
    LEFT JOIN {schema}.coverage AS c ON c.queue = %(queue)s AND c.owner = w.owner AND c.type = w.type
    WHERE c.owner IS NULL
       OR NOT c.has_initial
       OR c.initial_start > w.horizon_start
       OR c.covered_until < w.period_start
       OR (c.covered_until IS NULL AND c.last_created_at < w.period_start)
       OR c.lane IS DISTINCT FROM w.lane
       OR c.lane_width IS DISTINCT FROM w.lane_width
),
recorded AS (
    INSERT INTO {schema}.coverage AS c
        (queue, owner, type, has_initial, initial_start, covered_until, first_created_at, last_created_at)
    SELECT %(queue)s, m.owner, m.type, e.has_initial, e.initial_start, e.covered_until, e.first_created_at,
           e.last_created_at
    FROM known AS m
    -- One index probe per owner-type without a row (usually none), never a read of the whole batch's jobs.
    CROSS JOIN LATERAL (
        SELECT count(*) AS jobs,
               coalesce(bool_or(j.mode = 'initial'), false) AS has_initial,
               min(j.window_start) FILTER (WHERE j.mode = 'initial') AS initial_start,
               max(j.window_end) AS covered_until,
               min(j.created_at) AS first_created_at,
               max(j.created_at) AS last_created_at
        FROM {schema}.jobs AS j
        WHERE j.queue = %(queue)s AND j.owner = m.owner AND j.type = m.type AND j.mode <> 'manual'
    ) AS e
    WHERE NOT m.has_row AND e.jobs > 0
    ORDER BY m.owner, m.type
    {coverage_merged}
    RETURNING c.owner, c.type, c.has_initial, c.initial_start, c.covered_until, c.first_created_at, c.last_created_at,
              c.lane, c.lane_width
),
existing AS (
    SELECT k.owner, k.type, k.horizon_start, k.period_start, k.lane AS wanted_lane, k.lane_width AS wanted_width,
           k.owner_position, k.type_position, k.has_row, k.has_initial, k.initial_start, k.covered_until,
           k.first_created_at, k.last_created_at, k.covered_lane, k.covered_width
    FROM known AS k WHERE k.has_row
    UNION ALL
    SELECT k.owner, k.type, k.horizon_start, k.period_start, k.lane, k.lane_width, k.owner_position,
           k.type_position, r.owner IS NOT NULL, r.has_initial, r.initial_start, r.covered_until,
           r.first_created_at, r.last_created_at, r.lane, r.lane_width
    FROM known AS k LEFT JOIN recorded AS r ON r.owner = k.owner AND r.type = k.type
    WHERE NOT k.has_row
)
SELECT e.owner, e.type, e.has_initial, e.initial_start, e.covered_until, e.first_created_at, found.lacking,
       found.moved, e.has_row
FROM existing AS e
CROSS JOIN LATERAL (
    SELECT coalesce(
               NOT e.has_row
               OR NOT e.has_initial
               OR e.initial_start > e.horizon_start
               OR e.covered_until < e.period_start
               OR (e.covered_until IS NULL AND e.last_created_at < e.period_start),
               false
           ) AS lacking,
           e.covered_lane IS DISTINCT FROM e.wanted_lane OR e.covered_width IS DISTINCT FROM e.wanted_width AS moved
) AS found
WHERE found.lacking OR found.moved
-- In the owner source's order, so that the jobs are numbered in it.
ORDER BY e.owner_position, e.type_position;

-- name: read_short_coverage
-- The queue's coverage rows short of their horizon or current period (the same test as read_coverage's
-- lacking), whoever their owner: the planner's read for the owners whose roster bucket it found settled
-- (planned_rosters), which have a coverage row per type in the lane the source gives, so that only what is
-- short matters. One pass over the queue's coverage rows that returns nothing when every owner is up to date;
-- the planner drops the rows of owners its source no longer lists. The current period comes per type and, for
-- the owner-types whose owner has a period of its own, per owner and type (as in read_coverage).
SELECT c.owner, c.type, c.has_initial, c.initial_start, c.covered_until, c.first_created_at
FROM {schema}.coverage AS c
JOIN unnest(%(types)s::text[], %(horizon_starts)s::timestamptz[], %(period_starts)s::timestamptz[])
     AS t(type, horizon_start, period_start) ON t.type = c.type
LEFT JOIN unnest(%(own_owners)s::text[], %(own_types)s::text[], %(own_period_starts)s::timestamptz[])
     AS own(owner, type, period_start) ON own.owner = c.owner AND own.type = c.type
WHERE c.queue = %(queue)s
  AND (NOT c.has_initial
       OR c.initial_start > t.horizon_start
       OR c.covered_until < coalesce(own.period_start, t.period_start)
       OR (c.covered_until IS NULL AND c.last_created_at < coalesce(own.period_start, t.period_start)));

-- name: planned_rosters
-- The digests of a queue's owner source the planner last found settled, per bucket (-1: the whole source).
SELECT bucket, digest FROM {schema}.planned_rosters WHERE queue = %(queue)s;

-- name: record_rosters
-- Record the digests of the buckets a planning run found settled (%(buckets)s and %(digests)s, pairwise).
INSERT INTO {schema}.planned_rosters AS r (queue, bucket, digest)
SELECT %(queue)s, b.bucket, b.digest
FROM unnest(%(buckets)s::int[], %(digests)s::text[]) AS b(bucket, digest)
ON CONFLICT (queue, bucket) DO UPDATE SET digest = excluded.digest
WHERE r.digest IS DISTINCT FROM excluded.digest
RETURNING r.bucket;

-- name: try_planning_lock
-- A whole-queue planning run holds the queue's planning key (wakeups.planning_key, one bigint) on its
-- connection while it runs; a run that finds it held does nothing. Session-level: released by
-- planning_unlock, or by the connection's end.
SELECT pg_try_advisory_lock(%(key)s::bigint) AS locked;

-- name: planning_unlock
SELECT pg_advisory_unlock(%(key)s::bigint) AS unlocked;

-- name: insert_planned
-- Insert planned jobs, skipping any whose key exists: concurrent planners create each job once; and widen
-- the owners' coverage rows by what was inserted, in the same statement, so that the coverage table never
-- lags the jobs it describes. Returns how many rows each type gained.
--
-- The rows come as two sets: the owner-types (%(owners)s, %(lanes)s, %(lane_widths)s and %(plans)s, pairwise;
-- large, sent as array literals, see store.array_literal), each naming by number the jobs it lacks, and those
-- few lists of jobs (%(plan_ids)s and the job columns, pairwise). Owners with the same coverage lack the same
-- jobs -- in a first plan every owner of a type lacks the same twenty-odd windows -- so the planner sends each
-- list once and the server joins, instead of sending, parsing and checking every row's window and key. The
-- rows go in the order given (owner-types, then each list's own order), so that the jobs are numbered in it.
WITH planned AS (
    SELECT o.owner, o.lane, o.lane_width, p.type, p.mode, p.priority, p.window_start, p.window_end, p.dedup_key
    FROM unnest(%(owners)s::text[], %(lanes)s::text[], %(lane_widths)s::int[], %(plans)s::int[])
         WITH ORDINALITY AS o(owner, lane, lane_width, plan, position)
    JOIN unnest(%(plan_ids)s::int[], %(types)s::text[], %(modes)s::text[], %(priorities)s::int[],
                %(window_starts)s::timestamptz[], %(window_ends)s::timestamptz[], %(dedup_keys)s::text[])
         WITH ORDINALITY AS p(plan, type, mode, priority, window_start, window_end, dedup_key, position)
         ON p.plan = o.plan
    ORDER BY o.position, p.position
),
inserted AS (
    INSERT INTO {schema}.jobs
        (queue, owner, lane, lane_width, type, mode, priority, window_start, window_end, dedup_key, next_run_at,
         created_at)
    SELECT %(queue)s, p.owner, p.lane, p.lane_width, p.type, p.mode, p.priority, p.window_start, p.window_end, p.dedup_key,
           coalesce(%(now)s::timestamptz, statement_timestamp()),
           coalesce(%(now)s::timestamptz, statement_timestamp())
    FROM planned AS p
    ON CONFLICT (queue, owner, type, dedup_key) DO NOTHING
    RETURNING owner, lane, lane_width, type, mode, window_start, window_end, created_at
),
covered AS (
    INSERT INTO {schema}.coverage AS c
        (queue, owner, type, has_initial, initial_start, covered_until, first_created_at, last_created_at, lane,
         lane_width)
    SELECT %(queue)s, i.owner, i.type,
           bool_or(i.mode = 'initial'),
           min(i.window_start) FILTER (WHERE i.mode = 'initial'),
           max(i.window_end),
           min(i.created_at),
           max(i.created_at),
           min(i.lane),
           min(i.lane_width)
    FROM inserted AS i
    WHERE i.mode <> 'manual'
    GROUP BY i.owner, i.type
    ORDER BY i.owner, i.type
    -- A new row records the lane its jobs were inserted in; an existing one keeps its own, which only
    -- move_lanes changes (it knows whether a job of the owner still runs in another lane).
    {coverage_merged}
    RETURNING 1
)
SELECT type, count(*) AS inserted FROM inserted GROUP BY type;

-- name: move_lanes
-- Waiting jobs follow their owner into the lane, and the lane width, the owner source gives it now. A running
-- job finishes in the lane and slot it started in: moving it could put two running jobs in one slot of a lane.
-- The owners' coverage rows record the lane and width (the run's next read of the coverage finds them moved
-- no more) once no job of the owner runs in another: a running job is not moved, and may wait again (handed
-- back, failed) in the lane it ran in, so until it ends the owner is looked at by every run.
--
-- Called for the owners read_coverage found moved. Each owner's jobs are found by an index probe of their
-- own (jobs_by_owner) and updated by id. The waiting statuses are named by what they are not, so that the
-- queue's partial indexes of waiting jobs do not match, and the OFFSET 0 and the array keep the planner from
-- joining the owners to the queue's whole waiting set: on a table whose statistics predate its rows (a first
-- plan) it otherwise read every waiting job once per owner, 12 s for a batch of 1,000 owners after the first
-- 27,000 jobs. Returns the jobs moved.
WITH owner_lanes AS (
    SELECT * FROM unnest(%(owners)s::text[], %(lanes)s::text[], %(lane_widths)s::int[]) AS o(owner, lane, lane_width)
),
moved AS (
    UPDATE {schema}.jobs AS j
    SET lane = o.lane,
        lane_width = o.lane_width
    FROM owner_lanes AS o
    WHERE j.id = ANY (ARRAY(
              SELECT waiting.id FROM owner_lanes AS mine
              CROSS JOIN LATERAL (
                  SELECT w.id FROM {schema}.jobs AS w
                  WHERE w.queue = %(queue)s
                    AND w.owner = mine.owner
                    AND w.status NOT IN ('running', 'completed', 'abandoned')  -- waiting, in a form no
                    AND (w.lane <> mine.lane OR w.lane_width <> mine.lane_width)  -- partial index matches
                  OFFSET 0
              ) AS waiting
          ))
      AND j.owner = o.owner
      AND j.status NOT IN ('running', 'completed', 'abandoned')  -- still waiting (read by id, as above)
    RETURNING j.id
),
recorded AS (
    UPDATE {schema}.coverage AS c
    SET lane = o.lane,
        lane_width = o.lane_width
    FROM owner_lanes AS o
    WHERE c.queue = %(queue)s AND c.owner = o.owner
      AND (c.lane IS DISTINCT FROM o.lane OR c.lane_width IS DISTINCT FROM o.lane_width)
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.jobs AS r
          WHERE r.queue = %(queue)s AND r.owner = o.owner AND r.status = 'running'
            AND (r.lane <> o.lane OR r.lane_width <> o.lane_width)
      )
    RETURNING 1
)
SELECT moved.id FROM moved;

-- name: enqueue
-- Put one job in by hand; a job with the same key is left as it is (and returned as NULL).
INSERT INTO {schema}.jobs
    (queue, owner, lane, lane_width, type, mode, priority, window_start, window_end, dedup_key, next_run_at,
     created_at)
VALUES (%(queue)s, %(owner)s, %(lane)s, %(lane_width)s, %(type)s, %(mode)s, %(priority)s, %(window_start)s, %(window_end)s,
        %(dedup_key)s,
        coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz, statement_timestamp()),
        coalesce(%(now)s::timestamptz, statement_timestamp()))
ON CONFLICT (queue, owner, type, dedup_key) DO NOTHING
RETURNING *;

-- name: insert_resync
-- A re-sync request and its jobs, in one statement: the request's row, then -- only when that row was new --
-- its jobs (manual, carrying the request's key, each in its owner's lane and width). A second call with the same
-- key inserts no row, hence no jobs; two calls racing with one key meet at the primary key, where the second
-- waits for the first to commit and then inserts nothing. The jobs' own keys (resync:<key>:<window start>) are
-- unique as well. Returns the request's row with made (the jobs inserted) when it was new; no row otherwise.
WITH request AS (
    INSERT INTO {schema}.resync_requests
        (queue, key, type, window_start, window_end, owners, reason, requested_by, requested_at, jobs)
    VALUES (%(queue)s, %(key)s, %(type)s, %(window_start)s, %(window_end)s, %(owners)s::text[], %(reason)s,
            %(requested_by)s, coalesce(%(now)s::timestamptz, statement_timestamp()), %(jobs)s)
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING *
),
inserted AS (
    INSERT INTO {schema}.jobs
        (queue, owner, lane, lane_width, type, mode, priority, window_start, window_end, dedup_key, request_key,
         next_run_at, created_at)
    SELECT %(queue)s, p.owner, p.lane, p.lane_width, %(type)s, %(mode)s, %(priority)s, p.window_start, p.window_end,
           p.dedup_key, request.key,
           coalesce(%(now)s::timestamptz, statement_timestamp()),
           coalesce(%(now)s::timestamptz, statement_timestamp())
    FROM request
    CROSS JOIN json_to_recordset(%(rows)s::json)
         AS p(owner text, lane text, lane_width int, window_start timestamptz, window_end timestamptz, dedup_key text)
    ON CONFLICT (queue, owner, type, dedup_key) DO NOTHING
    RETURNING 1
)
SELECT request.*, (SELECT count(*) FROM inserted)::int AS made
FROM request;

-- name: paused_among
-- Of the given owners, those paused now, with why: a re-sync is refused for them (their jobs would not run).
SELECT owner, paused_reason FROM {schema}.owners
WHERE queue = %(queue)s AND owner = ANY (%(owners)s::text[]) AND paused_at IS NOT NULL
ORDER BY owner;

-- name: coverage_of_owners
-- The coverage of one type of the given owners, for a re-sync to cut its windows where each owner's history slices
-- are (see rule.history_of): one probe of the coverage primary key per owner, read-only. An owner without a row
-- has no history.
SELECT owner, type, has_initial, initial_start, covered_until, first_created_at FROM {schema}.coverage
WHERE queue = %(queue)s AND type = %(type)s AND owner = ANY (%(owners)s::text[]);

-- name: resync_progress
-- The queue's re-sync requests (or the one of %(key)s), newest first, at most %(limit)s, each with its jobs by
-- state and the records they brought: windows done of total, what runs, what waits, what failed. Each request's
-- jobs are read through jobs_by_request, never the rest of the table.
SELECT r.*, 0 AS made, p.*
FROM (
    SELECT * FROM {schema}.resync_requests
    WHERE queue = %(queue)s AND (%(key)s::text IS NULL OR key = %(key)s)
    ORDER BY requested_at DESC, key
    LIMIT %(limit)s
) AS r
CROSS JOIN LATERAL (
    SELECT count(*)::int AS total,
           count(*) FILTER (WHERE j.status = 'completed')::int AS done,
           count(*) FILTER (WHERE j.status = 'running')::int AS running,
           count(*) FILTER (WHERE j.status = 'pending')::int AS pending,
           count(*) FILTER (WHERE j.status = 'failed')::int AS retrying,
           count(*) FILTER (WHERE j.status IN ('deferred', 'abandoned'))::int AS stopped,
           coalesce(sum(j.processed_count), 0)::bigint AS records,
           max(j.error) FILTER (WHERE j.status IN ('failed', 'deferred', 'abandoned')) AS last_error
    FROM {schema}.jobs AS j
    WHERE j.queue = r.queue AND j.request_key = r.key
) AS p
ORDER BY r.requested_at DESC, r.key;

-- name: resync_request
-- One re-sync request by its key, as recorded.
SELECT *, 0 AS made FROM {schema}.resync_requests WHERE queue = %(queue)s AND key = %(key)s;

-- name: requeue
-- Give failed, deferred and abandoned jobs (of one owner, type, job or re-sync request, or all) fresh attempts, due
-- now; cursors and counts are kept. A pending job set to run later (by hand, or enqueued with run_at) is brought
-- forward to now as well. Each failed, deferred or abandoned job requeued counts one more requeue
-- (requeue_count: a window abandoned again after several is stuck, and the health check says so).
-- The jobs of a cancelled re-sync request are left as they are: a cancelled request stays cancelled.
-- With %(force_deletions)s, a snapshot's landing may delete more of the owner's rows
-- than its declared share (kept once set: the job is the one that was refused).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
UPDATE {schema}.jobs
SET status = 'pending',
    attempt_count = 0,
    requeue_count = requeue_count + CASE WHEN status IN ('failed', 'deferred', 'abandoned') THEN 1 ELSE 0 END,
    next_run_at = clock.now,
    force_deletions = force_deletions OR %(force_deletions)s
FROM clock
WHERE queue = %(queue)s
  AND (status IN ('failed', 'deferred', 'abandoned') OR (status = 'pending' AND next_run_at > clock.now))
  AND (%(id)s::bigint IS NULL OR id = %(id)s)
  AND (%(owner)s::text IS NULL OR owner = %(owner)s)
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(request_key)s::text IS NULL OR request_key = %(request_key)s)
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.resync_requests AS r
      WHERE r.queue = jobs.queue AND r.key = jobs.request_key AND r.cancelled_at IS NOT NULL
  )
RETURNING id;

-- name: cancel
-- Stop an owner's work (of one type, or all), or a re-sync request's (%(request_key)s; the owner then NULL), saying
-- why (e.g. the account disconnected): its waiting jobs (pending, failed, deferred) are abandoned now, cursors
-- kept; its running jobs are asked to stop after their current page (the worker reads stop_reason with its next
-- cursor save and abandons the job with it). A request's row records when and by whom (%(by)s) it was
-- cancelled; a second cancel keeps the first. Neither an owner nor a request named: nothing is touched.
-- An abandoned job's next_run_at records when it was abandoned (see abandoned_between).
-- A waiting job's heartbeat_at is stamped with the cancel: retention keeps a cancelled job that long from then.
-- Returns how many of each, and found: false when the request named is not the queue's.
WITH request AS (
    UPDATE {schema}.resync_requests
    SET cancelled_at = coalesce(cancelled_at, %(now)s::timestamptz, statement_timestamp()),
        cancelled_by = CASE WHEN cancelled_at IS NULL THEN %(by)s ELSE cancelled_by END
    WHERE queue = %(queue)s AND key = %(request_key)s
    RETURNING key
),
stopped AS (
    -- One UPDATE for both, each row's fate read from the version it writes: a job taken while the cancel
    -- waited for its row (the cancel's snapshot saw it waiting) is asked to stop as a running job, not missed.
    UPDATE {schema}.jobs AS j
    SET status = CASE WHEN j.status <> 'running' THEN 'abandoned' ELSE j.status END,
        error = CASE WHEN j.status = 'running' THEN j.error ELSE %(error)s END,
        stop_reason = CASE WHEN j.status = 'running' THEN %(error)s ELSE j.stop_reason END,
        next_run_at = CASE WHEN j.status = 'running' THEN j.next_run_at
                           ELSE coalesce(%(now)s::timestamptz, statement_timestamp()) END,
        heartbeat_at = CASE WHEN j.status = 'running' THEN j.heartbeat_at
                            ELSE coalesce(%(now)s::timestamptz, statement_timestamp()) END
    WHERE j.queue = %(queue)s
      AND coalesce(%(owner)s::text, %(request_key)s::text) IS NOT NULL
      AND (%(owner)s::text IS NULL OR j.owner = %(owner)s)
      AND (%(type)s::text IS NULL OR j.type = %(type)s)
      AND (%(request_key)s::text IS NULL OR j.request_key = %(request_key)s)
      AND j.status IN ('pending', 'failed', 'deferred', 'running')
    RETURNING j.status
)
SELECT %(request_key)s::text IS NULL OR EXISTS (SELECT 1 FROM request) AS found,
       (SELECT count(*) FROM stopped WHERE status = 'abandoned')::int AS abandoned,
       (SELECT count(*) FROM stopped WHERE status = 'running')::int AS stopping;

-- name: release_running
-- An operator hands a running job back: pending at its cursor, due now, the attempt not counted. Its worker's
-- next fenced write finds the job gone and it stops; a page it still has in flight may run on (this is for a
-- worker that is stuck or gone). Returns the job.
UPDATE {schema}.jobs
SET status = 'pending',
    {handed_back}
WHERE id = %(id)s AND queue = %(queue)s AND status = 'running'
RETURNING id;

-- name: abandon_job
-- An operator gives up on one job, running or waiting: abandoned at its cursor with the reason as its error,
-- until a requeue. A worker running it stops at its next fenced write. Returns the job.
UPDATE {schema}.jobs
SET status = 'abandoned',
    error = %(error)s,
    {let_go}
WHERE id = %(id)s AND queue = %(queue)s AND status IN ('pending', 'running', 'failed', 'deferred')
RETURNING id;

-- name: list_jobs
-- Jobs by queue, optionally one owner, status, type and mode: newest first, from before a job id (the
-- previous page's last) when given.
SELECT *
FROM {schema}.jobs
WHERE queue = %(queue)s
  AND (%(owner)s::text IS NULL OR owner = %(owner)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(mode)s::text IS NULL OR mode = %(mode)s)
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: get_job
-- One job by id.
SELECT * FROM {schema}.jobs WHERE id = %(id)s;

-- name: initial_progress
-- How far an owner's first load is: its initial jobs by outcome, and the records stored so far.
SELECT count(*) AS total,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status = 'abandoned') AS abandoned,
       count(*) FILTER (WHERE status = 'running') AS running,
       coalesce(sum(processed_count), 0)::bigint AS records
FROM {schema}.jobs
WHERE queue = %(queue)s
  AND owner = %(owner)s
  AND mode = 'initial'
  AND (%(type)s::text IS NULL OR type = %(type)s);

-- name: queue_activity
-- Whether a queue (or one lane of it) has a job running, a job due, when the next waiting job is due and
-- when the first running job's lease lapses: what idle workers, triggers and the "drained" sensor decide on.
-- A paused owner's waiting jobs are neither due nor waiting here: they wait for a resume.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
SELECT EXISTS (
           SELECT 1 FROM {schema}.jobs
           WHERE queue = %(queue)s AND status = 'running' AND (%(lane)s::text IS NULL OR lane = %(lane)s)
       ) AS running,
       EXISTS (
           SELECT 1 FROM {schema}.jobs AS j, clock
           WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred')
             AND j.next_run_at <= clock.now AND (%(lane)s::text IS NULL OR j.lane = %(lane)s)
             AND {owner_of_j_not_paused}
       ) AS due,
       (
           SELECT min(j.next_run_at) FROM {schema}.jobs AS j
           WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred')
             AND (%(lane)s::text IS NULL OR j.lane = %(lane)s) AND {owner_of_j_not_paused}
       ) AS next_run_at,
       (
           SELECT min(lease_expires_at) FROM {schema}.jobs
           WHERE queue = %(queue)s AND status = 'running' AND (%(lane)s::text IS NULL OR lane = %(lane)s)
       ) AS lease_expires_at,
       clock.now AS now
FROM clock;

-- name: worker_wakeup
-- What an idle worker (or its trigger) waits for: whether a take would find a job now and it is this waiter's
-- turn, else the next instant that could change that (a waiting job becoming due, a lease running out).
--
-- A take finds a job in each free slot of a lane that has due jobs (as many as it has due jobs), and in each
-- running job whose lease expired: those are the takeable units. A due job in a full lane does not count: the lane's worker goes on
-- draining when its job ends. The waiters of one queue take turns instead of all waking for each unit: each
-- holds the queue's advisory key (%(waiter_class)s, %(waiter_object)s; wakeups.waiter_key) shared on its
-- connection, and its turn is its rank among the holders by backend pid. With k units, the k first waiters
-- wake and the rest sleep on (behind says how far back they are, for their fallback). Without a key the
-- caller is first in line. Lanes are walked one index probe each, and only until rank + 1 units are
-- found, so the answer costs the same with any history.
--
-- Also whether any job runs, any waiting job is due (in a free lane or not) and any job waits at all: what a
-- pool's idle slot decides to stop on (drained, settled) in the same look that tells it how long to sleep.
-- A paused owner's jobs count nowhere here: they wait for a resume, not for a worker.
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
),
me AS (
    SELECT CASE WHEN %(waiter_class)s::int IS NULL THEN 0
                ELSE (SELECT count(*) FROM pg_locks AS l
                      WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                        AND l.classid = %(waiter_class)s::int::oid AND l.objid = %(waiter_object)s::int::oid
                        AND l.database = (SELECT d.oid FROM pg_database AS d WHERE d.datname = current_database())
                        AND l.pid < pg_backend_pid())
           END::int AS rank
),
{lanes_with_waiting_work},
free_lanes AS (
    SELECT lane_units.n FROM lanes
    CROSS JOIN LATERAL (
        SELECT least(
            (SELECT count(*) FROM generate_series(0, head.lane_width - 1) AS slot(n)
             WHERE NOT EXISTS (
                 SELECT 1 FROM {schema}.jobs AS busy
                 WHERE busy.queue = %(queue)s AND busy.lane = lanes.lane AND busy.status = 'running'
                   AND busy.lane_slot = slot.n
             )),
            (SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.jobs AS j, clock
                 WHERE j.queue = %(queue)s AND j.lane = lanes.lane AND j.status IN ('pending', 'failed', 'deferred')
                   AND j.next_run_at <= clock.now AND {owner_of_j_not_paused}
                 LIMIT head.lane_width
             ) AS due)
        ) AS n
        FROM (
            SELECT j.lane_width FROM {schema}.jobs AS j, clock
            WHERE j.queue = %(queue)s AND j.lane = lanes.lane AND j.status IN ('pending', 'failed', 'deferred')
              AND j.next_run_at <= clock.now AND {owner_of_j_not_paused}
            LIMIT 1
        ) AS head
    ) AS lane_units
    WHERE lanes.lane IS NOT NULL AND lane_units.n > 0
    LIMIT (SELECT rank + 1 FROM me)
),
expired AS (
    SELECT 1 FROM {schema}.jobs AS j, clock
    WHERE j.queue = %(queue)s AND j.status = 'running' AND j.lease_expires_at < clock.now
    LIMIT (SELECT rank + 1 FROM me)
),
units AS (
    SELECT (SELECT coalesce(sum(n), 0) FROM free_lanes)::int + (SELECT count(*) FROM expired)::int AS n
)
SELECT units.n > me.rank AS takeable,
       CASE WHEN units.n > 0 AND units.n <= me.rank THEN me.rank - units.n + 1 ELSE 0 END::int AS behind,
       least(
           (
               SELECT min(j.next_run_at) FROM {schema}.jobs AS j
               WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred')
                 AND j.next_run_at > clock.now AND {owner_of_j_not_paused}
           ),
           (
               SELECT min(j.lease_expires_at) FROM {schema}.jobs AS j
               WHERE j.queue = %(queue)s AND j.status = 'running'
           )
       ) AS wake_at,
       clock.now AS now,
       EXISTS (SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = %(queue)s AND j.status = 'running') AS running,
       EXISTS (
           SELECT 1 FROM {schema}.jobs AS j
           WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred') AND j.next_run_at <= clock.now
             AND {owner_of_j_not_paused}
       ) AS due,
       EXISTS (
           SELECT 1 FROM {schema}.jobs AS j
           WHERE j.queue = %(queue)s AND j.status IN ('pending', 'failed', 'deferred') AND {owner_of_j_not_paused}
       ) AS waiting
FROM clock, me, units;

-- name: initial_load_waiting
-- Of the given owners, those whose initial load (of one type, or of every type) is not complete: nothing
-- initial planned yet, or an initial job not completed. With %(settled)s an abandoned job counts as done
-- (it will not run again without a person). What the initial-load sensor and its trigger wait on.
SELECT o.owner
FROM unnest(%(owners)s::text[]) AS o(owner)
WHERE NOT EXISTS (
          SELECT 1 FROM {schema}.jobs AS j
          WHERE j.queue = %(queue)s AND j.owner = o.owner AND j.mode = 'initial'
            AND (%(type)s::text IS NULL OR j.type = %(type)s)
      )
   OR EXISTS (
          SELECT 1 FROM {schema}.jobs AS j
          WHERE j.queue = %(queue)s AND j.owner = o.owner AND j.mode = 'initial'
            AND (%(type)s::text IS NULL OR j.type = %(type)s)
            AND j.status <> 'completed'
            AND NOT (%(settled)s AND j.status = 'abandoned')
      )
ORDER BY o.owner;

-- name: prune
-- Retention, one bounded batch: delete up to %(batch)s of a queue's jobs that ended longer than %(older_than)s
-- ago -- completed recurring and manual jobs (by completed_at), and cancelled ones (abandoned with an error
-- "Cancelled: …", by their heartbeat_at, stamped by the cancel). Initial jobs are kept (a bounded number per
-- owner: the record of the first load that progress and the initial-load sensor read), and so are failed,
-- deferred and other abandoned jobs (they wait for a person). Rows locked by anyone are skipped, never waited
-- on, so a worker is never held up; a job of an owner-type without a coverage row is skipped too, so that
-- nothing the planner needs is ever deleted. Each deleted job's owner-type records, of the deleted jobs that
-- count for freshness (j_counts_for_freshness), the newest completion (what freshness reads) and the newest reach
-- (window end, or completion for a snapshot: what lag is read from), widened only, in the same statement.
-- Returns how many were deleted.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) - %(older_than)s::interval AS cutoff
),
doomed AS (
    SELECT id FROM (
        SELECT j.id FROM {schema}.jobs AS j, clock
        WHERE j.queue = %(queue)s AND j.status = 'completed' AND j.mode <> 'initial'
          AND j.completed_at < clock.cutoff
        ORDER BY j.completed_at
        LIMIT %(batch)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS completed
    UNION ALL
    SELECT id FROM (
        SELECT j.id FROM {schema}.jobs AS j, clock
        WHERE j.queue = %(queue)s AND j.status = 'abandoned' AND j.mode <> 'initial'
          AND starts_with(j.error, 'Cancelled: ')
          AND coalesce(j.heartbeat_at, j.created_at) < clock.cutoff
        ORDER BY j.id
        LIMIT %(batch)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS cancelled
),
deleted AS (
    DELETE FROM {schema}.jobs AS j
    USING doomed
    WHERE j.id = doomed.id
      AND (j.mode = 'manual' OR EXISTS (
          SELECT 1 FROM {schema}.coverage AS c WHERE c.queue = j.queue AND c.owner = j.owner AND c.type = j.type
      ))
    RETURNING j.owner, j.type, j.status, j.mode, j.completed_at, j.window_end
),
noted AS (
    UPDATE {schema}.coverage AS c
    SET last_pruned_completion = greatest(c.last_pruned_completion, d.last_completion),
        last_pruned_reach = greatest(c.last_pruned_reach, d.last_reach)
    FROM (
        SELECT j.owner, j.type,
               max(j.completed_at) FILTER (WHERE {j_counts_for_freshness}) AS last_completion,
               max(coalesce(j.window_end, j.completed_at)) FILTER (WHERE {j_counts_for_freshness}) AS last_reach
        FROM deleted AS j
        GROUP BY j.owner, j.type
    ) AS d
    WHERE c.queue = %(queue)s AND c.owner = d.owner AND c.type = d.type
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted)::int AS deleted, (SELECT count(*) FROM doomed)::int AS looked_at;

-- name: freshness
-- When an owner's data was last brought up to date, per job type: the newest completion among its jobs that
-- count for freshness (j_counts_for_freshness: planned ones, never a manual job), or among those retention
-- deleted (recorded on its coverage row), whichever is later; NULL when none completed.
SELECT t.type,
       greatest(
           (SELECT max(j.completed_at) FROM {schema}.jobs AS j
            WHERE j.queue = %(queue)s AND j.owner = %(owner)s AND j.type = t.type
              AND {j_counts_for_freshness}),
           (SELECT c.last_pruned_completion FROM {schema}.coverage AS c
            WHERE c.queue = %(queue)s AND c.owner = %(owner)s AND c.type = t.type)
       ) AS completed_at
FROM unnest(%(types)s::text[]) AS t(type)
ORDER BY t.type;
-- name: announce_completed
-- What a queue completed since its last announcement (%(purpose)s 'announced'), claimed (completed_span):
-- folded per type and owner, a re-sync's jobs one row each, with their windows. Reads the completed jobs
-- through jobs_completed_recently.
WITH {completed_span}
SELECT j.type, j.owner, j.request_key,
       count(*)::int AS jobs, sum(j.processed_count)::bigint AS records,
       min(j.window_start) AS window_start, max(j.window_end) AS window_end,
       sum(j.inserted_count)::bigint AS inserted, sum(j.updated_count)::bigint AS updated,
       sum(j.unchanged_count)::bigint AS unchanged, sum(j.stale_count)::bigint AS stale,
       sum(j.deleted_count)::bigint AS deleted
{jobs_completed_in_span}
GROUP BY j.type, j.owner, j.request_key, CASE WHEN j.request_key IS NOT NULL THEN j.id END
ORDER BY j.type, j.owner, j.request_key NULLS FIRST, min(j.window_start) DESC NULLS LAST;

-- name: tally_records
-- Add what a queue's jobs completed since the last tally (%(purpose)s 'tallied'), claimed (completed_span),
-- to their owners' records: one write per owner that completed anything, however many of its jobs did. The
-- first tally of a queue counts every completed job still in the table. Returns how many owners it counted.
WITH {completed_span},
counted AS (
    SELECT j.owner, sum(j.processed_count)::bigint AS records
    {jobs_completed_in_span}
    GROUP BY j.owner
),
written AS (
    INSERT INTO {schema}.owners AS o (queue, owner, records, updated_at)
    SELECT %(queue)s, counted.owner, counted.records, statement_timestamp() FROM counted
    ORDER BY counted.owner
    ON CONFLICT (queue, owner) DO UPDATE SET records = o.records + excluded.records
    RETURNING 1
)
SELECT count(*)::int AS owners FROM written;

-- name: initial_loads_complete
-- The owners of a queue whose initial load (of one type, or of every type) is complete: they have initial jobs
-- and every one is completed. The asset watcher's trigger compares this between looks: an owner that joins it
-- has just finished its first load. Reads initial jobs only, never the recurring history.
SELECT owner
FROM {schema}.jobs
WHERE queue = %(queue)s
  AND mode = 'initial'
  AND (%(type)s::text IS NULL OR type = %(type)s)
GROUP BY owner
HAVING bool_and(status = 'completed')
ORDER BY owner;

-- name: connection_room
-- How many more connections the server has room for (short of those reserved for superusers), and this
-- role's CONNECTION LIMIT (NULL: none): a pool warns when it starts more slots than that.
SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
       - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS server_room,
       (SELECT r.rolconnlimit - (SELECT count(*) FROM pg_stat_activity WHERE usename = current_user)::int
        FROM pg_roles AS r
        WHERE r.rolname = current_user AND r.rolconnlimit >= 0) AS role_room;

-- name: notify
-- Wake idle workers of a queue (their triggers LISTEN on the channel): jobs were inserted, requeued or released.
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: queue_counts
-- How many jobs of a queue wait, run and are abandoned: the planning run's gauges. Each count is read from
-- the index that holds its status (waiting: jobs_waiting_by_time, running: jobs_one_running_per_lane).
SELECT (SELECT count(*) FROM {schema}.jobs
        WHERE queue = %(queue)s AND status IN ('pending', 'failed', 'deferred')) AS waiting,
       (SELECT count(*) FROM {schema}.jobs WHERE queue = %(queue)s AND status = 'running') AS running,
       (SELECT count(*) FROM {schema}.jobs WHERE queue = %(queue)s AND status = 'abandoned') AS abandoned;

-- name: window_lags
-- How far behind each listed owner is, per windowed type: now minus how far its data reaches (fresh_until_of_o_t:
-- the end of its newest completed planned window, or of the newest one retention deleted). An owner-type with no
-- completed window yet is still on its first load and has no row. Only lags over %(over)s (NULL: all), at most
-- %(limit)s rows. One probe of jobs_completed_reach and one of the coverage key per owner and type, whatever the
-- history holds.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
SELECT o.owner, t.type, fresh.fresh_until, clock.now - fresh.fresh_until AS lag
FROM unnest(%(owners)s::text[]) AS o(owner)
CROSS JOIN unnest(%(types)s::text[]) AS t(type)
CROSS JOIN clock
{fresh_until_of_o_t}
WHERE fresh.fresh_until IS NOT NULL
  AND (%(over)s::interval IS NULL OR clock.now - fresh.fresh_until > %(over)s::interval)
ORDER BY lag DESC, o.owner, t.type
LIMIT %(limit)s;

-- name: abandoned_between
-- Jobs abandoned in [since, until) (NULL: no bound), oldest first, at most %(limit)s.
-- An abandoned job's next_run_at is when it was abandoned: the finish that abandons it, a cancel and an
-- operator's abandon all set it to that instant.
SELECT *
FROM {schema}.jobs
WHERE queue = %(queue)s
  AND status = 'abandoned'
  AND (%(since)s::timestamptz IS NULL OR next_run_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR next_run_at < %(until)s::timestamptz)
ORDER BY next_run_at, id
LIMIT %(limit)s;

-- name: stuck_running
-- Running jobs whose last heartbeat is older than the queue's lease: the worker holding each stopped renewing
-- (it hangs, or died and no worker has taken the job over yet). Oldest heartbeat first, at most %(limit)s.
SELECT *
FROM {schema}.jobs
WHERE queue = %(queue)s
  AND status = 'running'
  AND heartbeat_at < coalesce(%(now)s::timestamptz, statement_timestamp()) - %(lease)s::interval
ORDER BY heartbeat_at, id
LIMIT %(limit)s;

-- name: owners_in_trouble
-- The owners of a queue that are degraded or failing, with their consecutive failures: whose recurring period
-- the planner stretches. Reads the partial index owners_in_trouble (its predicate written out, so that the
-- planner can use it), so it costs what the few in trouble cost.
SELECT owner, health, consecutive_failures
FROM {schema}.owners
WHERE queue = %(queue)s AND health <> 'healthy';

-- name: get_owner
-- One owner's state (its row in the owners table); no row: healthy and not paused.
SELECT * FROM {schema}.owners WHERE queue = %(queue)s AND owner = %(owner)s;

-- name: owner_known
-- Whether the table knows the owner: a job of it, or a row of its own (one probe of each key).
SELECT EXISTS (SELECT 1 FROM {schema}.jobs WHERE queue = %(queue)s AND owner = %(owner)s)
    OR EXISTS (SELECT 1 FROM {schema}.owners WHERE queue = %(queue)s AND owner = %(owner)s) AS known;

-- name: upsert_owner
-- Write one owner's whole state, creating its row when it has none; stamps updated_at. Safe to repeat: it
-- writes the same values again. (Changes made by the engine as things happen, such as a pause, have their own
-- statements that touch only their columns, so that two writers of different columns never undo each other.)
INSERT INTO {schema}.owners AS o (queue, owner, health, consecutive_failures, last_error, failing_since, paused_at,
                                  paused_reason, paused_by, last_clean_at, alerted_at, alerted_for, updated_at)
VALUES (%(queue)s, %(owner)s, %(health)s, %(consecutive_failures)s, %(last_error)s, %(failing_since)s,
        %(paused_at)s, %(paused_reason)s, %(paused_by)s, %(last_clean_at)s, %(alerted_at)s, %(alerted_for)s,
        coalesce(%(now)s, now()))
ON CONFLICT (queue, owner) DO UPDATE
SET health = excluded.health,
    consecutive_failures = excluded.consecutive_failures,
    last_error = excluded.last_error,
    failing_since = excluded.failing_since,
    paused_at = excluded.paused_at,
    paused_reason = excluded.paused_reason,
    paused_by = excluded.paused_by,
    last_clean_at = excluded.last_clean_at,
    alerted_at = excluded.alerted_at,
    alerted_for = excluded.alerted_for,
    updated_at = excluded.updated_at
RETURNING *;

-- name: noted_owners
-- Those of the listed owners %(owners)s with something to say about them: paused, degraded or failing (their
-- rows, read through owners_paused and owners_in_trouble), or with an abandoned job (read through
-- jobs_abandoned). Their conditions are counted by the owner gauges; every other listed owner is healthy or,
-- lagging, behind. An owner dropped from the source is left out, whatever its row says.
WITH noted AS (
    SELECT o.owner FROM {schema}.owners AS o
    WHERE o.queue = %(queue)s AND o.paused_at IS NOT NULL
    UNION
    SELECT o.owner FROM {schema}.owners AS o
    WHERE o.queue = %(queue)s AND o.health <> 'healthy'
    UNION
    SELECT j.owner FROM {schema}.jobs AS j
    WHERE j.queue = %(queue)s AND j.status = 'abandoned'
)
SELECT noted.owner, state.paused_at IS NOT NULL AS paused, coalesce(state.health, 'healthy') AS health,
       EXISTS (
           SELECT 1 FROM {schema}.jobs AS j
           WHERE j.queue = %(queue)s AND j.owner = noted.owner AND j.status = 'abandoned'
       ) AS abandoned
FROM noted
JOIN unnest(%(owners)s::text[]) AS listed(owner) ON listed.owner = noted.owner
LEFT JOIN {schema}.owners AS state ON state.queue = %(queue)s AND state.owner = noted.owner;

-- name: claim_owner_alerts
-- The owners of a queue to alert about now, each claimed once: an owner paused by its handler, or because its
-- credentials need reconnecting (the event 'paused:<when>') or, failing that, one whose health is failing ('failing:<since>'), whose alerted_for is not
-- already that event. The claim writes alerted_at and alerted_for in the same statement, so that however many
-- checks run, and however often, each event is alerted once; a new pause or a new spell of failing is a new
-- event. A check that names itself (%(claimant)s, e.g. an Airflow task instance's run) writes its name in
-- alerted_by and claims its own claims again: the same check run a second time reports what its first run
-- claimed. At most %(limit)s are claimed, by name, among those not yet alerted (those already alerted are left
-- out first, so that the owners beyond the first %(limit)s are never hidden behind them); the rest stay
-- unclaimed for the next check, and every row returned says how many were left (more_paused, more_failing).
-- Returns the claimed owners' rows by name; when none was claimed, one row whose owner columns are NULL.
WITH trouble AS (
    SELECT t.queue, t.owner, t.event FROM (
        SELECT o.queue, o.owner, o.alerted_for, o.alerted_by,
               CASE WHEN o.paused_at IS NOT NULL AND o.paused_by IN ('handler', 'credentials')
                    THEN 'paused:' || o.paused_at::text
                    ELSE 'failing:' || coalesce(o.failing_since::text, '') END AS event
        FROM {schema}.owners AS o
        WHERE o.queue = %(queue)s
          AND ((o.paused_at IS NOT NULL AND o.paused_by IN ('handler', 'credentials')) OR o.health = 'failing')
    ) AS t
    WHERE t.alerted_for IS DISTINCT FROM t.event OR t.alerted_by = %(claimant)s::text
),
chosen AS (
    SELECT * FROM trouble ORDER BY owner LIMIT %(limit)s
),
claimed AS (
    -- The condition again, on the row as it is now: a check that claimed it meanwhile has committed a new version.
    UPDATE {schema}.owners AS o
    SET alerted_at = coalesce(%(now)s::timestamptz, statement_timestamp()), alerted_for = chosen.event,
        alerted_by = %(claimant)s::text
    FROM chosen
    WHERE o.queue = chosen.queue AND o.owner = chosen.owner
      AND (o.alerted_for IS DISTINCT FROM chosen.event OR o.alerted_by = %(claimant)s::text)
    RETURNING o.*
),
left_over AS (
    SELECT count(*) FILTER (WHERE starts_with(t.event, 'paused:'))::int AS more_paused,
           count(*) FILTER (WHERE NOT starts_with(t.event, 'paused:'))::int AS more_failing
    FROM trouble AS t
    WHERE t.owner NOT IN (SELECT owner FROM chosen)
)
SELECT claimed.*, left_over.more_paused, left_over.more_failing
FROM left_over
LEFT JOIN claimed ON true
ORDER BY claimed.owner;

-- fragment: credential_state_columns
-- What may be read of an owner's credentials outside the engine: everything but the sealed value.
queue, owner, kind, expires_at, refreshed_at, needs_reconnecting_at, needs_reconnecting_reason, updated_at

-- name: set_credentials
-- A person sets an owner's credentials (sealed by the engine before they come here): they replace whatever was
-- set, and an owner that needed reconnecting no longer does. Safe to run twice: the second write is the same.
INSERT INTO {schema}.credentials AS c (queue, owner, kind, sealed, expires_at, updated_at)
VALUES (%(queue)s, %(owner)s, %(kind)s, %(sealed)s, %(expires_at)s,
        coalesce(%(now)s::timestamptz, statement_timestamp()))
ON CONFLICT (queue, owner) DO UPDATE SET
    kind = excluded.kind,
    sealed = excluded.sealed,
    expires_at = excluded.expires_at,
    refreshed_at = NULL,
    needs_reconnecting_at = NULL,
    needs_reconnecting_reason = NULL,
    updated_at = excluded.updated_at
RETURNING {credential_state_columns};

-- name: credential_states
-- The state of the queue's owners' credentials by owner name (only %(owner)s's when given, only those of the
-- names %(owners)s when given: a page of the Owners view), ``limit`` after %(after)s: never the sealed value.
SELECT {credential_state_columns}
FROM {schema}.credentials
WHERE queue = %(queue)s
  AND (%(owner)s::text IS NULL OR owner = %(owner)s::text)
  AND (%(owners)s::text[] IS NULL OR owner = ANY(%(owners)s::text[]))
  AND (%(after)s::text IS NULL OR owner > %(after)s::text)
ORDER BY owner
LIMIT %(limit)s;

-- name: sealed_credentials
-- The owner's sealed credentials, for the engine to open with its key; no row when none are set.
SELECT kind, sealed, expires_at, needs_reconnecting_at, needs_reconnecting_reason
FROM {schema}.credentials
WHERE queue = %(queue)s AND owner = %(owner)s;

-- name: lock_owner_credentials
-- The refresh of one owner's OAuth token is done by one caller at a time across every process and machine:
-- it holds the owner's credentials key (wakeups.credentials_key) until its transaction ends -- the refreshed
-- credentials committed, or nothing -- and the others wait here, then read what it stored.
SELECT true AS locked FROM (SELECT pg_advisory_xact_lock(%(key)s::bigint)) AS held;

-- name: store_refreshed_credentials
-- A refresh's result (sealed: the new access token, and the refresh token the provider rotated to, or the one it
-- kept): written, under lock_owner_credentials, before the new access token is used by anyone.
UPDATE {schema}.credentials
SET sealed = %(sealed)s, expires_at = %(expires_at)s,
    refreshed_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp())
WHERE queue = %(queue)s AND owner = %(owner)s
RETURNING {credential_state_columns};

-- name: credentials_need_reconnecting
-- The provider refused the owner's grant itself (invalid_grant): only new credentials from a person help. The
-- first reason stands; setting credentials (set_credentials) clears it.
UPDATE {schema}.credentials
SET needs_reconnecting_at = coalesce(needs_reconnecting_at, %(now)s::timestamptz, statement_timestamp()),
    needs_reconnecting_reason = coalesce(needs_reconnecting_reason, %(reason)s),
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp())
WHERE queue = %(queue)s AND owner = %(owner)s
RETURNING {credential_state_columns};
