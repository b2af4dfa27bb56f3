"""What the user declares: queues, their job types, their owner source and settings.

Everything is checked here, when the declaration is made, so that a typo in a
DAG file fails at parse time with the bad value in the message instead of in
the middle of a sync.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Union

from synclane_provider.core.credentials import DEFAULT_SKEW
from synclane_provider.core.declare.ratelimit import Rate, checked_limits
from synclane_provider.core.declare.retry import RetryPolicy
from synclane_provider.core.declare.stretch import NO_STRETCH, OwnerStretch
from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import DeclarationError, UnknownJobTypeError, UnknownQueueError
from synclane_provider.core.numbers import whole

if TYPE_CHECKING:
    from synclane_provider.core.db.database import ConnectionFactory, Database
    from synclane_provider.core.page_context import PageJob
    from synclane_provider.core.records import Page

Handler = Callable[["PageJob"], "Page"] | Callable[["PageJob"], Awaitable["Page"]]
"""Does one page of a job: fetch, store with upserts, return the next cursor and the record count. It is given the
job's row with its page's context (:class:`~synclane_provider.core.page_context.PageJob`); a handler typed for a
plain ``Job`` fits too. A plain function runs on a thread; an ``async def`` one on the worker process's event loop,
where the pages of a slot's many jobs wait on the network together (see ``Queue.jobs_per_slot``)."""

OwnerSource = Callable[[str], Iterable[Union["Owner", str]]]
"""Lists the connected owners of a queue (given the queue's name)."""

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


def _positive(name: str, value: object) -> timedelta:
    if not isinstance(value, timedelta):
        raise DeclarationError(f"{name} must be a timedelta, got {value!r}")
    if value <= timedelta(0):
        raise DeclarationError(f"{name} must be positive, got {duration_text(value)}")
    return value


DEFAULT_PAGE_TIMEOUT = timedelta(minutes=10)
"""How long one page may run before its attempt fails: longer than any sane API call with its retries."""

MAX_NAME_BYTES = 512
"""Longest queue, type, owner or lane name (and manual job key), in UTF-8 bytes. The unique indexes hold
several names in one entry, and PostgreSQL refuses an index entry of more than about 2.7 kB."""


def checked_name(kind: str, value: object) -> str:
    """``value`` if the table can store it as a name and give it back exactly, else a :class:`DeclarationError`."""
    if not isinstance(value, str) or not value.strip():
        raise DeclarationError(f"{kind} must be a non-empty string, got {_clipped(value)}")
    if "\x00" in value:
        raise DeclarationError(f"{kind} must not contain NUL characters, got {_clipped(value)}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise DeclarationError(
            f"{kind} must be valid unicode (it holds a lone surrogate), got {_clipped(value)}"
        ) from None
    if size > MAX_NAME_BYTES:
        raise DeclarationError(f"{kind} must be at most {MAX_NAME_BYTES} bytes in UTF-8, got {size}: {_clipped(value)}")
    return value


MAX_LANE_WIDTH = 1000
"""Widest lane: a take looks at each slot of a lane, so a width far beyond any worker count only costs."""


def _clipped(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Owner:
    """An account to sync for. Owners that share a rate limit share a ``lane``.

    ``rate``: the rate budget of the owner's lane, when it differs from the queue's (``Queue(rate=…)``), e.g.
    an account on a bigger plan; several rates for an API that limits several windows at once (see
    ``Queue.rate``). Owners sharing a lane must name the same rate (or none).
    ``lane_width`` is how many jobs of the lane may run at once (an API that allows k concurrent requests per
    account); 1, the default, is one job at a time. It is the lane's, so owners sharing a lane must name the
    same width (the owner source is refused otherwise). The width travels with every job of the lane into the
    table, where a unique index over running jobs' slots holds it (see migration 0005).
    ``every``: the owner's own period per job type, by type name, in place of the type's ``every`` (a premium
    account refreshed every minute beside free ones refreshed hourly). Its periods are anchored to the clock
    like the type's; the queue refuses a type it does not declare and a period not longer than the type's
    ``overlap`` when it reads the owner source (see :func:`~synclane_provider.core.declare.owners.owners_of`).
    Changing it loses no window and plans none twice: the next recurring window starts where coverage ends.
    """

    id: str
    lane: str | None = None
    rate: Rate | Sequence[Rate] | None = None
    lane_width: int = 1
    every: Mapping[str, timedelta] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        checked_name("owner id", self.id)
        if self.lane is not None:
            checked_name("owner lane", self.lane)
        object.__setattr__(self, "rate", checked_limits(f"owner {self.id!r}", self.rate))  # several: a tuple
        if not whole(self.lane_width, 1):
            raise DeclarationError(
                f"lane_width of owner {self.id!r} must be a whole number of at least 1 (how many of its lane's jobs "
                f"may run at once), got {self.lane_width!r}"
            )
        if self.lane_width > MAX_LANE_WIDTH:
            raise DeclarationError(
                f"lane_width of owner {self.id!r} must be at most {MAX_LANE_WIDTH}, got {self.lane_width!r}"
            )
        if not isinstance(self.every, Mapping):
            raise DeclarationError(
                f"every of owner {self.id!r} must map job type names to periods "
                f"(e.g. {{'orders': timedelta(minutes=1)}}), got {_clipped(self.every)}"
            )
        for type_name, period in self.every.items():
            checked_name(f"job type name in every of owner {self.id!r}", type_name)
            _positive(f"every of owner {self.id!r} for job type {type_name!r}", period)
        object.__setattr__(self, "every", MappingProxyType(dict(self.every)))

    def period_of(self, job_type: JobType) -> timedelta:
        """The period of the owner's recurring jobs of ``job_type``: its own, else the type's."""
        return self.every.get(job_type.name, job_type.every)

    @property
    def lane_or_id(self) -> str:
        return self.lane if self.lane is not None else self.id


def _check_handler(type_name: str, handler: object) -> None:
    if not callable(handler):
        raise DeclarationError(f"handler of job type {type_name!r} must be callable, got {handler!r}")


@dataclass(frozen=True)
class SnapshotType:
    """A whole-state job type (e.g. a product catalogue): one initial load, then one refresh per period.

    ``page_timeout``: a page that has not returned after this long fails its attempt (``PageTimeout``).
    """

    name: str
    handler: Handler
    every: timedelta
    page_timeout: timedelta = DEFAULT_PAGE_TIMEOUT

    def __post_init__(self) -> None:
        checked_name("job type name", self.name)
        _check_handler(self.name, self.handler)
        _positive(f"every of job type {self.name!r}", self.every)
        _positive(f"page_timeout of job type {self.name!r}", self.page_timeout)


@dataclass(frozen=True)
class WindowedType:
    """A time-windowed job type (e.g. orders): history in slices back to a horizon, then one job per period.

    The recurring job's window starts where coverage ends, minus ``overlap``, so
    records that arrive late at the source are picked up by the next run.
    """

    name: str
    handler: Handler
    horizon: timedelta
    slice: timedelta
    every: timedelta
    overlap: timedelta = timedelta(0)
    page_timeout: timedelta = DEFAULT_PAGE_TIMEOUT
    """A page that has not returned after this long fails its attempt (``PageTimeout``)."""

    def __post_init__(self) -> None:
        checked_name("job type name", self.name)
        _check_handler(self.name, self.handler)
        label = f"of job type {self.name!r}"
        _positive(f"horizon {label}", self.horizon)
        _positive(f"slice {label}", self.slice)
        _positive(f"every {label}", self.every)
        _positive(f"page_timeout {label}", self.page_timeout)
        if not isinstance(self.overlap, timedelta) or self.overlap < timedelta(0):
            raise DeclarationError(f"overlap {label} must be a timedelta of zero or more, got {self.overlap!r}")
        if self.slice > self.horizon:
            raise DeclarationError(
                f"slice {label} ({duration_text(self.slice)}) must not be longer than its horizon "
                f"({duration_text(self.horizon)})"
            )
        if self.overlap >= self.every:
            raise DeclarationError(
                f"overlap {label} ({duration_text(self.overlap)}) must be shorter than its period "
                f"({duration_text(self.every)})"
            )


JobType = Union[SnapshotType, WindowedType]

MIN_RETENTION = timedelta(hours=1)
"""The shortest retention a queue may declare: less keeps too little to see what just happened."""


def _check_retention(retention: object, label: str) -> timedelta:
    if not isinstance(retention, timedelta):
        raise DeclarationError(
            f"retention {label} must be a timedelta (e.g. timedelta(days=30)) or None to keep jobs for ever, "
            f"got {_clipped(retention)}"
        )
    if retention < MIN_RETENTION:
        raise DeclarationError(
            f"retention {label} must be at least {duration_text(MIN_RETENTION)}, got {duration_text(retention)}"
            if retention > timedelta(0)
            else f"retention {label} must be positive (or None to keep jobs for ever), got {duration_text(retention)}"
        )
    return retention


class _NotGiven:
    def __repr__(self) -> str:
        return "<not given>"


_DEFAULT_STRETCH: Any = _NotGiven()
"""What a queue's ``owner_stretch`` (or ``owner_backoff``) is when not given: ``OwnerStretch()`` once checked."""

RETRY_SETTINGS = ("max_attempts", "retry_delay", "retry_max_delay", "throttle_delay", "throttle_max_delay")
"""The :class:`RetryPolicy` settings a queue also takes one by one."""


@dataclass(frozen=True)
class Queue:
    """A named group of job types sharing a concurrency budget, a retry policy and a rate budget per lane.

    ``types`` are run in the order given: an earlier type's due jobs are taken before a later type's.
    ``retry`` is the queue's :class:`~synclane_provider.core.declare.retry.RetryPolicy`; its settings may also be
    given one by one (``max_attempts=3, retry_delay=...``), and are readable that way whichever form was used.
    ``retention``: how long completed (and cancelled) jobs are kept before the planning DAG deletes them
    (see :mod:`~synclane_provider.core.plan.retention`); None keeps them for ever.

    ``max_lag`` (optional) is how far behind an owner may fall before the health check fails: now minus the
    end of the newest completed window of each windowed type. It must be longer than every windowed type's
    period (``every``), since a window is complete a period after it starts at the earliest.
    """

    name: str
    owners: OwnerSource
    types: Sequence[JobType]
    concurrency: int = 1
    """How many worker slots the queue's worker DAG maps (one Airflow task each)."""
    lease: timedelta = timedelta(minutes=5)
    retry: RetryPolicy = None  # type: ignore[assignment]  # built from the settings below unless given
    max_attempts: int = None  # type: ignore[assignment]  # from ``retry`` unless given
    retry_delay: timedelta = None  # type: ignore[assignment]
    retry_max_delay: timedelta = None  # type: ignore[assignment]
    throttle_delay: timedelta = None  # type: ignore[assignment]
    throttle_max_delay: timedelta = None  # type: ignore[assignment]
    rate: Rate | Sequence[Rate] | None = None
    """The rate budget of each lane of the queue (None: unlimited), unless its owners name their own: a
    :class:`Rate`, or several for an API that limits several windows at once (``[Rate(100,
    per=timedelta(seconds=10)), Rate(250_000, per=timedelta(days=1))]``), every one of which is kept."""
    retention: timedelta | None = None
    max_lag: timedelta | None = None
    owner_stretch: OwnerStretch = _DEFAULT_STRETCH  # OwnerStretch() unless given
    """How owners whose attempts keep failing are asked less often: health thresholds and the stretch of their
    recurring period (see :mod:`~synclane_provider.core.declare.stretch`); None keeps every owner at its period."""
    owner_backoff: InitVar[OwnerStretch | None] = _DEFAULT_STRETCH
    """The earlier name of ``owner_stretch``, still taken as an argument (read ``queue.owner_stretch``)."""
    oauth_conn_id: str | None = None
    """The Airflow connection of the app's OAuth client, with which owners' access tokens are refreshed (its host
    the token URL, login the client id, password the client secret, extra ``{"scopes": "..."}``); None: the
    queue's owners have API keys, or tokens that are never refreshed."""
    credentials_skew: timedelta = DEFAULT_SKEW
    """How long before it expires an owner's access token is refreshed by ``job.credentials()``: longer than a
    page takes, so that no page outlives the token it started with."""
    history_share: float = 0.5
    """The share of a lane's rate budget its history (initial slices, re-syncs) may use while a recurring job of
    the lane is due: the rest is kept for fresh data, and a history job in a lane with no slot free for the
    recurring job hands the lane over after its page (continuing later from its cursor). 1 keeps nothing aside
    (a full lane is still handed over). Without recurring work due, history uses the whole budget."""
    longest_wait: timedelta = timedelta(minutes=1)
    """The longest a worker waits before a page, for its lane's turn or the end of a hold on it. A longer wait
    (an hourly or daily quota used up, a ``Retry-After`` of an hour) hands the job back at its cursor, due when
    the wait ends: no worker slot waits with it, no attempt is counted, nothing counts against its owner."""
    jobs_per_slot: int = 1
    """How many jobs one worker slot runs at once, each in a lane of its own: with pages that mostly wait on their
    API, one slot (one Airflow task) keeps hundreds of lanes busy. 1 runs one job at a time on a thread of the
    task's own. See docs/how-to/many-lanes.md for sizing."""
    connections: int = 4
    """The database connections a slot of more than one job shares among its jobs (takes, cursor saves, finishes,
    lease renewals); a slot of one job has one."""

    def __post_init__(self, owner_backoff: OwnerStretch | None) -> None:
        checked_name("queue name", self.name)
        label = f"of queue {self.name!r}"
        object.__setattr__(self, "rate", checked_limits(f"queue {self.name!r}", self.rate))
        if not callable(self.owners):
            raise DeclarationError(f"owners {label} must be callable (queue name -> owners), got {self.owners!r}")
        object.__setattr__(self, "types", tuple(self.types))
        if not self.types:
            raise DeclarationError(f"queue {self.name!r} declares no job types")
        seen: set[str] = set()
        for job_type in self.types:
            if not isinstance(job_type, (SnapshotType, WindowedType)):
                raise DeclarationError(f"job type {job_type!r} {label} must be a SnapshotType or WindowedType")
            if job_type.name in seen:
                raise DeclarationError(f"job type {job_type.name!r} is declared twice in queue {self.name!r}")
            seen.add(job_type.name)
        if not whole(self.concurrency, 1):
            raise DeclarationError(f"concurrency {label} must be a positive integer, got {self.concurrency!r}")
        if not whole(self.jobs_per_slot, 1):
            raise DeclarationError(f"jobs_per_slot {label} must be a positive integer, got {self.jobs_per_slot!r}")
        if not whole(self.connections, 1):
            raise DeclarationError(f"connections {label} must be a positive integer, got {self.connections!r}")
        _positive(f"lease {label}", self.lease)
        if self.retention is not None:
            _check_retention(self.retention, label)
        object.__setattr__(self, "retry", self._retry_policy())
        for setting in RETRY_SETTINGS:
            object.__setattr__(self, setting, getattr(self.retry, setting))
        if self.max_lag is not None:
            self._check_max_lag(self.max_lag, label)
        if self.oauth_conn_id is not None:
            checked_name(f"oauth_conn_id {label}", self.oauth_conn_id)
        _positive(f"credentials_skew {label}", self.credentials_skew)
        _positive(f"longest_wait {label}", self.longest_wait)
        share = self.history_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise DeclarationError(f"history_share {label} must be a number above 0 and at most 1, got {share!r}")
        object.__setattr__(self, "owner_stretch", self._owner_stretch(owner_backoff, label))

    def _owner_stretch(self, owner_backoff: OwnerStretch | None, label: str) -> OwnerStretch:
        """The stretch given as ``owner_stretch`` or by its earlier name ``owner_backoff`` (not both), checked."""
        given = {
            name: value
            for name, value in (("owner_stretch", self.owner_stretch), ("owner_backoff", owner_backoff))
            if value is not _DEFAULT_STRETCH
        }
        if len(given) > 1:
            raise DeclarationError(
                f"queue {self.name!r} gives both owner_stretch and owner_backoff (its earlier name): give one"
            )
        name, stretch = next(iter(given.items()), ("owner_stretch", OwnerStretch()))
        if stretch is None:
            return NO_STRETCH
        if not isinstance(stretch, OwnerStretch):
            raise DeclarationError(
                f"{name} {label} must be an OwnerStretch (e.g. OwnerStretch(max_stretch=8)) or None for no "
                f"stretch, got {_clipped(stretch)}"
            )
        return stretch

    def _check_max_lag(self, max_lag: timedelta, label: str) -> None:
        """A lag limit the queue can meet: positive, longer than each windowed type's period."""
        _positive(f"max_lag {label}", max_lag)
        windowed = [t for t in self.types if isinstance(t, WindowedType)]
        if not windowed:
            raise DeclarationError(
                f"max_lag {label} ({duration_text(max_lag)}) has nothing to measure: the queue declares no windowed type"
            )
        for job_type in windowed:
            if max_lag <= job_type.every:
                raise DeclarationError(
                    f"max_lag {label} ({duration_text(max_lag)}) must be longer than the period of job type "
                    f"{job_type.name!r} ({duration_text(job_type.every)}): its windows are that far behind between runs"
                )

    @property
    def windowed_types(self) -> tuple[str, ...]:
        """Names of the types whose completed windows say how fresh an owner is."""
        return tuple(t.name for t in self.types if isinstance(t, WindowedType))

    def _retry_policy(self) -> RetryPolicy:
        given = {setting: getattr(self, setting) for setting in RETRY_SETTINGS if getattr(self, setting) is not None}
        if self.retry is not None:
            if not isinstance(self.retry, RetryPolicy):
                raise DeclarationError(f"retry of queue {self.name!r} must be a RetryPolicy, got {self.retry!r}")
            differing = [name for name, value in given.items() if value != getattr(self.retry, name)]
            if differing:  # (equal ones come from copying a queue, e.g. with dataclasses.replace)
                raise DeclarationError(
                    f"queue {self.name!r} takes retry= or the settings {', '.join(differing)}, not both"
                )
            return self.retry
        try:
            return RetryPolicy(**given)
        except DeclarationError as exc:
            raise DeclarationError(f"queue {self.name!r}: {exc}") from None

    def check_owner(self, owner: Owner) -> None:
        """Refuse an owner whose own periods (``Owner.every``) this queue cannot plan: a type it does not
        declare, a period not longer than the type's overlap, or one the queue's ``max_lag`` could not wait for."""
        for type_name, period in owner.every.items():
            try:
                job_type = self.job_type(type_name)
            except UnknownJobTypeError as exc:
                raise DeclarationError(f"every of owner {owner.id!r}: {exc}") from None
            label = f"every of owner {owner.id!r} for job type {type_name!r} ({duration_text(period)})"
            if isinstance(job_type, WindowedType) and job_type.overlap >= period:
                raise DeclarationError(
                    f"{label} must be longer than the type's overlap ({duration_text(job_type.overlap)})"
                )
            if isinstance(job_type, WindowedType) and self.max_lag is not None and self.max_lag <= period:
                raise DeclarationError(
                    f"{label} must be shorter than max_lag of queue {self.name!r} ({duration_text(self.max_lag)}): "
                    f"its windows are that far behind between runs"
                )

    def job_type(self, name: str) -> JobType:
        for job_type in self.types:
            if job_type.name == name:
                return job_type
        known = ", ".join(repr(t.name) for t in self.types)
        raise UnknownJobTypeError(f"queue {self.name!r} has no job type {name!r} (it declares {known})")

    def priority_of(self, type_name: str) -> int:
        """Declared position of a type; lower runs first."""
        return self.types.index(self.job_type(type_name))


@dataclass(frozen=True)
class SyncLane:
    """The whole declaration: queues plus where the table lives.

    Holds no connection, so it can be imported at DAG parse time; the engine
    gets its database separately (see :class:`~synclane_provider.core.db.database.Database`).
    """

    queues: Sequence[Queue]
    schema: str = "synclane"
    create_schema: bool = True
    plan_interval: timedelta = timedelta(minutes=1)
    poll_interval: timedelta = timedelta(seconds=5)
    synchronous_commit: bool = False
    """Whether a worker's commits (takes, cursor saves, finishes) wait for the server's disk.

    Off by default: a worker commits after every page, and not waiting makes that several times cheaper.
    What it costs: if the database *server* crashes (not a worker, not a connection, not a clean restart),
    the last fraction of a second of those commits is lost. A job then runs again from an earlier cursor,
    or is taken and finished a second time; pages run at least once, which handlers already allow for.
    Nothing is lost and lanes still hold. Turn it on when repeating a page costs more than the commit.
    """
    _by_name: dict[str, Queue] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "queues", tuple(self.queues))
        if not isinstance(self.schema, str) or not _SCHEMA_NAME.match(self.schema):
            raise DeclarationError(
                f"schema must be a plain SQL identifier (letters, digits, _ and $; at most 63), got {self.schema!r}"
            )
        _positive("plan_interval", self.plan_interval)
        _positive("poll_interval", self.poll_interval)
        if not isinstance(self.synchronous_commit, bool):
            raise DeclarationError(f"synchronous_commit must be True or False, got {self.synchronous_commit!r}")
        by_name: dict[str, Queue] = {}
        for queue in self.queues:
            if not isinstance(queue, Queue):
                raise DeclarationError(f"queues must hold Queue declarations, got {queue!r}")
            if queue.name in by_name:
                raise DeclarationError(f"queue {queue.name!r} is declared twice")
            by_name[queue.name] = queue
        object.__setattr__(self, "_by_name", by_name)

    def database(self, conninfo: str | None = None, *, connect: ConnectionFactory | None = None) -> Database:
        """Where this declaration's table lives: a conninfo string or a function returning a psycopg connection."""
        from synclane_provider.core.db.database import Database

        return Database(conninfo, connect=connect, schema=self.schema, create_schema=self.create_schema)

    def queue(self, name: str) -> Queue:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(repr(q) for q in self._by_name) or "none"
            raise UnknownQueueError(f"unknown queue {name!r} (declared: {known})") from None
