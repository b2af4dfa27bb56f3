"""The planning rule: which jobs should exist for one owner and type, as a pure function of ``now``.

Three mistakes this rule exists to prevent:

* **Shifting slices.** History slices are cut back from the midnight (UTC) of the
  *first* plan and never re-cut: later plans extend from the oldest existing slice,
  so planning the same day, the next day or after raising the horizon never
  produces overlapping slices with new keys.
* **Gaps after downtime.** The recurring job's window starts where coverage ends
  (minus the overlap), not one period back from now, so a planner that was down
  for a day plans one job that covers the whole day.
* **Gaps or repeats when a period changes.** The period (the type's ``every``, or the owner's own, see
  ``Owner.every``) only says where the current window ends: periods are anchored to the Unix epoch, and the
  window starts where coverage ends whatever period planned the one before. A shorter period plans its next
  window at once, a longer one waits until its period has passed the coverage; no window is lost or repeated.
* **Duplicates under races.** Every job has a key derived only from its window
  or period (``initial:<start>``, ``recurring:<period start>``); the table's unique
  index turns a second insert of the same key into nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pendulum

from synclane_provider.core.clock import utc
from synclane_provider.core.declare.declarations import JobType, SnapshotType, WindowedType
from synclane_provider.core.records import Coverage
from synclane_provider.core.states import JobMode

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class PlannedJob:
    """A job that should exist: one row for the planner's insert."""

    type: str
    mode: JobMode
    window_start: datetime | None
    window_end: datetime | None
    dedup_key: str


@functools.lru_cache(maxsize=256)
def midnight(now: datetime) -> datetime:
    """The start of ``now``'s day in UTC: where history slices are anchored."""
    day = pendulum.instance(utc(now)).in_timezone("UTC").start_of("day")
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


def period_start(now: datetime, every: timedelta) -> datetime:
    """The start of the period ``now`` falls in; periods are aligned to midnight UTC (the Unix epoch)."""
    elapsed = utc(now) - EPOCH
    return EPOCH + (elapsed // every) * every


def instant_text(instant: datetime) -> str:
    """``2026-08-08T00:00:00Z``; with the microseconds when there are any, so that no two instants share a text."""
    instant = utc(instant)
    fraction = f".{instant.microsecond:06d}" if instant.microsecond else ""
    return f"{instant:%Y-%m-%dT%H:%M:%S}{fraction}Z"


@functools.lru_cache(maxsize=4096)
def instant_key(mode: JobMode, instant: datetime) -> str:
    """``initial:2026-08-08T00:00:00Z``: two different windows never share a key. Cached, as every owner of a
    plan shares the same slice starts."""
    return f"{mode.value}:{instant_text(instant)}"


@functools.lru_cache(maxsize=256)
def slices_back(
    newest_end: datetime, oldest_start: datetime, length: timedelta
) -> tuple[tuple[datetime, datetime], ...]:
    """Windows of ``length`` from ``newest_end`` back to ``oldest_start``, newest first; the oldest one is clipped."""
    windows = []
    end = newest_end
    while end > oldest_start:
        start = max(end - length, oldest_start)
        windows.append((start, end))
        end = start
    return tuple(windows)


@dataclass(frozen=True)
class History:
    """Where one owner's history slices of a windowed type lie: cut back by the type's slice from ``anchor``, the
    midnight (UTC) of the owner's first plan, where its newest slice ends, down to ``oldest``, its oldest slice's
    start (the horizon's, which clips that slice when the horizon is not a whole number of slices)."""

    oldest: datetime
    anchor: datetime


def history_of(coverage: Coverage) -> History | None:
    """The history an owner's coverage of a windowed type records; None when it has none.

    The anchor is the midnight of the owner's first job of the type: the first plan created it with the history
    it cut back from that midnight (see :func:`plan_type`), and later plans only extend the history back from its
    oldest slice. So every boundary between two of its slices is ``anchor - k * slice``, unless a horizon raised
    after the first plan extended it from a clipped oldest slice (those slices are cut back from that slice's
    start instead).

    >>> first_plan = datetime(2026, 11, 30, 10, 20, tzinfo=timezone.utc)
    >>> history = history_of(Coverage(True, datetime(2026, 10, 16, tzinfo=timezone.utc), first_created_at=first_plan))
    >>> instant_text(history.oldest), instant_text(history.anchor)
    ('2026-10-16T00:00:00Z', '2026-11-30T00:00:00Z')
    >>> history_of(Coverage()) is None
    True
    """
    if not coverage.has_initial or coverage.initial_start is None or coverage.first_created_at is None:
        return None
    oldest, anchor = utc(coverage.initial_start), midnight(coverage.first_created_at)
    return History(oldest, anchor) if oldest < anchor else None


def coverage_wanted(
    job_type: JobType, now: datetime, every: timedelta | None = None
) -> tuple[datetime | None, datetime]:
    """How far back (horizon start; None for a snapshot) and up to when (current period) a type should be covered;
    ``every`` is the owner's period when it has its own (else the type's).

    The planner's read skips owner-types that already reach both, so that a
    repeated plan costs almost nothing; :func:`plan_type` decides the rest.
    """
    horizon_start = midnight(now) - job_type.horizon if isinstance(job_type, WindowedType) else None
    return horizon_start, period_start(now, every or job_type.every)


def plan_type(job_type: JobType, coverage: Coverage, now: datetime, every: timedelta | None = None) -> list[PlannedJob]:
    """Every job of ``job_type`` one owner should have at ``now`` and may not have yet, newest first.

    ``every`` is the owner's period for the type when it has its own (``Owner.every``), else None for the
    type's. Jobs that already exist may be in the result (their keys make the insert a no-op); jobs that are
    missing are always in it.
    """
    period = period_start(now, every or job_type.every)
    if isinstance(job_type, WindowedType):
        return _plan_windowed(job_type, coverage, now, period)
    if isinstance(job_type, SnapshotType):
        return _plan_snapshot(job_type, coverage, period)
    raise TypeError(f"cannot plan job type {job_type!r}")


def _plan_snapshot(job_type: SnapshotType, coverage: Coverage, period: datetime) -> list[PlannedJob]:
    if not coverage.has_initial:
        return [PlannedJob(job_type.name, JobMode.INITIAL, None, None, JobMode.INITIAL.value)]
    if coverage.first_created_at is not None and coverage.first_created_at < period:
        return [PlannedJob(job_type.name, JobMode.RECURRING, None, None, instant_key(JobMode.RECURRING, period))]
    return []


def _plan_windowed(job_type: WindowedType, coverage: Coverage, now: datetime, period: datetime) -> list[PlannedJob]:
    anchor = midnight(now)
    horizon_start = anchor - job_type.horizon
    if coverage.has_initial and coverage.initial_start is not None:
        history = slices_back(coverage.initial_start, horizon_start, job_type.slice)
        covered_until = coverage.covered_until
    else:
        history = slices_back(anchor, horizon_start, job_type.slice)
        covered_until = anchor

    planned = []
    if covered_until is not None and covered_until < period:
        planned.append(
            PlannedJob(
                job_type.name,
                JobMode.RECURRING,
                covered_until - job_type.overlap,
                period,
                instant_key(JobMode.RECURRING, period),
            )
        )
    planned.extend(
        PlannedJob(job_type.name, JobMode.INITIAL, start, end, instant_key(JobMode.INITIAL, start))
        for start, end in history
    )
    return planned
