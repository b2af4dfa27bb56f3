"""The operator's read model: what the Airflow page and ``airflow synclane`` show, answered from indexes.

The views -- queues, lanes, owners, jobs -- each a fixed number of statements of ``monitor.sql`` (a queue: its
counts and its recent work; the jobs view: :meth:`Operations.list_jobs` and what holds the jobs it lists), so a
page costs the same with ten million rows as with a thousand: lanes and
owners come a listing at a time, walked in name order from after the last one shown. The actions the views
offer (requeue, cancel, plan) are :class:`~synclane_provider.core.ops.operations.Operations` calls, made by the
front ends directly: nothing here writes.

:func:`plain` turns every record here into JSON-ready values, the one shape both front ends print.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from synclane_provider.core.credentials import CredentialState
from synclane_provider.core.declare.declarations import Queue
from synclane_provider.core.declare.owners import lane_limits
from synclane_provider.core.declare.ratelimit import regrowth
from synclane_provider.core.numbers import whole
from synclane_provider.core.ops.operations import Operations
from synclane_provider.core.records import Job
from synclane_provider.core.states import WAITING, JobMode, JobStatus, OwnerCondition, owner_condition

MAX_LISTING = 500
"""The most lanes, owners or jobs one listing holds."""
COUNT_CAP = 10_000
"""Jobs of one status are counted up to this many (a bounded index read); past it a summary lists the status
in ``more_than``: there are more. The cost of a summary then stays the same however long the history grows."""

T = TypeVar("T")


@dataclass(frozen=True)
class QueueSummary:
    """One queue at a glance: jobs by status, the last hour's output, and how long the backlog has waited."""

    queue: str
    jobs: dict[str, int]
    """Every status, with 0 for those that have no job; a status in ``more_than`` has more than its count."""
    more_than: list[str]
    """The statuses whose jobs were counted only up to the cap (:data:`COUNT_CAP`): there are more."""
    done_last_hour: int
    records_last_hour: int
    oldest_waiting_age: timedelta | None
    """How long the longest-due waiting job has been due; None when nothing waiting is due. Work a pause holds
    (an owner paused, a lane throttled until later) is not counted: it is held, not overdue."""
    now: datetime
    owners_paused: int = 0
    """Owners paused: their waiting jobs are held until someone resumes them."""

    @property
    def abandoned(self) -> int:
        return self.jobs[JobStatus.ABANDONED.value]


@dataclass(frozen=True)
class RunningJob:
    """A job a lane runs now, in one of the lane's slots (``slot`` of ``width``; a lane one wide has slot 0)."""

    id: int
    owner: str
    type: str
    mode: str
    window_start: datetime | None
    window_end: datetime | None
    cursor: str | None
    records: int
    attempt: int
    worker: str
    started_at: datetime | None
    heartbeat_age: timedelta | None
    lease_expires_at: datetime | None
    slot: int
    width: int


@dataclass(frozen=True)
class Lane:
    """One busy lane: its running jobs in slot order (none, one, or up to the lane's width), its waiting jobs,
    and the latest error among them."""

    lane: str
    running: list[RunningJob]
    waiting: int
    next_due: datetime | None
    """When the next waiting job that no pause holds is due (None: none waits, or every one is held)."""
    last_error: str | None
    error_job_id: int | None
    held: int = 0
    """Waiting jobs of paused owners: held until they are resumed, never overdue."""
    throttled_until: datetime | None = None
    """Until when a server's named wait (a 429's Retry-After) holds the whole lane; None: it does not."""
    error_status: str | None = None
    """The status of the job whose error is shown: ``failed`` is a retry on its way, not trouble yet."""
    quota_until: datetime | None = None
    """Until when the lane waits out a quota used up (a reset further away than a worker waits): its jobs are
    handed back until then; None: it does not."""
    learnt_rate: float | None = None
    """The rate the lane keeps besides its declared one, in requests a second, as learnt from its API's answers
    (None: nothing learnt)."""
    learnt_from: str | None = None
    """What it was learnt from: ``headers`` (what is left until the reset) or ``refusals`` (halved by each 429,
    growing back towards the declared rate)."""


@dataclass(frozen=True)
class OwnerSummary:
    """One owner: its health and pause, its initial load, its freshness, and its jobs in trouble."""

    owner: str
    initial_total: int
    initial_completed: int
    initial_abandoned: int
    initial_running: int
    initial_records: int
    fresh_until: datetime | None
    """The end of the newest completed planned window (a snapshot: when it completed), for the owner's stalest
    type; manual jobs (a re-sync's, or by hand) never count, as in :meth:`Operations.freshness`."""
    fresh_type: str | None
    """That stalest type (the health check's lag looks at windowed types only, so it can differ)."""
    lag: timedelta | None
    """Now minus ``fresh_until``: how far behind the owner's data is; None until a job completed."""
    retrying: int
    """Failed jobs waiting for their next attempt: routine, not trouble, until their attempts are spent."""
    deferred: int
    """Jobs whose regular attempts are spent: each gets one last attempt when its lane is otherwise idle."""
    abandoned: int
    last_error: str | None
    error_job_id: int | None
    error_type: str | None
    error_status: str | None
    records: int = 0
    """Records its completed jobs stored, all its work (first load, recurring, re-sync, by hand), as far as the
    last tally (:meth:`~synclane_provider.core.ops.operations.Operations.tally_records`, every plan interval)."""
    condition: str = OwnerCondition.HEALTHY.value
    """The one answer a person reads (:class:`~synclane_provider.core.states.OwnerCondition`): paused, failing,
    degraded, behind or healthy."""
    health: str = "healthy"
    """``healthy``, ``degraded`` or ``failing``: how the owner's attempts have been ending (the owners table)."""
    consecutive_failures: int = 0
    paused_at: datetime | None = None
    """When the owner was paused (None: it is not): none of its jobs is taken until it is resumed."""
    paused_reason: str | None = None
    paused_by: str | None = None
    credentials: str = "not set"
    """The state of its credentials in words (:meth:`CredentialState.describe
    <synclane_provider.core.credentials.CredentialState.describe>`): ``not set``, ``set (oauth), expires in 4 min``,
    ``needs reconnecting: …``; never a value."""

    @property
    def initial_complete(self) -> bool:
        return self.initial_total > 0 and self.initial_completed == self.initial_total


@dataclass(frozen=True)
class Listing(Generic[T]):
    """Part of a view's rows, walked in order, and where the next part starts (None: this was the last).

    Called a listing, not a page: a page is what a handler fetches from an API in one request."""

    items: list[T]
    next: str | None
    held: dict[str, str] = dataclasses.field(default_factory=dict)
    """For a listing of jobs: the waiting ones a pause holds, by id, with what holds them (``owner paused``, or
    ``lane throttled until …``)."""


class Monitor:
    """The read model on an :class:`Operations` (its connection and its declaration)."""

    def __init__(self, operations: Operations, *, count_cap: int = COUNT_CAP) -> None:
        self.operations = operations
        self.count_cap = count_cap

    def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return self.operations.store.view(name, **params)

    def queue_names(self) -> list[str]:
        return [queue.name for queue in self.operations.synclane.queues]

    def queue(self, queue: str, *, now: datetime | None = None) -> QueueSummary:
        """One declared queue's summary."""
        self.operations.synclane.queue(queue)
        statuses = [status.value for status in JobStatus]
        counts = {status: 0 for status in statuses}
        more_than = []
        counted = self._rows("queue_counts", queue=queue, cap=self.count_cap)[0]
        for status in statuses:
            counts[status] = min(counted[status], self.count_cap)
            if counted[status] > self.count_cap:
                more_than.append(status)
        recent = self._rows("queue_recent", queue=queue, now=self.operations.at(now))[0]
        due_since = recent["due_since"]
        return QueueSummary(
            queue=queue,
            jobs=counts,
            more_than=more_than,
            done_last_hour=recent["done_last_hour"],
            records_last_hour=recent["records_last_hour"],
            oldest_waiting_age=recent["now"] - due_since if due_since is not None else None,
            now=recent["now"],
            owners_paused=recent["owners_paused"],
        )

    def queues(self, *, now: datetime | None = None) -> list[QueueSummary]:
        """Every declared queue's summary, in declared order."""
        return [self.queue(name, now=now) for name in self.queue_names()]

    def lanes(
        self, queue: str, *, after: str | None = None, limit: int = 50, now: datetime | None = None
    ) -> Listing[Lane]:
        """The queue's busy lanes (a job running or waiting) by name, ``limit`` at a time after ``after``."""
        self.operations.synclane.queue(queue)
        rows = self._rows("lanes", queue=queue, after=after, limit=_limit(limit), now=self.operations.at(now))
        lanes = []
        for name, lane_rows in itertools.groupby(rows, key=lambda row: row["lane"]):
            group = list(lane_rows)
            first = group[0]
            lanes.append(
                Lane(
                    lane=name,
                    running=[_running_job(row) for row in group if row["running_id"] is not None],
                    waiting=first["waiting"],
                    next_due=first["next_due"],
                    last_error=first["last_error"],
                    error_job_id=first["error_job_id"],
                    held=first["held"],
                    throttled_until=first["throttled_until"],
                    error_status=first["error_status"],
                    quota_until=first["quota_until"],
                    learnt_rate=self._learnt_rate(queue, name, first),
                    learnt_from=first["learnt_from"],
                )
            )
        return Listing(lanes, lanes[-1].lane if len(lanes) == limit else None)

    def owners(
        self,
        queue: str,
        *,
        after: str | None = None,
        owner: str | None = None,
        troubled: bool = False,
        limit: int = 50,
        now: datetime | None = None,
    ) -> Listing[OwnerSummary]:
        """The queue's owners by name, ``limit`` at a time after ``after``: just ``owner`` when given, only those
        with deferred or abandoned jobs, or paused, degraded or failing, with ``troubled``. Each owner's
        condition is behind when the health check would find it lagging (the queue's ``max_lag``)."""
        declared = self.operations.synclane.queue(queue)
        rows = self._rows(
            "owners",
            queue=queue,
            types=[t.name for t in declared.types],
            after=after,
            owner=owner,
            troubled=bool(troubled),
            limit=_limit(limit),
            now=self.operations.at(now),
        )
        behind = self._behind(declared, [row["owner"] for row in rows], now=now)
        credentials = {
            state.owner: state
            for state in self.operations.store.credential_states(
                queue, owners=[row["owner"] for row in rows], limit=max(len(rows), 1)
            )
        }
        owners = [
            OwnerSummary(
                owner=row["owner"],
                initial_total=row["initial_total"],
                initial_completed=row["initial_completed"],
                initial_abandoned=row["initial_abandoned"],
                initial_running=row["initial_running"],
                initial_records=row["initial_records"],
                fresh_until=row["fresh_until"],
                fresh_type=row["fresh_type"],
                lag=row["lag"],
                retrying=row["retrying"],
                deferred=row["deferred"],
                abandoned=row["abandoned"],
                last_error=row["last_error"],
                error_job_id=row["error_job_id"],
                error_type=row["error_type"],
                error_status=row["error_status"],
                records=row["records"],
                condition=owner_condition(
                    paused=row["paused_at"] is not None,
                    health=row["health"],
                    abandoned=row["abandoned"] > 0,
                    behind=row["owner"] in behind,
                ).value,
                health=row["health"],
                consecutive_failures=row["consecutive_failures"],
                paused_at=row["paused_at"],
                paused_reason=row["paused_reason"],
                paused_by=row["paused_by"],
                credentials=credentials.get(row["owner"], CredentialState(queue, row["owner"])).describe(row["now"]),
            )
            for row in rows
        ]
        more = owner is None and len(owners) == limit
        return Listing(owners, owners[-1].owner if more else None)

    def _behind(self, declared: Queue, owners: list[str], *, now: datetime | None) -> set[str]:
        """Those of ``owners`` whose data lags more than the queue's ``max_lag``, by the health check's rule."""
        if declared.max_lag is None or not declared.windowed_types or not owners:
            return set()
        lagging = self.operations.store.window_lags(
            declared.name,
            owners,
            declared.windowed_types,
            over=declared.max_lag,
            limit=len(owners) * len(declared.windowed_types),
            now=self.operations.at(now),
        )
        return {row.owner for row in lagging}

    def jobs(
        self,
        queue: str,
        *,
        owner: str | None = None,
        type: str | None = None,
        status: JobStatus | str | None = None,
        mode: JobMode | str | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> Listing[Job]:
        """Jobs newest first, filtered, ``limit`` at a time from before the job id ``before``."""
        jobs = self.operations.list_jobs(
            queue, owner=owner, type=type, status=status, mode=mode, before=before, limit=_limit(limit)
        )
        return Listing(jobs, str(jobs[-1].id) if len(jobs) == limit else None, self._holds(jobs))

    def _learnt_rate(self, queue: str, lane: str, row: dict[str, Any]) -> float | None:
        """The lane's learnt rate now (requests a second): as read from headers, or, cut by refusals, grown back
        since at the pace the workers grow it (``lane_gate.regrowth``), up to the declared rate."""
        interval: timedelta | None = row["learnt_interval"]
        if interval is None or interval <= timedelta(0):
            return None
        rate = 1 / interval.total_seconds()
        if row["learnt_from"] != "refusals":
            return rate
        try:
            declared = lane_limits(self.operations.synclane.queue(queue), lane)
        except Exception:  # noqa: BLE001 - a listing shows what it knows when the owner source fails
            return rate
        if not declared:
            return rate
        grown = rate + regrowth(declared) * max((row["now"] - row["learnt_at"]).total_seconds(), 0.0)
        ceiling = 1 / declared[0].interval.total_seconds()
        return None if grown >= ceiling else grown

    def _holds(self, jobs: list[Job]) -> dict[str, str]:
        """What holds each waiting job of ``jobs`` that a pause holds (see :attr:`Listing.held`)."""
        waiting = [job.id for job in jobs if job.status in WAITING]
        if not waiting:
            return {}
        held = {}
        for row in self._rows("holds", ids=waiting, now=self.operations.at(None)):
            if row["owner_paused"]:
                held[str(row["id"])] = "owner paused"
            elif row["quota_until"] is not None:
                held[str(row["id"])] = f"lane on quota until {row['quota_until']:%Y-%m-%d %H:%M:%S} UTC"
            else:
                held[str(row["id"])] = f"lane throttled until {row['throttled_until']:%Y-%m-%d %H:%M:%S} UTC"
        return held


def _running_job(row: dict[str, Any]) -> RunningJob:
    return RunningJob(
        id=row["running_id"],
        owner=row["running_owner"],
        type=row["running_type"],
        mode=row["running_mode"],
        window_start=row["running_window_start"],
        window_end=row["running_window_end"],
        cursor=row["running_cursor"],
        records=row["running_records"],
        attempt=row["running_attempt"],
        worker=row["running_worker"],
        started_at=row["running_started_at"],
        heartbeat_age=row["heartbeat_age"],
        lease_expires_at=row["running_lease_expires_at"],
        slot=row["running_slot"],
        width=row["running_width"],
    )


def _limit(limit: int) -> int:
    if not whole(limit, 1, MAX_LISTING):
        raise ValueError(f"limit must be an integer from 1 to {MAX_LISTING}, got {limit!r}")
    return limit


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: records as dicts, times as ISO 8601 text, durations as seconds."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
        if isinstance(value, QueueSummary):
            data["abandoned"] = value.abandoned
        if isinstance(value, OwnerSummary):
            data["initial_complete"] = value.initial_complete
        return data
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not isinstance(value, str):
        return [plain(item) for item in value]
    return value


__all__ = ["Lane", "Listing", "Monitor", "OwnerSummary", "QueueSummary", "RunningJob", "plain"]
