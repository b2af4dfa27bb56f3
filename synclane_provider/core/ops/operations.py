"""What application code and operators do with the table: plan, enqueue, requeue, cancel, list, progress."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from synclane_provider.core.clock import Clock, database_clock, utc
from synclane_provider.core.credentials import Credentials, CredentialState, Sealer
from synclane_provider.core.db.database import Database, Session
from synclane_provider.core.db.store import Store
from synclane_provider.core.db.transient import Backoff, passes_from_anywhere
from synclane_provider.core.declare.declarations import Owner, Queue, SyncLane, WindowedType, checked_name
from synclane_provider.core.declare.owners import lane_limits, listed_owner, owners_of, resolve_owner
from synclane_provider.core.declare.ratelimit import check_units
from synclane_provider.core.errors import DeclarationError, UnknownOwnerError
from synclane_provider.core.numbers import whole
from synclane_provider.core.ops import health, resync
from synclane_provider.core.ops.health import HealthReport, QueueGauges
from synclane_provider.core.plan import planner, retention
from synclane_provider.core.plan.planner import PlanSummary
from synclane_provider.core.plan.retention import Pruned
from synclane_provider.core.plan.rule import instant_key, instant_text
from synclane_provider.core.records import (
    PAUSED_BY_CREDENTIALS,
    Activity,
    Cancelled,
    Job,
    OwnerState,
    Progress,
    ResyncProgress,
    ResyncRequest,
)
from synclane_provider.core.run.arrivals import Arrivals
from synclane_provider.core.run.outcomes import CANCELLED, storable_text
from synclane_provider.core.states import JobMode, JobStatus

log = logging.getLogger(__name__)

MAX_LIST = 10_000
"""The most jobs one :meth:`Operations.list_jobs` call returns."""

ANNOUNCE_SETTLE = timedelta(seconds=5)
"""How far behind now :meth:`Operations.announce` and :meth:`Operations.tally_records` stop: a job's completion is stamped in the statement that
writes it and visible once that commits, moments later (a page landed in the jobs database commits with it)."""

FIRST_LOOK = timedelta(hours=1)
"""How far back the first announcement of a queue reaches."""


class Operations:
    """The calls an application makes on its sync jobs. One connection, opened on first use and closed by
    :meth:`close` (or at the end of a ``with`` block).

    Time comes from ``clock`` (see :mod:`~synclane_provider.core.clock`: by default the database's own);
    every call that depends on it also takes ``now``, which wins over the clock for that call.

    ``sealer`` holds the Fernet key owners' credentials are encrypted with (see
    :mod:`~synclane_provider.core.credentials`); only the calls that set or read credentials need one.

    ``give_up_after`` is how long a call waits for an unreachable database before it raises
    :class:`~synclane_provider.core.errors.DatabaseUnavailableError`; with ``wait_out_refusals`` off, a
    connection the server turns down (no such database, a refused login) raises it at once (see
    :class:`~synclane_provider.core.db.database.Session`). A person at a command line waits seconds, not minutes.
    """

    def __init__(
        self,
        synclane: SyncLane,
        database: Database,
        *,
        clock: Clock = database_clock,
        sealer: Sealer | None = None,
        give_up_after: timedelta = timedelta(minutes=5),
        wait_out_refusals: bool = True,
    ) -> None:
        self.synclane = synclane
        self.session = Session(database, give_up_after=give_up_after, wait_out_refusals=wait_out_refusals)
        self.store = Store(self.session)
        self.clock = clock
        self.sealer = sealer or Sealer(None)

    def at(self, now: datetime | None) -> datetime | None:
        """The time a statement is to use: ``now`` when given, else the clock's (None: the database's own)."""
        return now if now is not None else self.clock()

    def plan(
        self,
        queue: str,
        *,
        owner: str | Owner | None = None,
        now: datetime | None = None,
        give_up_after: timedelta | None = None,
    ) -> PlanSummary:
        """Plan one queue now (every owner, or just ``owner``, e.g. right after an account connects).

        A database error that passes -- in the jobs table, or in the owner source reading its accounts (the
        server out of connections, a restart) -- is waited out with the workers' backoff for up to
        ``give_up_after`` (default: this object's session's, five minutes), then raised. Planning is
        repeatable, so a try cut short changes nothing.
        """
        declared = self.synclane.queue(queue)
        limit = give_up_after or self.session.give_up_after
        backoff = Backoff(give_up_after=limit.total_seconds())
        while True:
            try:
                with self.session.giving_up_after(limit):
                    return planner.plan(self.store, declared, now=self.at(now), owner=owner)
            except Exception as exc:
                wait = backoff.next() if passes_from_anywhere(exc) else None
                if wait is None:
                    raise
                log.warning("planning queue %s failed (%s); trying again in %.1fs", queue, exc, wait)
                time.sleep(wait)

    def enqueue(
        self,
        queue: str,
        owner: str,
        type: str,
        *,
        lane: str | None = None,
        window_start: datetime | None = None,
        window_end: datetime | None = None,
        key: str | None = None,
        run_at: datetime | None = None,
        now: datetime | None = None,
    ) -> Job | None:
        """Put one job in by hand, outside the plan. Returns it, or None if a job with the same key exists.

        The job runs in the lane the queue's owner source gives ``owner``, like its planned jobs; ``lane`` is
        only for an owner the source does not list (it is refused otherwise, unless it is the same lane).
        The key defaults to the window (``manual:<start>/<end>``) or, for a window-less job, to the enqueue
        time, so repeating a call for the same window adds nothing. The job is outside the plan: it moves neither
        the owner's coverage nor its freshness (see :meth:`freshness`).
        """
        declared = self.synclane.queue(queue)
        priority = declared.priority_of(type)
        listed = resolve_owner(declared, owner, lane=lane)
        now = self.at(now)
        for name, value in (
            ("window_start", window_start),
            ("window_end", window_end),
            ("run_at", run_at),
            ("now", now),
        ):
            if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
                raise DeclarationError(f"{name} must be a timezone-aware datetime, got {value!r}")
        if (window_start is None) != (window_end is None):
            raise DeclarationError(
                f"give both window_start and window_end, or neither (got {window_start!r}, {window_end!r})"
            )
        windowed = isinstance(declared.job_type(type), WindowedType)
        if windowed and window_start is None:
            raise DeclarationError(f"job type {type!r} is windowed: give the window_start and window_end of the job")
        if not windowed and window_start is not None:
            raise DeclarationError(f"job type {type!r} is a snapshot: its jobs have no window")
        if window_start is not None and window_end is not None and utc(window_start) >= utc(window_end):
            raise DeclarationError(f"window_start {window_start} must be before window_end {window_end}")
        if key is not None:
            checked_name("key", key)
        if key is None:
            if window_start is not None and window_end is not None:
                key = f"{instant_key(JobMode.MANUAL, window_start)}/{instant_text(window_end)}"
            else:
                key = f"{JobMode.MANUAL.value}:{utc(now or datetime.now(timezone.utc)):%Y-%m-%dT%H:%M:%SZ}"
        job = self.store.enqueue(
            queue=queue,
            owner=listed.id,
            lane=listed.lane_or_id,
            lane_width=listed.lane_width,
            type=type,
            mode=JobMode.MANUAL.value,
            priority=priority,
            window_start=window_start,
            window_end=window_end,
            dedup_key=key if key.startswith("manual:") else f"manual:{key}",
            run_at=run_at,
            now=now,
        )
        if job is not None:
            self.store.notify(queue)
        return job

    def resync(
        self,
        queue: str,
        type: str,
        start: datetime,
        end: datetime,
        *,
        owners: Sequence[str] | None = None,
        reason: str,
        key: str | None = None,
        by: str | None = None,
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> ResyncRequest:
        """Sync ``[start, end)`` of ``type`` again for ``owners`` (None: every owner the source lists), as one
        request; returns it, with ``made`` the jobs this call inserted and ``windows`` those it cut per owner.

        The range is cut like history (see :mod:`~synclane_provider.core.plan.resync`): where it meets an owner's
        history, on that history's own slices; newest window first, each job in its owner's lane and under its
        lane's budget and width; a snapshot type gets one snapshot job per owner. The planner never reads these
        jobs (no coverage, lag, progress or freshness moves), and a due planned job of the lane goes before them.
        Calling again with the same ``key`` makes nothing new, even when two calls race (a key already used for
        another range, type or owners is refused); without a key each call is a request of its own. ``by`` and
        ``reason`` say who asked and why.

        With ``dry_run`` nothing is made: after the same checks, the request comes back as it would be made, its
        windows in ``windows`` (the page's confirmation and ``airflow synclane resync --dry-run`` show them), or
        as it was made when ``key`` has been used already (nothing more would be).

        Refused with the bad value named: an unknown type, ``start`` not before ``end``, an owner the source
        does not list (any more), an owner that is paused, an empty reason. A request of every owner leaves the
        paused ones out.
        """
        return resync.request(
            self.store,
            self.synclane.queue(queue),
            type,
            start,
            end,
            owners=owners,
            reason=reason,
            key=key,
            by=by,
            now=self.at(now),
            dry_run=dry_run,
        )

    def resyncs(self, queue: str, *, key: str | None = None, limit: int = 100) -> list[ResyncProgress]:
        """The queue's re-sync requests (or the one of ``key``), newest first, at most ``limit`` (1 to 10,000):
        who asked and why, windows done of total, what runs, waits and failed, the records brought."""
        self.synclane.queue(queue)
        if not whole(limit, 1, MAX_LIST):
            raise ValueError(f"limit must be an integer from 1 to {MAX_LIST}, got {limit!r}")
        return self.store.resync_progress(queue, key=key, limit=limit)

    def requeue(
        self,
        queue: str,
        *,
        owner: str | None = None,
        type: str | None = None,
        job_id: int | None = None,
        request: str | None = None,
        now: datetime | None = None,
        force_deletions: bool = False,
    ) -> int:
        """Give failed, deferred and abandoned jobs (all, or of one owner, type, ``job_id`` or re-sync ``request``)
        fresh attempts from their cursors. Returns how many. The jobs of a cancelled re-sync request stay as the
        cancel left them. With ``force_deletions`` a snapshot's landing that was refused for the share of the
        owner's rows it would delete (see :class:`~synclane_provider.core.land.destination.Destination`) goes ahead.
        Refused for a ``request`` the queue has no request of, a type it does not declare and an owner it does
        not know (see :meth:`list_jobs`)."""
        declared = self.synclane.queue(queue)
        self._known_filters(declared, owner, type)
        if request is not None and self.store.resync_request(queue, request) is None:
            raise DeclarationError(f"queue {queue!r} has no re-sync request {request!r}")
        requeued = self.store.requeue(
            queue,
            owner=owner,
            type=type,
            job_id=job_id,
            request=request,
            now=self.at(now),
            force_deletions=force_deletions,
        )
        if requeued:
            self.store.notify(queue)
        return requeued

    def cancel(
        self,
        queue: str,
        owner: str | None = None,
        reason: str | None = None,
        *,
        type: str | None = None,
        request: str | None = None,
        by: str | None = None,
        now: datetime | None = None,
    ) -> Cancelled:
        """Stop the owner's work (of one type, or every type), e.g. because the account was disconnected; or a
        whole re-sync ``request`` (give one or the other).

        Its waiting jobs (pending, failed, deferred) are abandoned now; its running jobs are abandoned by their
        worker after the page in flight. Each keeps its cursor and gets ``Cancelled: <reason>`` as its error,
        so a :meth:`requeue` after the account reconnects continues where it stopped. Completed jobs are left
        as they are. The owner's next jobs are planned as long as the owner source lists it. A queue's
        ``retention`` keeps cancelled jobs that long from the cancel (``now``).

        A request's row records when and by whom (``by``) it was cancelled, and a :meth:`requeue` leaves its jobs
        as they are; its reason defaults to ``re-sync <key> cancelled by <by>``. Refused for a request the queue
        has no request of, for an owner's cancel without a reason, and for an owner or type it does not know.
        """
        declared = self.synclane.queue(queue)
        if (owner is None) == (request is None):
            raise DeclarationError(f"cancel an owner or a re-sync request of queue {queue!r} (one of them)")
        self._known_filters(declared, owner, type)
        if request is not None:
            reason = reason or f"re-sync {request} cancelled" + (f" by {by}" if by else "")
        elif reason is None:
            raise DeclarationError(f"say why owner {owner!r} of queue {queue!r} is cancelled (a reason)")
        cancelled = self.store.cancel(
            queue,
            owner=owner,
            type=type,
            request=request,
            by=by,
            error=storable_text(f"{CANCELLED}{reason}"),
            now=self.at(now),
        )
        if cancelled is None:
            raise DeclarationError(f"queue {queue!r} has no re-sync request {request!r}")
        if request is not None:
            log.info(
                "queue %s: re-sync %s cancelled (%s waiting, %s running)",
                queue,
                request,
                cancelled.abandoned,
                cancelled.stopping,
            )
        return cancelled

    def consume(self, queue: str, lane: str, units: int = 1, *, wait: bool = True) -> timedelta:
        """Take ``units`` of ``lane``'s rate budget for the app's own calls to the same API, at the lane's whole
        rate: the workers keep to their :attr:`~synclane_provider.core.declare.ratelimit.Rate.share` of it, and
        both together to the rate, in every window. With ``wait`` (the default) it sleeps until the calls may go;
        either way it returns how long that was (zero for a lane without a rate). Make the calls right after.

        Refused with the bad value named: an unknown queue, a lane no listed owner is in, ``units`` that are not a
        positive whole number or more than the lane's tightest window allows at once (``requests + burst``).
        """
        rates = tuple(rate.whole for rate in lane_limits(self.synclane.queue(queue), checked_name("lane", lane)))
        if not whole(units, 1):
            raise ValueError(f"consume() takes a positive number of units, got {units!r}")
        if not rates:
            return timedelta(0)
        check_units(f"consume({units})", units, rates, lane)
        seconds = self.store.take_lane_budget(
            queue,
            lane,
            cost=[rate.interval * units for rate in rates],
            tolerance=[rate.tolerance for rate in rates],
            interval=[rate.interval for rate in rates],
            now=None,
        )
        if wait and seconds > 0:
            time.sleep(seconds)
        return timedelta(seconds=seconds)

    def pause(
        self, queue: str, owner: str, reason: str, *, by: str = "operator", now: datetime | None = None
    ) -> OwnerState:
        """Pause an owner the owner source lists: none of its jobs is taken -- not one more page is requested for
        it -- and the planner gives it no new jobs until :meth:`resume`; a job of it running now is handed back at
        its cursor after its page in flight, or before its next page when it is waiting for one (its turn in a
        slow lane, a throttle on its lane, or taken for later with the previous job's finish). Its lane-mates run on. ``by`` says who paused it (a handler that
        raises :class:`~synclane_provider.core.errors.OwnerPaused` pauses its owner ``by='handler'``). A pause
        already in place is kept as it was. Returns the owner's state.

        Refused with the bad value named: an unknown queue, an owner the source does not list, an empty reason.
        """
        declared = self.synclane.queue(queue)
        listed = listed_owner(declared, owner)
        state = self.store.pause_owner(
            queue, listed.id, reason=checked_name("reason", reason), by=checked_name("by", by), now=self.at(now)
        )
        log.warning("queue %s: owner %s paused by %s: %s", queue, listed.id, state.paused_by, state.paused_reason)
        return state

    def resume(self, queue: str, owner: str, *, now: datetime | None = None) -> OwnerState:
        """Resume a paused owner: every job of it continues from its cursor, and it is planned at once, so that what
        the pause skipped is planned now (from where its coverage ends: one recurring window reaching over the
        pause). Resuming an owner that is not paused changes nothing. Returns the owner's state.

        Refused, as :meth:`pause` refuses it (``UnknownOwnerError``), for an owner the source does not list and
        that is not paused: a name mistyped must not look like a resume. An owner paused and dropped from the
        source since can still be resumed (its waiting jobs then run; nothing new is planned for it).
        """
        declared = self.synclane.queue(queue)
        checked_name("owner", owner)
        listed = owner in {listed.id for listed in owners_of(declared)}
        if not listed and not self.store.owner(queue, owner).paused:
            raise UnknownOwnerError(
                f"owner {owner!r} is not listed by the owner source of queue {queue!r}, and is not paused: "
                "there is nothing to resume"
            )
        state = self.store.resume_owner(queue, owner, now=self.at(now))
        if listed:
            self.plan(queue, owner=owner, now=now)
        self.store.notify(queue)
        log.info("queue %s: owner %s resumed", queue, owner)
        return state

    def set_credentials(
        self, queue: str, owner: str, credentials: Credentials, *, now: datetime | None = None
    ) -> CredentialState:
        """Keep ``credentials`` as the owner's, encrypted: they replace any set before, and an owner that needed
        reconnecting no longer does. An owner paused because its credentials needed reconnecting (``paused_by``
        ``credentials``) is resumed, as :meth:`resume` resumes it (what the pause skipped is planned now); a pause
        by anyone else stays. Returns their state, never a value.

        Refused with the bad value named: an unknown queue, an owner the source does not list; and with what is
        missing named when there is no key (``sealer``).
        """
        listed = listed_owner(self.synclane.queue(queue), owner)
        sealed = self.sealer.seal(credentials)
        state = self.store.set_credentials(
            queue,
            listed.id,
            kind=credentials.kind.value,
            sealed=sealed,
            expires_at=credentials.expires_at,
            now=self.at(now),
        )
        log.info("queue %s: owner %s's credentials set (%s)", queue, listed.id, credentials.kind.value)
        if self.store.owner(queue, listed.id).paused_by == PAUSED_BY_CREDENTIALS:
            self.resume(queue, listed.id, now=now)
        return state

    def credentials(self, queue: str, owner: str | None = None) -> list[CredentialState]:
        """The state of the queue's owners' credentials (only ``owner``'s when given), by owner: set, when they
        expire and were refreshed, whether they need reconnecting -- never a value. Every owner the source lists
        has an entry, ``not set`` when it has no credentials (the owner a worker pauses as needing reconnecting),
        and so has every owner whose credentials are kept though the source no longer lists it.

        Refused with the bad value named: an unknown queue, an owner with no credentials the source does not list.
        """
        declared = self.synclane.queue(queue)
        kept = {state.owner: state for state in self.store.credential_states(queue, owner=owner, limit=None)}
        if owner is not None:
            return [kept.get(owner) or CredentialState(queue, listed_owner(declared, owner).id)]
        names = sorted(kept.keys() | {listed.id for listed in owners_of(declared)})
        return [kept.get(name) or CredentialState(queue, name) for name in names]

    def owner(self, queue: str, owner: str) -> OwnerState:
        """The owner's state: health, consecutive failures, pause (a healthy owner that is not paused when it has
        no row)."""
        self.synclane.queue(queue)
        return self.store.owner(queue, checked_name("owner", owner))

    def owners(
        self, queue: str, *, troubled: bool = False, after: str | None = None, limit: int = 500
    ) -> list[OwnerState]:
        """The queue's owners that have a state of their own (any owner something has happened to), by name,
        ``limit`` at a time after ``after``; only those paused or not healthy with ``troubled``. An owner not
        listed is healthy and not paused."""
        self.synclane.queue(queue)
        if not whole(limit, 1, MAX_LIST):
            raise ValueError(f"limit must be an integer from 1 to {MAX_LIST}, got {limit!r}")
        return self.store.list_owners(queue, after=after, troubled=bool(troubled), limit=limit)

    def release(self, queue: str, job_id: int, *, now: datetime | None = None) -> bool:
        """Hand a running job back now: pending at its cursor, due at once, the attempt not counted.

        For a worker that is stuck (a page that hangs) or gone, when waiting for its lease to lapse is too
        slow: its next write finds the job no longer its own and it stops. A page it still has in flight may
        run on beside the job's next run. Returns False when the job was not running.
        """
        self.synclane.queue(queue)
        released = self.store.release_running(queue, job_id, now=self.at(now))
        if released:
            self.store.notify(queue)
        return released

    def abandon(self, queue: str, job_id: int, reason: str) -> bool:
        """Give up on one job, running or waiting: ``abandoned`` at its cursor with ``Abandoned: <reason>`` as
        its error, until a :meth:`requeue`. A worker running it stops at its next write. False when the job was
        already completed or abandoned."""
        self.synclane.queue(queue)
        return self.store.abandon_job(queue, job_id, error=storable_text(f"Abandoned: {reason}"), now=self.at(None))

    def list_jobs(
        self,
        queue: str,
        *,
        owner: str | None = None,
        status: JobStatus | str | None = None,
        type: str | None = None,
        mode: JobMode | str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Jobs of a queue, the most recently created first (by id), optionally of one owner, status, type and
        mode; at most ``limit`` of them (1 to 10,000). ``before`` pages on: only jobs with a smaller id than it
        (the last id of the previous page).

        Refused, with the bad value named, for a type the queue does not declare and an owner it does not know
        (neither listed by its source nor found in the table: a mistyped name, rather than an empty answer)."""
        declared = self.synclane.queue(queue)
        if type is not None:
            declared.job_type(type)
        if not whole(limit, 1, MAX_LIST):
            raise ValueError(f"limit must be an integer from 1 to {MAX_LIST}, got {limit!r}")
        status_value = JobStatus(status).value if status is not None else None
        mode_value = JobMode(mode).value if mode is not None else None
        found = self.store.list_jobs(
            queue, owner=owner, status=status_value, type=type, mode=mode_value, before=before, limit=limit
        )
        if not found and owner is not None:  # nothing found: a mistyped owner is said so (no look otherwise)
            self._known_owner(declared, owner)
        return found

    def _known_owner(self, declared: Queue, owner: str) -> str:
        """``owner`` when the table knows it (a job, or a row of its own: an account disconnected since still has
        its history) or the source lists it; refused by name, with the owners listed, otherwise."""
        if self.store.owner_known(declared.name, checked_name("owner", owner)):
            return owner
        return listed_owner(declared, owner).id

    def _known_filters(self, declared: Queue, owner: str | None, type: str | None) -> None:
        """A listing's or an action's owner and type filters, refused by name when they cannot match anything."""
        if type is not None:
            declared.job_type(type)
        if owner is not None:
            self._known_owner(declared, owner)

    def job(self, job_id: int) -> Job | None:
        return self.store.job(job_id)

    def progress(self, queue: str, owner: str, *, type: str | None = None) -> Progress:
        """How far the owner's first load is, e.g. to show "connecting…" without a status of your own."""
        declared = self.synclane.queue(queue)
        if type is not None:
            declared.job_type(type)
        done = self.store.initial_progress(queue, checked_name("owner", owner), type=type)
        if done.total == 0:  # nothing planned yet, or a mistyped owner: the latter is refused by name
            self._known_owner(declared, owner)
        return done

    def freshness(self, queue: str, owner: str) -> dict[str, datetime | None]:
        """When the owner's data of each job type was last brought up to date: the newest completion of its
        planned jobs, including jobs retention has deleted since; None for a type with nothing completed.

        A manual job -- a re-sync's, or one enqueued by hand -- never counts: it fetches a range again or once and
        says nothing of whether the plan keeps the owner up to date (a paused or failing owner must not look
        fresh after one). The owners view, the health check's lag and the gauges read freshness by the same
        rule (``j_counts_for_freshness`` in queries.sql)."""
        declared = self.synclane.queue(queue)
        return self.store.freshness(queue, owner, [t.name for t in declared.types])

    def prune(
        self,
        queue: str,
        *,
        older_than: timedelta | None = None,
        now: datetime | None = None,
        batch: int = retention.BATCH,
        max_batches: int = retention.MAX_BATCHES,
        time_budget: timedelta | None = None,
    ) -> Pruned:
        """Delete the queue's completed (recurring and manual) and cancelled jobs older than its ``retention``
        (or ``older_than``), in batches of ``batch`` jobs, each its own short statement that skips locked rows;
        at most ``max_batches`` of them, or until ``time_budget`` has passed (``Pruned.more`` then says that
        old jobs are left for the next call).

        Initial jobs, failed, deferred and abandoned jobs are kept; what the planner knows of the deleted
        jobs' windows is kept on their coverage rows, so nothing pruned is planned again (see
        :mod:`~synclane_provider.core.plan.retention`).
        """
        declared = self.synclane.queue(queue)
        limit = older_than if older_than is not None else declared.retention
        if limit is None:
            raise DeclarationError(
                f"queue {queue!r} declares no retention: declare one (Queue(..., retention=timedelta(days=30))) "
                "or pass older_than"
            )
        return retention.prune(
            self.store,
            queue,
            older_than=limit,
            now=self.at(now),
            batch=batch,
            max_batches=max_batches,
            time_budget=time_budget,
        )

    def owners_still_loading(
        self, queue: str, owners: Sequence[str], *, type: str | None = None, settled: bool = False
    ) -> list[str]:
        """Of ``owners``, those whose initial load (of ``type``, or every type) is not complete yet: nothing
        initial planned, or an initial job not completed (with ``settled``: an abandoned one counts as done)."""
        declared = self.synclane.queue(queue)
        if type is not None:
            declared.job_type(type)
        return self.store.owners_still_loading(queue, owners, type=type, settled=settled)

    def activity(self, queue: str, *, lane: str | None = None, now: datetime | None = None) -> Activity:
        """Whether the queue (or lane) has work running or due, and when the next waiting job is due."""
        self.synclane.queue(queue)
        return self.store.activity(queue, lane=lane, now=self.at(now))

    def check_health(
        self,
        queue: str,
        *,
        abandoned_since: datetime | None,
        abandoned_until: datetime | None = None,
        now: datetime | None = None,
        claimant: str | None = None,
    ) -> HealthReport:
        """What needs a person in ``queue``: jobs abandoned in ``[abandoned_since, abandoned_until)`` (None: no
        bound), running jobs whose worker stopped renewing their lease, owners paused by their handler or turned
        failing (once each; again to the same ``claimant``), and owners lagging more than the queue's ``max_lag``
        (see :mod:`~synclane_provider.core.ops.health`)."""
        return health.check(
            self.store,
            self.synclane.queue(queue),
            abandoned_since=abandoned_since,
            abandoned_until=abandoned_until,
            now=self.at(now),
            claimant=claimant,
        )

    def gauges(self, queue: str, *, now: datetime | None = None) -> QueueGauges:
        """Jobs waiting, running and abandoned in ``queue``, and its listed owners' largest freshness lag."""
        return health.gauges(self.store, self.synclane.queue(queue), now=self.at(now))

    def announce(self, queue: str, *, now: datetime | None = None) -> Arrivals:
        """What ``queue`` completed since its last announcement, per type and owner, and the mark moved past it:
        the ``extra`` of the asset events an assets task emits (:meth:`Arrivals.extra`).

        Read from the table, so that what every worker completed -- a slot that runs for an hour, a slot whose
        try failed after its jobs completed, a worker outside Airflow -- is announced by the next call, once.
        The span ends :data:`ANNOUNCE_SETTLE` before now (a completion commits moments after it is stamped); a
        queue never announced starts :data:`FIRST_LOOK` back. Moving the mark and reading the span are one
        statement: two calls at once never return the same job, and a span returned is not returned again,
        even when the caller fails before it emits (an event is a wake-up; a downstream DAG that must see
        every record reads the data).
        """
        self.synclane.queue(queue)
        arrivals = Arrivals()
        for completed in self.store.announce_completed(
            queue, settle=ANNOUNCE_SETTLE, first_look=FIRST_LOOK, now=self.at(now)
        ):
            arrivals.add_completed(completed)
        return arrivals

    def tally_records(self, queue: str, *, now: datetime | None = None) -> int:
        """Add to each owner's ``records`` what its jobs completed since the last tally: all its work, counted once
        per completion (the planning task runs this every plan interval). Returns how many owners it counted.

        Kept on the owner's row because summing an owner's jobs on every look would read its whole history; the
        figure is behind by at most a plan interval and :data:`ANNOUNCE_SETTLE`. The first tally of a queue
        counts every completed job still in the table.
        """
        self.synclane.queue(queue)
        return self.store.tally_records(queue, settle=ANNOUNCE_SETTLE, now=self.at(now))

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "Operations":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
