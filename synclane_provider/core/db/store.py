"""Every statement the engine runs against the jobs table, as a typed method returning frozen records.

This is the one place the synchronous engine names statements of ``queries.sql`` and ``monitor.sql``: the
worker, the runner, the planner, the operations and the monitor call these methods, never a statement by its
name. A :class:`Store` runs on one :class:`~synclane_provider.core.db.database.Session` (one connection,
reopened with backoff when it breaks). :mod:`~synclane_provider.core.db.watch`, its async counterpart for
triggers, names the few statements it runs itself; the migration engine runs ``schema_versions.sql``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from synclane_provider.core.credentials import CredentialState
from synclane_provider.core.db.connections import Connections
from synclane_provider.core.db.database import Session
from synclane_provider.core.db.wakeups import channel, credentials_key, payload, planning_key
from synclane_provider.core.records import (
    PAUSED_BY_HANDLER,
    Activity,
    Cancelled,
    Completed,
    Coverage,
    Freshness,
    Job,
    LandCounts,
    OwnerAlerts,
    OwnerState,
    Progress,
    QueueCounts,
    ResyncProgress,
    ResyncRequest,
    Wakeup,
)
from synclane_provider.core.redact import redact
from synclane_provider.core.states import JobStatus, OwnerHealth

MONITOR_VIEWS = "monitor.sql"
"""The file of the monitor's views, one statement each."""


@dataclass(frozen=True)
class Finish:
    """How a worker's attempt at a job ended: what it writes, fenced on its lease, as it lets go of the job."""

    job_id: int
    status: JobStatus
    processed_count: int
    error: str | None = None
    delay: timedelta = timedelta(0)
    """How long from now until the job is due again (failed, deferred)."""
    owner_failed: bool = False
    """The attempt failed in a way that counts against its owner's health (any error but a throttle)."""
    landed: LandCounts | None = None
    """What the job's pages landed, all its attempts (the completing page's counts too); None: as last saved."""


Windows = timedelta | Sequence[timedelta]
"""One value for a lane of one window, else one per window (shortest first)."""


def _windows(value: Windows) -> list[timedelta]:
    return [value] if isinstance(value, timedelta) else list(value)


@dataclass(frozen=True)
class Taken:
    """A job a worker has just leased, and the worker it was taken over from (None: it was waiting)."""

    job: Job
    lost_worker: str | None = None
    throttle_left: float = 0.0
    """Seconds left of the throttle on the job's lane: the worker waits them out before its first page."""


@dataclass(frozen=True)
class FinishAndTake:
    """What one ``finish_and_take`` did: whether the finish was written (None: there was none), what was taken."""

    finished: bool | None
    taken: Taken | None
    written: Finish | None = None
    """The finish as written: the one asked for, or an abandonment when a cancel had asked the job to stop."""


@dataclass(frozen=True)
class FinishedMany:
    """What one ``finish_many`` wrote: each finish as written (None: its lease was lost), in the order given."""

    written: list[Finish | None]
    lane_has_work: bool
    """A lane left by one of the jobs may have work due now: a take could find some."""


def _written(finish: Finish, row: dict[str, Any]) -> Finish | None:
    """``finish`` as the statement wrote it (a cancel's abandonment instead, when one had asked the job to stop);
    None when the write found the lease lost."""
    if not row["finished"]:
        return None
    status = JobStatus(row["finished_status"])
    delay = finish.delay if status is finish.status else timedelta(0)
    return Finish(finish.job_id, status, finish.processed_count, row["finished_error"], delay, landed=finish.landed)


@dataclass(frozen=True)
class SavedPage:
    """A cursor save (or lease renewal) that found the lease still this worker's."""

    lease_expires_at: datetime
    stop_reason: str | None
    """Set when a cancel asked the job to stop: the worker ends it after this page."""
    throttle_left: float = 0.0
    """Seconds left of the throttle on the job's lane: the worker waits them out before its next page."""
    owner_paused: bool = False
    """The job's owner has been paused: the worker hands the job back at this cursor instead of going on."""


@dataclass(frozen=True)
class LaneTake:
    """What one take from a lane's budget asks (take_lane_budget): per declared window, shortest first, the cost
    of the units taken, the burst and one unit's cost (``interval``, default the cost: one unit); and for what the
    lane learnt, the ``units``, how ``late`` the job's previous request left after its turn, the ``longest`` wait
    worth taking (a turn further away is not taken: the lane waits it out as a quota; None: any), and how fast a
    rate cut by refusals grows back (``regrowth``, requests a second per second). A take for ``history`` (a job
    not recurring, of type ``priority``, in a lane ``lane_width`` wide) keeps to its share of the budget while
    the lane's recurring work is due: its units cost ``history_cost`` in history's own turn (the cost over the
    share)."""

    cost: Windows = ()
    tolerance: Windows = ()
    interval: Windows | None = None
    units: int = 1
    late: timedelta = timedelta(0)
    longest: timedelta | None = None
    regrowth: float = 0.0
    history: bool = False
    priority: int = 0
    lane_width: int = 1
    history_cost: timedelta | None = None


@dataclass(frozen=True)
class LaneTurn:
    """A take's answer: the seconds to wait before sending, whether the lane keeps a learnt pace, and before a page
    its clearance (None when the job is no longer the worker's)."""

    wait: float
    paced: bool = False
    clearance: Clearance | None = None
    yield_lane: bool = False
    """A history job's page: the lane's recurring work waits for it, so it hands the job back after this page."""
    again: bool = False
    """History waiting for its share while fresh work is due: nothing was taken; wait ``wait``, then take again."""


@dataclass(frozen=True)
class Clearance:
    """What the table says of a job still leased to its worker, right before its next page is requested after a
    wait: whether the page may go."""

    stop_reason: str | None = None
    """Set when a cancel asked the job to stop: the worker hands it back, and it ends abandoned with this reason."""
    owner_paused: bool = False
    """The job's owner has been paused: not one more page is requested for it."""

    @property
    def held_back(self) -> str | None:
        """Why the page must not go (None: it may)."""
        if self.stop_reason is not None:
            return "a cancel asked it to stop"
        return "its owner was paused" if self.owner_paused else None


@dataclass(frozen=True)
class CoverageRow:
    """What exists for one owner and type that the planner may have to add to, or whose lane it must move."""

    owner: str
    type: str
    coverage: Coverage
    lacking: bool = True
    """The planning rule may have something to add (the coverage does not reach the horizon or the period)."""
    moved: bool = False
    """The owner source gives the owner another lane or lane width than its jobs were planned in."""
    has_row: bool = True
    """The owner-type had a coverage row before this read (False: a new owner or type, or a row deleted)."""


def _coverage_row(row: dict[str, Any], **found: bool) -> CoverageRow:
    """A coverage read's row (``found``: what the read compared, when it did)."""
    coverage = Coverage(
        has_initial=bool(row["has_initial"]),
        initial_start=row["initial_start"],
        covered_until=row["covered_until"],
        first_created_at=row["first_created_at"],
    )
    return CoverageRow(row["owner"], row["type"], coverage, **found)


def _planning_rules(
    types: Sequence[str],
    horizon_starts: Sequence[datetime | None],
    period_starts: Sequence[datetime],
    own_periods: Sequence[tuple[str, str, datetime]],
) -> dict[str, Any]:
    """The parameters both coverage reads judge coverage by: each type's horizon and current period, and the
    owner-types with a period of their own."""
    return {
        "types": list(types),
        "horizon_starts": list(horizon_starts),
        "period_starts": list(period_starts),
        "own_owners": array_literal(owner for owner, _, _ in own_periods),
        "own_types": array_literal(type_name for _, type_name, _ in own_periods),
        "own_period_starts": [start for _, _, start in own_periods],
    }


@dataclass(frozen=True)
class ListedJob:
    """One job of a numbered list of jobs that ``insert_planned`` inserts for every owner-type naming the list."""

    plan: int
    type: str
    mode: str
    priority: int
    window_start: datetime | None
    window_end: datetime | None
    dedup_key: str


def array_literal(values: Iterable[str]) -> str:
    """``{"a","b\\"c"}`` for ``a`` and ``b"c``: the text of a PostgreSQL array, for a parameter cast to ``text[]``.

    Written here because psycopg's array adapter checks every element with a regular expression: 0.45 s for
    the three arrays of 100,000 owners the planner sends, against 0.1 s for this (10 ms when no value needs
    escaping). Inside double quotes only a double quote and a backslash need escaping.
    """
    values = list(values)
    text = "".join(values)  # one look for a character to escape, at C speed: names rarely hold one
    if '"' not in text and "\\" not in text:
        return '{"' + '","'.join(values) + '"}' if values else "{}"
    return "{" + ",".join('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values) + "}"


class Store:
    """The jobs table through one session. Every method is one statement, safe to repeat after a lost reply."""

    def __init__(self, session: Session | Connections) -> None:
        """``session``: one connection's, or a slot's few connections lent statement by statement."""
        self.session = session

    def view(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """The rows of the monitor's view ``name`` in ``monitor.sql``, unprepared: its optional filters must be
        planned for their values every time."""
        return self.session.run(name, source=MONITOR_VIEWS, prepare=False, **params)

    @property
    def repeats(self) -> int:
        """How many statements the session has sent again after a broken connection (see Session.resent): a
        write that finds its job moved on right after a repeat may have been made by us."""
        return self.session.resent

    @property
    def schema(self) -> str:
        return self.session.database.schema

    # -- a worker's life with a job -------------------------------------------------------------------------

    def finish_and_take(
        self,
        *,
        queue: str,
        worker: str,
        lease: timedelta,
        finish: Finish | None,
        take: bool,
        now: datetime | None,
        health_after: tuple[int, int] = (3, 10),
    ) -> FinishAndTake:
        """Write how the last job ended (when ``finish``), then lease the next one (when ``take``), in one statement.

        The finished job's owner's health follows in the same statement: ``health_after`` is the queue's
        (degraded after, failing after) consecutive failures (``OwnerStretch``).

        A finish that completes an initial job also wakes the queue's listeners (see queries.sql). Raises
        ``UniqueViolation`` on ``jobs_one_running_per_lane_slot`` when another worker won the lane slot; the
        finish (and its notification) is then undone too.
        """
        row = self.session.one(
            "finish_and_take",
            finished=finish.job_id if finish else None,
            status=finish.status.value if finish else None,
            processed_count=finish.processed_count if finish else None,
            error=finish.error if finish else None,
            delay=finish.delay if finish else None,
            owner_failed=finish.owner_failed if finish else False,
            landed=finish.landed.as_list() if finish and finish.landed else None,
            queue=queue,
            worker=worker,
            lease=lease,
            take=take,
            now=now,
            **self._after_a_finish(queue, health_after),
        )
        assert row is not None
        taken = None if row["id"] is None else Taken(Job.from_row(row), row["lost_worker"], row["throttle_left"] or 0.0)
        if finish is None:
            return FinishAndTake(finished=None, taken=taken)
        return FinishAndTake(finished=row["finished"], taken=taken, written=_written(finish, row))

    def finish_many(
        self,
        ends: Sequence[tuple[str, Finish]],
        *,
        queue: str,
        now: datetime | None,
        health_after: tuple[int, int] = (3, 10),
    ) -> FinishedMany:
        """Write how several attempts ended, each fenced on its worker's lease, in one statement and with no take:
        ``ends`` pairs each job's worker with its finish, jobs of distinct owners. What each write was, in order.

        Everything :meth:`finish_and_take` does with a finish holds for each (a cancel's abandonment, the owner's
        health, a first load's notification); see ``finish_many`` in queries.sql.
        """
        finishes = [finish for _, finish in ends]
        landed = [finish.landed.as_list() if finish.landed else [None] * 5 for finish in finishes]
        rows = self.session.run(
            "finish_many",
            ids=[finish.job_id for finish in finishes],
            workers=[worker for worker, _ in ends],
            statuses=[finish.status.value for finish in finishes],
            processed_counts=[finish.processed_count for finish in finishes],
            inserted=[counts[0] for counts in landed],
            updated=[counts[1] for counts in landed],
            unchanged=[counts[2] for counts in landed],
            stale=[counts[3] for counts in landed],
            deleted=[counts[4] for counts in landed],
            errors=[finish.error for finish in finishes],
            delays=[finish.delay for finish in finishes],
            owner_failed=[finish.owner_failed for finish in finishes],
            queue=queue,
            now=now,
            **self._after_a_finish(queue, health_after),
        )
        return FinishedMany(
            written=[_written(finish, row) for finish, row in zip(finishes, rows, strict=True)],
            lane_has_work=any(row["lane_has_work"] for row in rows),
        )

    def _after_a_finish(self, queue: str, health_after: tuple[int, int]) -> dict[str, Any]:
        """What a finish's statement needs besides the finish: how the owner's health follows (``health_after``:
        degraded after, failing after), and the channel and payload of a first load's notification."""
        return {
            "degraded_after": health_after[0],
            "failing_after": health_after[1],
            "healthy": OwnerHealth.HEALTHY.value,
            "degraded": OwnerHealth.DEGRADED.value,
            "failing": OwnerHealth.FAILING.value,
            "channel": channel(self.schema),
            "payload": payload(queue),
        }

    def take_many(self, *, queue: str, workers: Sequence[str], lease: timedelta, now: datetime | None) -> list[Taken]:
        """Lease up to one job to each of ``workers`` (distinct ids, each holding no job), in one statement.

        The jobs ``finish_and_take`` takes, in the same order, at most one waiting job of a lane (see
        queries.sql); a job one of the workers already holds (the reply to this same call lost) goes back to it.
        The jobs taken in the order of ``workers``; fewer than asked when fewer are due in free lanes. Raises
        ``UniqueViolation`` on ``jobs_one_running_per_lane_slot`` when another worker won a lane slot: nothing
        is taken then.
        """
        if len(set(workers)) != len(workers):
            raise ValueError(f"take_many needs distinct worker ids, got {list(workers)}")
        rows = self.session.run("take_many", queue=queue, workers=list(workers), lease=lease, now=now)
        return [Taken(Job.from_row(row), row["lost_worker"], row["throttle_left"] or 0.0) for row in rows]

    def save_page(
        self,
        job_id: int,
        *,
        worker: str,
        cursor: str,
        processed_count: int,
        lease: timedelta,
        now: datetime | None,
        landed: LandCounts | None = None,
    ) -> SavedPage | None:
        """Store the cursor and absolute count after a page (and, when ``landed``, the job's land counts, absolute
        too) and renew the lease; None when the lease is lost."""
        row = self.session.one(
            "save_page",
            id=job_id,
            worker=worker,
            cursor=cursor,
            processed_count=processed_count,
            landed=landed.as_list() if landed is not None else None,
            lease=lease,
            now=now,
        )
        if row is None:
            return None
        return SavedPage(row["lease_expires_at"], row["stop_reason"], row["throttle_left"] or 0.0, row["owner_paused"])

    def take_lane_budget(
        self,
        queue: str,
        lane: str,
        *,
        cost: Windows,
        tolerance: Windows,
        now: datetime | None,
        interval: Windows | None = None,
    ) -> float:
        """Take ``cost`` of the lane's rate budget (``tolerance``: its burst); the seconds to wait before sending.
        A lane of several windows gives each window's cost and burst, shortest window first. ``interval``, one
        unit's cost, when ``cost`` is of several units sent at once (default: one unit)."""
        return self._take_lane_budget(
            LaneTake(cost=cost, tolerance=tolerance, interval=interval), queue=queue, lane=lane, now=now
        ).wait

    def take_turn(self, queue: str, lane: str, take: LaneTake, *, now: datetime | None) -> LaneTurn:
        """Take a turn in the lane's budget as ``take`` says (its declared windows and what the lane learnt)."""
        return self._take_lane_budget(take, queue=queue, lane=lane, now=now)

    def take_page_turn(
        self, queue: str, lane: str, take: LaneTake, *, job: int, worker: str, now: datetime | None
    ) -> LaneTurn:
        """:meth:`take_turn` before a page, which also says whether the page may go, read in the same statement
        (the turn's clearance None when the job is no longer the worker's)."""
        return self._take_lane_budget(take, queue=queue, lane=lane, now=now, job=job, worker=worker)

    def _take_lane_budget(
        self, take: LaneTake, *, queue: str, lane: str, now: datetime | None, job: int | None = None,
        worker: str | None = None,
    ) -> LaneTurn:  # fmt: skip
        costs, tolerances = _windows(take.cost), _windows(take.tolerance)
        intervals = costs if take.interval is None else _windows(take.interval)
        if len(costs) != len(tolerances) or len(costs) != len(intervals):
            raise ValueError(f"a take needs a cost, a burst and an interval for each window, got {take.cost!r}")
        # the units after the first need room too: a window lets them go its burst less that room ahead of its turn
        allowances = [t - (c - i) for c, t, i in zip(costs, tolerances, intervals)]
        row = self.session.one(
            "take_lane_budget",
            queue=queue,
            lane=lane,
            costs=costs,
            allowances=allowances,
            units=take.units,
            late=take.late,
            longest=take.longest,
            regrowth=take.regrowth,
            history=take.history,
            priority=take.priority,
            lane_width=take.lane_width,
            history_cost=take.history_cost,
            now=now,
            id=job,
            worker=worker,
        )
        assert row is not None
        clearance = Clearance(row["stop_reason"], row["owner_paused"]) if job is not None and row["held"] else None
        return LaneTurn(float(row["wait"]), bool(row["paced"]), clearance, bool(row["yield_lane"]), bool(row["again"]))

    def page_clearance(self, job_id: int, *, worker: str) -> Clearance | None:
        """Whether the job's next page may still go, asked right before it after a wait; None when the lease is
        lost."""
        row = self.session.one("page_clearance", id=job_id, worker=worker)
        if row is None:
            return None
        return Clearance(row["stop_reason"], row["owner_paused"])

    def learn_lane(
        self,
        queue: str,
        lane: str,
        *,
        pace: timedelta | None,
        hold: timedelta | None,
        quota: bool,
        now: datetime | None,
    ) -> datetime | None:
        """Record what an API's answer said of the lane's limit: its learnt ``pace``, and a ``hold`` until its reset
        when nothing is left (a ``quota`` when the reset is further away than a worker waits); returns until when
        the lane is held (None: not held)."""
        row = self.session.one("learn_lane", queue=queue, lane=lane, pace=pace, hold=hold, quota=quota, now=now)
        assert row is not None
        held_until: datetime | None = row["held_until"]
        return held_until

    def cut_lane_pace(
        self, queue: str, lane: str, *, unit: timedelta, regrowth: float, now: datetime | None
    ) -> timedelta | None:
        """Halve the lane's rate after a refusal its answer said nothing about; the learnt pace as cut (None: the
        lane follows its headers)."""
        row = self.session.one("cut_lane_pace", queue=queue, lane=lane, unit=unit, regrowth=regrowth, now=now)
        return None if row is None else row["learnt_interval"]

    def throttle_lane(self, queue: str, lane: str, *, wait: timedelta, now: datetime | None) -> datetime:
        """Hold the whole lane for ``wait`` (a wait a server named); returns until when it is held."""
        row = self.session.one("throttle_lane", queue=queue, lane=lane, wait=wait, now=now)
        assert row is not None
        throttled_until: datetime = row["throttled_until"]
        return throttled_until

    def renew_leases(
        self, held: Iterable[tuple[int, str, timedelta]], *, now: datetime | None
    ) -> dict[tuple[int, str], datetime]:
        """Extend the leases ``held`` (job id, the worker holding it, its lease) while slow pages are in flight, in
        one statement; returns the leases renewed, each ``(job id, worker)`` with its new expiry. A lease missing
        from them was lost."""
        leases = sorted(set(held))
        rows = self.session.run(
            "renew_leases",
            ids=[job_id for job_id, _, _ in leases],
            workers=[worker for _, worker, _ in leases],
            leases=[lease for _, _, lease in leases],
            now=now,
        )
        return {(row["id"], row["leased_by"]): row["lease_expires_at"] for row in rows}

    def release(self, job_id: int, *, worker: str, processed_count: int, now: datetime | None) -> Job | None:
        """Hand the job back as pending at its cursor, the attempt not counted; None when the lease is lost.

        The job comes back abandoned instead when a cancel had asked it to stop.
        """
        row = self.session.one("release", id=job_id, worker=worker, processed_count=processed_count, now=now)
        return Job.from_row(row) if row else None

    def pause_owner_and_release(
        self,
        job: Job,
        *,
        worker: str,
        processed_count: int,
        reason: str,
        error: str,
        now: datetime | None,
        by: str = PAUSED_BY_HANDLER,
    ) -> Job | None:
        """Pause the job's owner (by its handler, or ``by`` what else its handler raised for: ``credentials``;
        ``error`` its last error) and hand the job back at its cursor, the attempt not counted, in one statement;
        None when the lease is lost (the owner is paused all the same)."""
        row = self.session.one(
            "pause_owner_and_release",
            id=job.id,
            worker=worker,
            processed_count=processed_count,
            queue=job.queue,
            owner=job.owner,
            paused_reason=redact(reason),  # a handler's own words, which may quote what it was refused with
            paused_by=by,
            last_error=error,
            now=now,
        )
        return Job.from_row(row) if row else None

    # -- planning ---------------------------------------------------------------------------------------------

    def move_lanes(self, queue: str, owners: Sequence[str], lanes: Sequence[str], lane_widths: Sequence[int]) -> int:
        """Move the owners' waiting jobs into the lanes and widths given (pairwise); returns how many moved."""
        return len(
            self.session.run(
                "move_lanes",
                queue=queue,
                owners=list(owners),
                lanes=list(lanes),
                lane_widths=list(lane_widths),
                prepare=False,
            )
        )

    def read_coverage(
        self,
        queue: str,
        owners: Sequence[str],
        lanes: Sequence[str],
        lane_widths: Sequence[int],
        types: Sequence[str],
        horizon_starts: Sequence[datetime | None],
        period_starts: Sequence[datetime],
        own_periods: Sequence[tuple[str, str, datetime]] = (),
    ) -> list[CoverageRow]:
        """What exists per owner and type, for the owner-types that may lack something or whose owner has
        moved to another lane than ``lanes``/``lane_widths`` (pairwise with ``owners``; see queries.sql).
        ``own_periods``: (owner, type, period start) for the owner-types whose current period is not the type's."""
        rows = self.session.run(
            "read_coverage",
            queue=queue,
            owners=array_literal(owners),
            lanes=array_literal(lanes),
            lane_widths=array_literal(str(width) for width in lane_widths),
            **_planning_rules(types, horizon_starts, period_starts, own_periods),
            prepare=False,
        )
        return [_coverage_row(row, lacking=row["lacking"], moved=row["moved"], has_row=row["has_row"]) for row in rows]

    def read_short_coverage(
        self,
        queue: str,
        types: Sequence[str],
        horizon_starts: Sequence[datetime | None],
        period_starts: Sequence[datetime],
        own_periods: Sequence[tuple[str, str, datetime]] = (),
    ) -> list[CoverageRow]:
        """The queue's coverage rows short of their horizon or current period, whoever their owner (see
        queries.sql); ``own_periods`` as for :meth:`read_coverage`."""
        rows = self.session.run(
            "read_short_coverage",
            queue=queue,
            **_planning_rules(types, horizon_starts, period_starts, own_periods),
            prepare=False,
        )
        return [_coverage_row(row) for row in rows]

    def planned_rosters(self, queue: str) -> dict[int, str]:
        """The digests of the queue's owner source the planner last found settled, by bucket (-1: the whole)."""
        return {row["bucket"]: row["digest"] for row in self.session.run("planned_rosters", queue=queue)}

    def record_rosters(self, queue: str, digests: dict[int, str]) -> None:
        """Record ``digests`` (by bucket) as found settled."""
        self.session.run(
            "record_rosters", queue=queue, buckets=list(digests), digests=list(digests.values()), prepare=False
        )

    def owners_in_trouble(self, queue: str) -> dict[str, tuple[OwnerHealth, int]]:
        """The degraded and failing owners of ``queue``, with their health and consecutive failures."""
        rows = self.session.run("owners_in_trouble", queue=queue)
        return {row["owner"]: (OwnerHealth(row["health"]), row["consecutive_failures"]) for row in rows}

    def try_planning_lock(self, queue: str) -> bool:
        """Take the queue's planning lock on this session's connection, unless another planning run holds it."""
        row = self.session.one("try_planning_lock", key=planning_key(self.schema, queue))
        assert row is not None
        return bool(row["locked"])

    def planning_unlock(self, queue: str) -> None:
        """Let go of the queue's planning lock (a connection that broke meanwhile has let go of it already)."""
        self.session.run("planning_unlock", key=planning_key(self.schema, queue))

    def insert_planned(
        self,
        queue: str,
        owners: Sequence[str],
        lanes: Sequence[str],
        lane_widths: Sequence[int],
        plans: Sequence[int],
        jobs: Sequence[ListedJob],
        *,
        now: datetime | None,
    ) -> Counter[str]:
        """Insert, for each owner (pairwise with ``lanes``, ``lane_widths`` and ``plans``), the jobs of the list
        ``plans`` names, in that lane; skipping existing keys. Returns how many were inserted per type."""
        inserted = self.session.run(
            "insert_planned",
            queue=queue,
            now=now,
            owners=array_literal(owners),
            lanes=array_literal(lanes),
            lane_widths=array_literal(str(width) for width in lane_widths),
            plans=array_literal(str(plan) for plan in plans),
            plan_ids=[job.plan for job in jobs],
            types=[job.type for job in jobs],
            modes=[job.mode for job in jobs],
            priorities=[job.priority for job in jobs],
            window_starts=[job.window_start for job in jobs],
            window_ends=[job.window_end for job in jobs],
            dedup_keys=[job.dedup_key for job in jobs],
            prepare=False,
        )
        return Counter({row["type"]: row["inserted"] for row in inserted})

    # -- operations -------------------------------------------------------------------------------------------

    def enqueue(self, **values: Any) -> Job | None:
        """Insert one job by hand (columns as in queries.sql); None when a job with its key exists."""
        row = self.session.one("enqueue", **values)
        return Job.from_row(row) if row else None

    def resync_progress(self, queue: str, *, key: str | None, limit: int) -> list[ResyncProgress]:
        rows = self.session.run("resync_progress", queue=queue, key=key, limit=limit, prepare=False)
        return [ResyncProgress.from_row(row) for row in rows]

    def paused_among(self, queue: str, owners: Sequence[str]) -> dict[str, str | None]:
        """Of ``owners``, those paused now, with the reason given for each pause."""
        rows = self.session.run("paused_among", queue=queue, owners=array_literal(owners), prepare=False)
        return {row["owner"]: row["paused_reason"] for row in rows}

    def coverage_of(self, queue: str, type: str, owners: Sequence[str]) -> dict[str, Coverage]:
        """The coverage of ``type`` of those of ``owners`` that have a coverage row."""
        rows = self.session.run(
            "coverage_of_owners", queue=queue, type=type, owners=array_literal(owners), prepare=False
        )
        return {row["owner"]: _coverage_row(row).coverage for row in rows}

    def insert_resync(self, *, queue: str, key: str, rows_json: str, **request: Any) -> ResyncRequest:
        """Record a re-sync request and insert its jobs (given as a JSON array), unless its key is recorded
        already: then the recorded request, with nothing made."""
        row = self.session.one("insert_resync", queue=queue, key=key, rows=rows_json, prepare=False, **request)
        if row is None:
            recorded = self.resync_request(queue, key)
            assert recorded is not None
            return recorded
        return ResyncRequest.from_row(row)

    def resync_request(self, queue: str, key: str) -> ResyncRequest | None:
        """The queue's re-sync request of ``key`` as recorded; None when it has none."""
        row = self.session.one("resync_request", queue=queue, key=key)
        return ResyncRequest.from_row(row) if row else None

    def requeue(
        self,
        queue: str,
        *,
        owner: str | None,
        type: str | None,
        job_id: int | None = None,
        request: str | None = None,
        now: datetime | None,
        force_deletions: bool = False,
    ) -> int:
        """Requeue the queue's failed, deferred and abandoned jobs (of ``owner``, ``type``, ``job_id``, re-sync
        ``request``, or all); how many."""
        return len(
            self.session.run(
                "requeue",
                queue=queue,
                owner=owner,
                type=type,
                id=job_id,
                request_key=request,
                now=now,
                force_deletions=force_deletions,
            )
        )

    def cancel(
        self,
        queue: str,
        *,
        owner: str | None,
        type: str | None = None,
        request: str | None = None,
        by: str | None = None,
        error: str,
        now: datetime | None = None,
    ) -> Cancelled | None:
        """Cancel an owner's jobs (of ``type``, or all) or a re-sync request's (recorded on its row with ``by``);
        None when the queue has no request ``request``."""
        row = self.session.one(
            "cancel", queue=queue, owner=owner, type=type, request_key=request, by=by, error=error, now=now
        )
        assert row is not None
        return Cancelled(abandoned=row["abandoned"], stopping=row["stopping"]) if row["found"] else None

    def release_running(self, queue: str, job_id: int, *, now: datetime | None) -> bool:
        return bool(self.session.run("release_running", queue=queue, id=job_id, now=now))

    def abandon_job(self, queue: str, job_id: int, *, error: str, now: datetime | None = None) -> bool:
        return bool(self.session.run("abandon_job", queue=queue, id=job_id, error=error, now=now))

    def list_jobs(
        self,
        queue: str,
        *,
        owner: str | None,
        status: str | None,
        type: str | None,
        limit: int,
        mode: str | None = None,
        before: int | None = None,
    ) -> list[Job]:
        rows = self.session.run(
            "list_jobs",
            queue=queue,
            owner=owner,
            status=status,
            type=type,
            mode=mode,
            before=before,
            limit=limit,
            prepare=False,
        )
        return [Job.from_row(row) for row in rows]

    def job(self, job_id: int) -> Job | None:
        row = self.session.one("get_job", id=job_id)
        return Job.from_row(row) if row else None

    def initial_progress(self, queue: str, owner: str, *, type: str | None) -> Progress:
        row = self.session.one("initial_progress", queue=queue, owner=owner, type=type)
        assert row is not None
        return Progress(queue=queue, owner=owner, **row)

    def activity(self, queue: str, *, lane: str | None = None, now: datetime | None = None) -> Activity:
        row = self.session.one("queue_activity", queue=queue, lane=lane, now=now)
        assert row is not None
        return Activity(**row)

    def wakeup(self, queue: str, *, now: datetime | None = None) -> Wakeup:
        row = self.session.one("worker_wakeup", queue=queue, now=now, waiter_class=None, waiter_object=None)
        assert row is not None
        return Wakeup(**row)

    def owners_still_loading(self, queue: str, owners: Sequence[str], *, type: str | None, settled: bool) -> list[str]:
        """Of ``owners``, those whose initial load is not complete (with ``settled``: not settled)."""
        rows = self.session.run("initial_load_waiting", queue=queue, owners=list(owners), type=type, settled=settled)
        return [row["owner"] for row in rows]

    def prune(self, queue: str, *, older_than: timedelta, now: datetime | None, batch: int) -> tuple[int, int]:
        """One retention batch (see queries.sql): how many jobs it deleted, and how many it looked at."""
        row = self.session.one("prune", queue=queue, older_than=older_than, now=now, batch=batch)
        assert row is not None
        return row["deleted"], row["looked_at"]

    def freshness(self, queue: str, owner: str, types: Sequence[str]) -> dict[str, datetime | None]:
        """Per type, the newest completion of the owner's planned jobs, counting those retention deleted."""
        rows = self.session.run("freshness", queue=queue, owner=owner, types=list(types))
        return {row["type"]: row["completed_at"] for row in rows}

    def announce_completed(
        self, queue: str, *, settle: timedelta, first_look: timedelta, now: datetime | None
    ) -> list[Completed]:
        """What the queue completed since its announced mark, up to ``settle`` before now; the mark moves there."""
        rows = self.session.run(
            "announce_completed", queue=queue, purpose="announced", settle=settle, first_look=first_look, now=now
        )
        return [Completed.from_row(row) for row in rows]

    def tally_records(self, queue: str, *, settle: timedelta, now: datetime | None) -> int:
        """Add what the queue's jobs completed since its tallied mark to their owners' records; how many owners."""
        row = self.session.one("tally_records", queue=queue, purpose="tallied", settle=settle, first_look=None, now=now)
        assert row is not None
        return int(row["owners"])

    # -- owners ---------------------------------------------------------------------------------------------

    def owner(self, queue: str, owner: str) -> OwnerState:
        """The owner's state; a healthy owner that is not paused when it has no row yet."""
        row = self.session.one("get_owner", queue=queue, owner=owner)
        return OwnerState.from_row(row) if row else OwnerState(queue, owner)

    def owner_known(self, queue: str, owner: str) -> bool:
        """Whether the table knows the owner: it has a job, or a row of its own."""
        row = self.session.one("owner_known", queue=queue, owner=owner)
        return bool(row and row["known"])

    def paused_owners(self, queue: str) -> frozenset[str]:
        """The queue's paused owners."""
        return frozenset(row["owner"] for row in self.session.run("paused_owners", queue=queue))

    def pause_owner(self, queue: str, owner: str, *, reason: str, by: str, now: datetime | None) -> OwnerState:
        """Pause the owner (a pause already in place is kept as it was); returns its state as left."""
        row = self.session.one(
            "pause_owner", queue=queue, owner=owner, paused_reason=reason, paused_by=by, last_error=None, now=now
        )
        assert row is not None
        return OwnerState.from_row(row)

    def resume_owner(self, queue: str, owner: str, *, now: datetime | None) -> OwnerState:
        """Resume the owner (nothing happens to one not paused); returns its state as left."""
        row = self.session.one("resume_owner", queue=queue, owner=owner, now=now)
        return OwnerState.from_row(row) if row else OwnerState(queue, owner)

    def list_owners(self, queue: str, *, after: str | None, troubled: bool, limit: int) -> list[OwnerState]:
        """The queue's rows of the owners table by name, ``limit`` after ``after``; only paused or unhealthy ones
        with ``troubled``."""
        rows = self.session.run("list_owners", queue=queue, after=after, troubled=troubled, limit=limit)
        return [OwnerState.from_row(row) for row in rows]

    def noted_owners(self, queue: str, owners: Sequence[str]) -> dict[str, tuple[bool, str, bool]]:
        """Those of ``owners`` paused, degraded, failing or with an abandoned job: whether paused, their health,
        whether they have an abandoned job."""
        rows = self.session.run("noted_owners", queue=queue, owners=list(owners))
        return {row["owner"]: (row["paused"], row["health"], row["abandoned"]) for row in rows}

    def claim_owner_alerts(
        self, queue: str, *, limit: int, now: datetime | None, claimant: str | None = None
    ) -> OwnerAlerts:
        """The owners paused by their handler or failing that no check has alerted about yet, claimed (see
        queries.sql), at most ``limit`` by name: each such event is returned once, to one caller, and again to the
        same ``claimant``; those beyond ``limit`` are counted, and left for the next call."""
        rows = self.session.run("claim_owner_alerts", queue=queue, limit=limit, now=now, claimant=claimant)
        claimed = tuple(OwnerState.from_row(row) for row in rows if row["owner"] is not None)
        return OwnerAlerts(claimed, more_paused=rows[0]["more_paused"], more_failing=rows[0]["more_failing"])

    def upsert_owner(self, state: OwnerState, *, now: datetime | None = None) -> OwnerState:
        """Write the owner's whole state (its row made when missing), ``updated_at`` stamped now; returns the row."""
        row = self.session.one(
            "upsert_owner",
            queue=state.queue,
            owner=state.owner,
            health=state.health.value,
            consecutive_failures=state.consecutive_failures,
            last_error=state.last_error,
            failing_since=state.failing_since,
            paused_at=state.paused_at,
            paused_reason=state.paused_reason,
            paused_by=state.paused_by,
            last_clean_at=state.last_clean_at,
            alerted_at=state.alerted_at,
            alerted_for=state.alerted_for,
            now=now,
        )
        assert row is not None
        return OwnerState.from_row(row)

    # -- credentials ----------------------------------------------------------------------------------------

    def set_credentials(
        self, queue: str, owner: str, *, kind: str, sealed: str, expires_at: datetime | None, now: datetime | None
    ) -> CredentialState:
        """Replace the owner's credentials with ``sealed`` (no longer needing reconnecting); returns their state."""
        row = self.session.one(
            "set_credentials", queue=queue, owner=owner, kind=kind, sealed=sealed, expires_at=expires_at, now=now
        )
        assert row is not None
        return CredentialState.from_row(row)

    def credential_states(
        self,
        queue: str,
        *,
        owner: str | None = None,
        owners: Sequence[str] | None = None,
        after: str | None = None,
        limit: int | None = 500,
    ) -> list[CredentialState]:
        """The state of the queue's owners' credentials by owner (only ``owner``'s, or those of ``owners``, when
        given; ``limit`` None: all of them): never a value."""
        rows = self.session.run(
            "credential_states",
            queue=queue,
            owner=owner,
            owners=None if owners is None else list(owners),
            after=after,
            limit=limit,
            prepare=False,
        )
        return [CredentialState.from_row(row) for row in rows]

    def sealed_credentials(self, queue: str, owner: str) -> dict[str, Any] | None:
        """The owner's sealed credentials and their expiry, for the engine to open; None when none are set."""
        return self.session.one("sealed_credentials", queue=queue, owner=owner)

    def lock_owner_credentials(self, queue: str, owner: str) -> None:
        """Wait for, and hold until the transaction ends, the owner's credentials lock (a pinned session only)."""
        self.session.one("lock_owner_credentials", key=credentials_key(self.session.database.schema, queue, owner))

    def store_refreshed_credentials(
        self, queue: str, owner: str, *, sealed: str, expires_at: datetime | None, now: datetime | None
    ) -> CredentialState | None:
        """Write a refresh's result; None when the owner's credentials were removed meanwhile."""
        row = self.session.one(
            "store_refreshed_credentials", queue=queue, owner=owner, sealed=sealed, expires_at=expires_at, now=now
        )
        return CredentialState.from_row(row) if row else None

    def credentials_need_reconnecting(
        self, queue: str, owner: str, *, reason: str, now: datetime | None
    ) -> CredentialState | None:
        """Mark the owner's credentials as needing reconnecting (the first reason stands)."""
        row = self.session.one("credentials_need_reconnecting", queue=queue, owner=owner, reason=reason, now=now)
        return CredentialState.from_row(row) if row else None

    # -- health -------------------------------------------------------------------------------------------------

    def queue_counts(self, queue: str) -> QueueCounts:
        row = self.session.one("queue_counts", queue=queue)
        assert row is not None
        return QueueCounts(**row)

    def window_lags(
        self,
        queue: str,
        owners: Sequence[str],
        types: Sequence[str],
        *,
        over: timedelta | None,
        limit: int,
        now: datetime | None,
    ) -> list[Freshness]:
        """Per listed owner and windowed type with a completed window: how far behind it is, most behind first;
        only lags longer than ``over`` (None: all), at most ``limit``."""
        rows = self.session.run(
            "window_lags", queue=queue, owners=list(owners), types=list(types), over=over, limit=limit, now=now
        )
        return [Freshness(**row) for row in rows]

    def abandoned_between(
        self, queue: str, *, since: datetime | None, until: datetime | None, limit: int
    ) -> list[tuple[Job, int]]:
        """Jobs abandoned in ``[since, until)``, each with how many times it had been requeued before."""
        rows = self.session.run("abandoned_between", queue=queue, since=since, until=until, limit=limit)
        return [(Job.from_row(row), row["requeue_count"]) for row in rows]

    def stuck_running(self, queue: str, *, lease: timedelta, now: datetime | None, limit: int) -> list[Job]:
        rows = self.session.run("stuck_running", queue=queue, lease=lease, now=now, limit=limit)
        return [Job.from_row(row) for row in rows]

    def connection_room(self) -> int:
        """How many more connections the server, and this role's connection limit, let this role open."""
        row = self.session.one("connection_room")
        assert row is not None
        rooms: list[int] = [room for room in (row["server_room"], row["role_room"]) if room is not None]
        return min(rooms)

    def notify(self, queue: str) -> None:
        """Wake the idle workers of ``queue`` (their triggers LISTEN on the table's channel)."""
        self.session.run("notify", channel=channel(self.schema), payload=payload(queue))
