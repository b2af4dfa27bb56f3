"""Frozen records that cross the engine's boundary: a job row, a handler's page, summaries."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from synclane_provider.core.errors import HandlerResultError
from synclane_provider.core.numbers import whole
from synclane_provider.core.states import JobMode, JobStatus, OwnerHealth


@dataclass(frozen=True)
class Coverage:
    """What already exists for one owner and type, read in bulk before planning."""

    has_initial: bool = False
    initial_start: datetime | None = None
    """Start of the oldest initial slice."""
    covered_until: datetime | None = None
    """Newest window end among initial and recurring jobs."""
    first_created_at: datetime | None = None
    """When the owner's first job of this type was created."""


@dataclass(frozen=True)
class LandCounts:
    """What landing some records did to the table, row by row.

    ``stale``: rows older (by the version column) than the row stored, or than another row of the same key
    in the same page; none of them was written. ``unchanged``: rows equal to the row stored (content compared),
    none written either.

    >>> LandCounts(inserted=2, unchanged=1) + LandCounts(updated=1, stale=3)
    LandCounts(inserted=2, updated=1, unchanged=1, stale=3, deleted=0)
    """

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    stale: int = 0
    deleted: int = 0

    def __add__(self, other: LandCounts) -> LandCounts:
        if not other:
            return self
        return LandCounts(
            self.inserted + other.inserted,
            self.updated + other.updated,
            self.unchanged + other.unchanged,
            self.stale + other.stale,
            self.deleted + other.deleted,
        )

    def __bool__(self) -> bool:
        """Whether anything was landed: false for the counts of a job whose handler lands no rows itself."""
        return bool(self.inserted or self.updated or self.unchanged or self.stale or self.deleted)

    @property
    def written(self) -> int:
        """Rows written: inserted, updated or deleted."""
        return self.inserted + self.updated + self.deleted

    def as_list(self) -> list[int]:
        """The counts in the order of the job's columns (inserted, updated, unchanged, stale, deleted)."""
        return [self.inserted, self.updated, self.unchanged, self.stale, self.deleted]

    def describe(self) -> str:
        """``3 inserted, 1 updated, 0 unchanged, 2 stale, 0 deleted``: for a job's log line.

        >>> LandCounts(3, 1, stale=2).describe()
        '3 inserted, 1 updated, 0 unchanged, 2 stale, 0 deleted'
        """
        return ", ".join(f"{getattr(self, f.name)} {f.name}" for f in fields(self))

    def brief(self) -> str:
        """The counts that are not zero, for a table's cell; empty when nothing was landed.

        >>> LandCounts(60, 10, 5).brief()
        '60 inserted, 10 updated, 5 unchanged'
        """
        return ", ".join(f"{getattr(self, f.name)} {f.name}" for f in fields(self) if getattr(self, f.name))


@dataclass(frozen=True)
class Completed:
    """Jobs of one type and owner completed within an announcement's span, folded into one: how many, their
    records, the span of their windows and what their pages landed. A re-sync's job is one of its own
    (``request_key`` set), so that its window is announced as the range fetched again."""

    type: str
    owner: str
    request_key: str | None
    jobs: int
    records: int
    window_start: datetime | None
    window_end: datetime | None
    landed: LandCounts

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Completed:
        counts = LandCounts(row["inserted"], row["updated"], row["unchanged"], row["stale"], row["deleted"])
        return cls(
            row["type"],
            row["owner"],
            row["request_key"],
            row["jobs"],
            row["records"],
            row["window_start"],
            row["window_end"],
            counts,
        )


@dataclass(frozen=True)
class Job:
    """One row of the jobs table, as read; it is never written back whole. A handler receives it with its page's
    context (:class:`~synclane_provider.core.page_context.PageJob`)."""

    id: int
    queue: str
    owner: str
    lane: str
    type: str
    mode: JobMode
    status: JobStatus
    priority: int
    window_start: datetime | None
    window_end: datetime | None
    dedup_key: str
    cursor: str | None
    processed_count: int
    attempt_count: int
    error: str | None
    next_run_at: datetime
    leased_by: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    completed_at: datetime | None
    stop_reason: str | None
    lane_width: int = 1
    """How many jobs of the lane may run at once (the owner source's ``Owner.lane_width``)."""
    lane_slot: int = 0
    """Which of the lane's slots (0 … lane_width - 1) the job holds while it runs; the last one it held after."""
    force_deletions: bool = False
    """Requeued with force: a snapshot's landing deletes the rows it did not see even past its declared share."""
    request_key: str | None = None
    """The key of the re-sync request that made the job (see :class:`ResyncRequest`); None for any other job."""
    inserted_count: int = 0
    """Rows the job's committed pages inserted into their destination tables (see :class:`LandCounts`)."""
    updated_count: int = 0
    unchanged_count: int = 0
    stale_count: int = 0
    deleted_count: int = 0

    @property
    def land_counts(self) -> LandCounts:
        """What the job's committed pages, in all its attempts, did to their destination tables."""
        return LandCounts(
            self.inserted_count, self.updated_count, self.unchanged_count, self.stale_count, self.deleted_count
        )

    def spend(self, units: int = 1) -> timedelta:
        """Take ``units`` more of the lane's rate budget: a row outside a worker's page has none to take, and waits
        for nothing. A handler's job is a :class:`~synclane_provider.core.page_context.PageJob`, whose page spends
        them (see :meth:`PageJob.spend <synclane_provider.core.page_context.PageJob.spend>`)."""
        return timedelta(0)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Job":
        """From a row of the table; times in UTC whatever the connection's ``TimeZone`` setting.

        Every worker turns a row into a job per take, so this fills the frozen instance's attributes directly
        rather than through the generated ``__init__`` (one ``object.__setattr__`` per field): the values are
        the table's, already of the fields' types once the enums and times are converted.
        """
        values = {name: row[name] for name in _FIELDS}
        values["mode"] = _MODES[values["mode"]]
        values["status"] = _STATUSES[values["status"]]
        for name in _TIMES:
            value = values[name]
            if value is not None and value.tzinfo is not timezone.utc:
                values[name] = value.astimezone(timezone.utc)
        job = object.__new__(cls)
        job.__dict__.update(values)
        return job

    def describe(self) -> str:
        """A short human label for logs: ``globex/orders [2026-08-08 → 2026-09-07] #33``."""
        if self.window_start is not None and self.window_end is not None:
            window = f" [{self.window_start:%Y-%m-%d %H:%M} → {self.window_end:%Y-%m-%d %H:%M}]"
        else:
            window = ""
        return f"{self.owner}/{self.type}{window} #{self.id}"


_FIELDS = tuple(f.name for f in fields(Job))
_MODES = {mode.value: mode for mode in JobMode}
_STATUSES = {status.value: status for status in JobStatus}
_TIMES = (
    "window_start",
    "window_end",
    "next_run_at",
    "lease_expires_at",
    "created_at",
    "started_at",
    "heartbeat_at",
    "completed_at",
)


@dataclass(frozen=True)
class Page:
    """What a handler returns for one page: where the next page starts (None: done) and how many records it stored."""

    next_cursor: str | None
    count: int = 0

    @classmethod
    def check(cls, value: object, *, job_type: str, counted: int = 0) -> "Page":
        """Return ``value`` if it is a well-formed page the table can store after ``counted`` records, else raise
        a :class:`HandlerResultError` naming what is wrong (a value the table refused would strand the job)."""
        if not isinstance(value, Page):
            raise HandlerResultError(
                f"handler of job type {job_type!r} returned {type(value).__name__} {_short(value)}, expected a Page"
            )
        if value.next_cursor is not None and not isinstance(value.next_cursor, str):
            raise HandlerResultError(
                f"handler of job type {job_type!r} returned a next_cursor of type "
                f"{type(value.next_cursor).__name__} ({_short(value.next_cursor)}), expected str or None"
            )
        if isinstance(value.next_cursor, str) and "\x00" in value.next_cursor:
            raise HandlerResultError(f"handler of job type {job_type!r} returned a next_cursor containing NUL")
        if isinstance(value.next_cursor, str) and not _encodable(value.next_cursor):
            raise HandlerResultError(
                f"handler of job type {job_type!r} returned a next_cursor that is not valid unicode "
                f"(a lone surrogate): {_short(value.next_cursor)}"
            )
        if not whole(value.count, 0):
            raise HandlerResultError(
                f"handler of job type {job_type!r} returned count {_short(value.count)}, expected an integer of zero or more"
            )
        if counted + value.count > MAX_RECORD_COUNT:
            raise HandlerResultError(
                f"handler of job type {job_type!r} returned count {value.count}, more than the table can count "
                f"after {counted} record(s) (at most {MAX_RECORD_COUNT} in all)"
            )
        return value


MAX_RECORD_COUNT = 2**63 - 1
"""The most records one job can count: ``processed_count`` is a bigint."""


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Progress:
    """How far an owner's initial load is: the slices (or first snapshot) done out of all planned."""

    queue: str
    owner: str
    total: int
    completed: int
    abandoned: int
    running: int
    records: int

    @property
    def complete(self) -> bool:
        """Every initial job completed (and there is at least one): the first load is there."""
        return self.total > 0 and self.completed == self.total

    @property
    def settled(self) -> bool:
        """Nothing of the first load will run again without help: each initial job completed or abandoned."""
        return self.total > 0 and self.completed + self.abandoned == self.total

    @property
    def fraction(self) -> float:
        return self.completed / self.total if self.total else 0.0


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did: waiting jobs abandoned at once, and running jobs that stop after their current page."""

    abandoned: int
    stopping: int

    @property
    def total(self) -> int:
        return self.abandoned + self.stopping


@dataclass(frozen=True)
class ResyncWindows:
    """The windows a re-sync cuts for some of its owners, the same for each of them (their history slices lie
    alike, or they have none), newest first; none for a snapshot type, whose owners get one snapshot job each."""

    owners: tuple[str, ...]
    windows: tuple[tuple[datetime, datetime], ...]


@dataclass(frozen=True)
class ResyncRequest:
    """A range of one type asked to be synced again: who asked, why and when, and the jobs it made."""

    queue: str
    key: str
    type: str
    window_start: datetime
    window_end: datetime
    owners: tuple[str, ...] | None
    """The owners named; None: every owner the source listed when it was asked."""
    reason: str
    requested_by: str | None
    requested_at: datetime
    jobs: int
    """How many jobs the request made (windows times owners; one per owner for a snapshot type)."""
    cancelled_at: datetime | None = None
    cancelled_by: str | None = None
    made: int = 0
    """The jobs this very call made: ``jobs`` for the call that created the request, 0 for a repeat of its key
    (and for a dry run)."""
    windows: tuple[ResyncWindows, ...] = ()
    """The windows this call cut, by owners: the jobs it made, or for a dry run the jobs it would make. Empty when
    it makes nothing (its key was used already) and for a request read back."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "ResyncRequest":
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        values["owners"] = tuple(row["owners"]) if row["owners"] is not None else None
        for name in ("window_start", "window_end", "requested_at", "cancelled_at"):
            if values.get(name) is not None:
                values[name] = values[name].astimezone(timezone.utc)
        return cls(**values)


@dataclass(frozen=True)
class ResyncProgress:
    """Where a re-sync request stands: its jobs (one per window and owner) by state, and the records they brought."""

    request: ResyncRequest
    total: int
    done: int
    running: int
    pending: int
    retrying: int
    """Failed and waiting to retry: routine, not a failure of the request until their attempts are spent."""
    stopped: int
    """Deferred or abandoned (cancelled ones among them): their attempts spent, what a requeue of the request
    gives fresh attempts to."""
    records: int
    last_error: str | None = None

    @property
    def finished(self) -> bool:
        """Nothing of it runs or waits any more."""
        return (
            self.running == self.pending == self.retrying == self.stopped == 0 or self.request.cancelled_at is not None
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "ResyncProgress":
        counts = {f.name: row[f.name] for f in fields(cls) if f.name != "request"}
        return cls(request=ResyncRequest.from_row(row), **counts)


@dataclass(frozen=True)
class Activity:
    """Whether a queue (or one lane of it) has work running or due, and when that changes next."""

    running: bool
    due: bool
    next_run_at: datetime | None
    """When the first waiting job is (or was) due; None when nothing waits."""
    lease_expires_at: datetime | None
    """When the first running job's lease lapses, unless renewed."""
    now: datetime
    """The clock the answer was given at (the database's, or the pinned one)."""

    @property
    def drained(self) -> bool:
        """Nothing running and nothing due now (jobs may still wait for a later time)."""
        return not (self.running or self.due)

    @property
    def settled(self) -> bool:
        """Nothing running and nothing waiting at all: every job completed or abandoned."""
        return not self.running and self.next_run_at is None


@dataclass(frozen=True)
class Wakeup:
    """What an idle worker waits for: whether a take would find a job now, else when that could change."""

    takeable: bool
    """A take would find a job now, and it is this waiter's turn to wake for it."""
    wake_at: datetime | None
    now: datetime
    behind: int = 0
    """There are jobs to take, but this many more would have to be before it is this waiter's turn (the
    waiters ahead of it are waking for them)."""
    running: bool = False
    """Some job of the queue is running."""
    due: bool = False
    """Some waiting job is due now, in a free lane or not (a due job in a full lane is not ``takeable``)."""
    waiting: bool = False
    """Some job waits (pending, failed or deferred), due now or later."""

    @property
    def drained(self) -> bool:
        """Nothing running and nothing due now (as :attr:`Activity.drained`)."""
        return not (self.running or self.due)

    @property
    def settled(self) -> bool:
        """Nothing running and nothing waiting at all (as :attr:`Activity.settled`)."""
        return not (self.running or self.waiting)


@dataclass(frozen=True)
class QueueCounts:
    """How many jobs of a queue wait (pending, failed, deferred), run, and are abandoned."""

    waiting: int
    running: int
    abandoned: int


@dataclass(frozen=True)
class Freshness:
    """How far behind one owner is in one windowed type: now minus the end of its newest completed window."""

    owner: str
    type: str
    fresh_until: datetime
    lag: timedelta


PAUSED_BY_HANDLER = "handler"
"""``owners.paused_by`` of an owner whose handler paused it (raised ``OwnerPaused``)."""

PAUSED_BY_CREDENTIALS = "credentials"
"""``owners.paused_by`` of an owner whose credentials need reconnecting (a handler raised
``CredentialsNeedReconnecting``): setting its credentials resumes it."""


@dataclass(frozen=True)
class OwnerState:
    """One row of the owners table: how an owner of a queue is doing as a whole, and whether it is paused.

    An owner without a row is healthy and not paused (``OwnerState(queue, owner)``).
    """

    queue: str
    owner: str
    health: OwnerHealth = OwnerHealth.HEALTHY
    consecutive_failures: int = 0
    last_error: str | None = None
    failing_since: datetime | None = None
    paused_at: datetime | None = None
    """When it was paused; None: it is not paused. No job of a paused owner is taken."""
    paused_reason: str | None = None
    paused_by: str | None = None
    """Who paused it: ``handler`` (its handler raised ``OwnerPaused``), ``credentials`` (they need reconnecting) or
    the name an operator gave."""
    last_clean_at: datetime | None = None
    """When a job of the owner last completed (a completion also makes it healthy again)."""
    alerted_at: datetime | None = None
    alerted_for: str | None = None
    """What the health check last alerted about this owner (at ``alerted_at``): it alerts once per event."""
    updated_at: datetime | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "OwnerState":
        """From a row of the owners table; times in UTC."""
        values = {f.name: row[f.name] for f in fields(cls)}
        values["health"] = OwnerHealth(values["health"])
        for name in _OWNER_TIMES:
            if values[name] is not None:
                values[name] = values[name].astimezone(timezone.utc)
        return cls(**values)


_OWNER_TIMES = ("failing_since", "paused_at", "last_clean_at", "alerted_at", "updated_at")


@dataclass(frozen=True)
class OwnerAlerts:
    """The owners one health check claimed to alert about, by name, and how many more are waiting for a check
    (paused by their handler, and failing) beyond the most it claims at once: the next check claims them."""

    claimed: tuple[OwnerState, ...]
    more_paused: int = 0
    more_failing: int = 0
