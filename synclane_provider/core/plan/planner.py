"""The planner: for each owner, what should exist minus what exists, inserted in one statement per batch."""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from synclane_provider.core.clock import utc
from synclane_provider.core.db.store import CoverageRow, ListedJob, Store
from synclane_provider.core.declare.declarations import JobType, Owner, Queue
from synclane_provider.core.declare.owners import owners_of, resolve_owner
from synclane_provider.core.plan.rule import coverage_wanted, period_start, plan_type
from synclane_provider.core.records import Coverage

log = logging.getLogger(__name__)

READ_BATCH = 50_000
"""Owners whose coverage one statement reads. Large, because each read joins the batch's owners to the queue's
whole coverage in one pass (a repeated plan of 100,000 owners is two reads, not a hundred probing row by row);
bounded, because the rows of owners that lack something are held in memory until their jobs are inserted."""

INSERT_BATCH = 1000
"""Owners whose missing jobs one statement inserts: bounds the statement's size (27,000 rows for owners with
two years of history)."""


@dataclass(frozen=True)
class PlanSummary:
    """What one planning pass did: the owners it looked at and the jobs it inserted, per type."""

    queue: str
    owners: int
    inserted: dict[str, int] = field(default_factory=dict)
    moved: int = 0
    """Waiting jobs moved to the lane the owner source now gives their owner."""
    skipped: bool = False
    """Another planning run of the queue was still running: this one did nothing (see :func:`plan`)."""

    @property
    def total(self) -> int:
        return sum(self.inserted.values())


def plan(
    store: Store,
    queue: Queue,
    *,
    now: datetime | None = None,
    owner: str | Owner | None = None,
) -> PlanSummary:
    """Plan every owner of ``queue`` (or only ``owner``) at ``now``; safe to repeat and to run concurrently.

    An owner's recurring jobs are planned at its own period (``Owner.every``) or the type's, stretched while
    the owner is degraded or failing (:mod:`~synclane_provider.core.declare.stretch`; one read of the owners
    in trouble per run).

    Each batch of owners costs one read of their coverage rows (what exists per owner and type, and the lane
    it was planned in), then, only for what that read found, one move of the waiting jobs of owners the owner
    source gives another lane or lane width (a running job finishes in the lane and slot it started in), and
    one insert of the jobs missing. The width is written on every job, like the lane, because the take reads
    it from the job it is about to lease: the database then needs no table of lanes, and the index alone
    keeps the lane k wide.

    A run over the whole queue compares owners with their coverage rows that way only where the owner source
    changed since a run last found everything settled (:class:`Roster`); for the rest, one read of the
    queue's coverage rows short of now stands for it, and between two periods it returns nothing.

    A run over the whole queue holds the queue's planning lock while it runs, and lets go of it when it ends,
    with an error too (or when its connection does). A run that starts while another still runs -- one that
    took longer than its interval, say -- does nothing and returns at once with ``skipped`` set (the running
    one plans everything there is to plan; the next run after it catches up on anything later), so runs never
    pile up on a queue. Planning one owner takes no lock: it is short, and safe beside a whole run.
    """
    now = utc(now) if now is not None else datetime.now(timezone.utc)
    if owner is not None:
        return _plan_owners(store, queue, [resolve_owner(queue, owner)], now, whole=False)
    if not store.try_planning_lock(queue.name):
        log.warning("queue %s: another planning run is still running; this one does nothing", queue.name)
        return PlanSummary(queue.name, 0, {t.name: 0 for t in queue.types}, skipped=True)
    try:
        return _plan_owners(store, queue, owners_of(queue), now, whole=True)
    finally:
        store.planning_unlock(queue.name)


def _plan_owners(store: Store, queue: Queue, owners: Sequence[Owner], now: datetime, *, whole: bool) -> PlanSummary:
    """Plan ``owners``: the whole source (``whole``) or a few named ones.

    A whole run compares its owners with their coverage rows one by one only in the roster buckets whose digest
    differs from the one recorded when the planner last found them settled (every one, the first time; see
    migration 0018); for the other owners it reads only the coverage rows short of now, which a run between
    two periods finds empty. Either way the same rows go on to be moved and planned."""
    inserted: Counter[str] = Counter()
    moved = 0
    stretch = _stretches(store, queue)
    own_every = _own_periods(queue, owners, stretch)
    roster, changed, compared = None, None, owners
    if whole:
        roster = Roster(queue, owners)
        changed = roster.changed(store.planned_rosters(queue.name))  # None: every bucket
        compared = owners if changed is None else roster.owners_in(changed)
    unsettled: set[str] = set()  # owners of compared buckets found without a coverage row, or moved
    for start in range(0, len(compared), READ_BATCH):
        batch = compared[start : start + READ_BATCH]
        found = _read_batch(store, queue, batch, now, own_every)
        unsettled.update(row.owner for row in found if row.moved or not row.has_row)
        batch_moved, batch_inserted = _plan_found(store, queue, {o.id: o for o in batch}, found, now, own_every)
        moved += batch_moved
        inserted.update(batch_inserted)
    if roster is not None and len(compared) < len(owners):
        found = _read_short(store, queue, roster, {o.id for o in compared} if compared else set(), now, own_every)
        if found:
            batch_moved, batch_inserted = _plan_found(store, queue, roster.by_id, found, now, own_every)
            moved += batch_moved
            inserted.update(batch_inserted)
    if roster is not None and changed != set() and (settled := roster.settled(changed, unsettled)):
        store.record_rosters(queue.name, settled)
    if inserted or moved:
        store.notify(queue.name)
    return PlanSummary(queue.name, len(owners), {t.name: inserted.get(t.name, 0) for t in queue.types}, moved)


ROSTER_BUCKETS = 64
"""How many buckets a queue's owners are cut into for their digests: an owner who connects, moves or leaves has
the owners of its bucket alone (1/64 of them) compared with their coverage rows one by one."""

WHOLE = -1
"""The bucket number of the whole owner source's digest."""


class Roster:
    """A queue's owners as its owner source lists them now, with their digests: per bucket (a checksum of the
    owner's name picks the bucket) and of the whole source. A digest covers the owners' names, lanes and lane
    widths, and the queue's job types: what decides whether each owner-type has its coverage row in the right
    lane. It is taken in name order, so that a source that lists the same owners in another order (from a set,
    say) matches. Everything but the whole digest is computed only when that differs."""

    def __init__(self, queue: Queue, owners: Sequence[Owner]) -> None:
        self.owners = owners
        # Fields apart by NUL, which no name holds (and no field is empty): no two rosters give one text.
        self._types = "\x00".join(t.name for t in queue.types)
        self._lines = [f"{o.id}\x00{o.lane_or_id}\x00{o.lane_width}" for o in owners]
        self._lines.sort()  # by name: names are unique in a source, and NUL sorts before any character
        self.whole = _digest(self._types, self._lines)
        self._buckets: list[int] | None = None
        self._digests: dict[int, str] | None = None
        self._by_id: dict[str, Owner] | None = None

    @property
    def by_id(self) -> dict[str, Owner]:
        if self._by_id is None:
            self._by_id = {o.id: o for o in self.owners}
        return self._by_id

    def buckets(self) -> list[int]:
        """Each owner's bucket, in the source's order."""
        if self._buckets is None:
            self._buckets = [zlib.crc32(o.id.encode()) % ROSTER_BUCKETS for o in self.owners]
        return self._buckets

    def digests(self) -> dict[int, str]:
        """Each bucket's digest."""
        if self._digests is None:
            lines: list[list[str]] = [[] for _ in range(ROSTER_BUCKETS)]
            for line in self._lines:
                lines[zlib.crc32(line.partition("\x00")[0].encode()) % ROSTER_BUCKETS].append(line)
            self._digests = {bucket: _digest(self._types, bucket_lines) for bucket, bucket_lines in enumerate(lines)}
        return self._digests

    def changed(self, recorded: dict[int, str]) -> set[int] | None:
        """The buckets whose digest differs from ``recorded``'s (empty: none), or None: every one, as nothing
        is recorded (a first run, or coverage rows were deleted)."""
        if recorded.get(WHOLE) == self.whole:
            return set()
        if not recorded:
            return None
        return {bucket for bucket, digest in self.digests().items() if recorded.get(bucket) != digest}

    def owners_in(self, buckets: set[int]) -> list[Owner]:
        """The owners of ``buckets``, in the source's order."""
        if not buckets:
            return []
        return [o for o, bucket in zip(self.owners, self.buckets(), strict=True) if bucket in buckets]

    def settled(self, buckets: set[int] | None, unsettled: set[str]) -> dict[int, str]:
        """The digests to record after comparing ``buckets`` (None: all): those whose owners were all found
        with their coverage rows in their lanes (none in ``unsettled``), and the whole one when all were."""
        digests = self.digests()
        left = {bucket for o, bucket in zip(self.owners, self.buckets(), strict=True) if o.id in unsettled}
        settled = {b: d for b, d in digests.items() if (buckets is None or b in buckets) and b not in left}
        if not left:
            settled[WHOLE] = self.whole
        return settled


def _digest(types: str, lines: Sequence[str]) -> str:
    return hashlib.md5("\x00\x00".join((types, *lines)).encode(), usedforsecurity=False).hexdigest()


def _own_periods(queue: Queue, owners: Sequence[Owner], stretch: dict[str, int]) -> dict[tuple[str, str], timedelta]:
    """The owner-types whose current period is not the type's: owners with periods of their own or a stretch
    (most have neither, and are looked at no further)."""
    return {
        (owner.id, job_type.name): every
        for owner in owners
        if owner.every or owner.id in stretch
        for job_type in queue.types
        if (every := _own_every(owner, job_type, stretch.get(owner.id, 1))) is not None
    }


def _own_period_starts(own_every: dict[tuple[str, str], timedelta], now: datetime) -> list[tuple[str, str, datetime]]:
    return [(name, type_name, period_start(now, every)) for (name, type_name), every in own_every.items()]


def _stretches(store: Store, queue: Queue) -> dict[str, int]:
    """How many times its period each owner in trouble is planned at (owners not named: once)."""
    backoff = queue.owner_stretch
    if backoff.max_stretch == 1:
        return {}
    return {
        owner: backoff.stretch(health, failures)
        for owner, (health, failures) in store.owners_in_trouble(queue.name).items()
    }


def _read_batch(
    store: Store, queue: Queue, owners: Sequence[Owner], now: datetime, own_every: dict[tuple[str, str], timedelta]
) -> list[CoverageRow]:
    """The coverage rows of ``owners`` that lack something or have moved, each owner compared one by one."""
    reach = [coverage_wanted(job_type, now) for job_type in queue.types]
    ids = {o.id for o in owners} if own_every else set()
    return store.read_coverage(
        queue.name,
        [o.id for o in owners],
        [o.lane_or_id for o in owners],
        [o.lane_width for o in owners],
        [t.name for t in queue.types],
        [horizon_start for horizon_start, _ in reach],
        [period for _, period in reach],
        [start for start in _own_period_starts(own_every, now) if start[0] in ids],
    )


def _read_short(
    store: Store,
    queue: Queue,
    roster: Roster,
    compared: set[str],
    now: datetime,
    own_every: dict[tuple[str, str], timedelta],
) -> list[CoverageRow]:
    """The coverage rows short of now of the listed owners not in ``compared``, in the owner source's order."""
    reach = [coverage_wanted(job_type, now) for job_type in queue.types]
    rows = store.read_short_coverage(
        queue.name,
        [t.name for t in queue.types],
        [horizon_start for horizon_start, _ in reach],
        [period for _, period in reach],
        _own_period_starts(own_every, now),
    )
    if not rows:
        return []
    listed = roster.by_id
    rows = [row for row in rows if row.owner in listed and row.owner not in compared]
    position = {o.id: index for index, o in enumerate(roster.owners)} if rows else {}
    type_position = {t.name: index for index, t in enumerate(queue.types)}
    return sorted(rows, key=lambda row: (position[row.owner], type_position[row.type]))


def _plan_found(
    store: Store,
    queue: Queue,
    by_id: dict[str, Owner],
    found: Sequence[CoverageRow],
    now: datetime,
    own_every: dict[tuple[str, str], timedelta],
) -> tuple[int, Counter[str]]:
    """Move and plan what a read found (rows in the owner source's order). A paused owner gets no new jobs: what
    its pause skips is planned once it is resumed, from where its coverage ends (one recurring window reaching
    over the pause, as after a planner that was down), while its lane moves like anyone's. The paused owners
    are read only when something lacks: a repeated plan that adds nothing costs no statement more."""
    moved = _move_lanes(store, queue, [by_id[name] for name in dict.fromkeys(row.owner for row in found if row.moved)])
    lacking: dict[str, list[CoverageRow]] = {}  # in the owner source's order, so that jobs are numbered in it
    for row in found:
        if row.lacking:
            lacking.setdefault(row.owner, []).append(row)
    if lacking:
        for owner in store.paused_owners(queue.name) & lacking.keys():
            del lacking[owner]
    names = list(lacking)
    inserted: Counter[str] = Counter()
    for start in range(0, len(names), INSERT_BATCH):
        rows = [(by_id[name], row) for name in names[start : start + INSERT_BATCH] for row in lacking[name]]
        inserted.update(_insert(store, queue, rows, own_every, now))
    return moved, inserted


def _own_every(owner: Owner, job_type: JobType, stretch: int) -> timedelta | None:
    """The owner's period for ``job_type`` (its own or the type's, times the stretch of an owner in trouble)
    when it is not the type's, else None."""
    every = owner.period_of(job_type) * stretch
    return every if every != job_type.every else None


def _move_lanes(store: Store, queue: Queue, owners: Sequence[Owner]) -> int:
    if not owners:
        return 0
    moved = store.move_lanes(
        queue.name, [o.id for o in owners], [o.lane_or_id for o in owners], [o.lane_width for o in owners]
    )
    if moved:
        log.info("queue %s: %s waiting job(s) moved to the lane (or lane width) their owner has now", queue.name, moved)
    return moved


def _insert(
    store: Store,
    queue: Queue,
    rows: Sequence[tuple[Owner, CoverageRow]],
    own_every: dict[tuple[str, str], timedelta],
    now: datetime,
) -> Counter[str]:
    """Insert the jobs the planning rule gives each of ``rows``' owner-types (``own_every``: the owner-types with
    a period of their own).

    The rule is a function of the type's coverage and period alone, and owners planned together mostly share
    them (in a first plan every owner of a type has no coverage), so it runs once per distinct coverage and
    period, and each distinct list of jobs is sent once, numbered, with the owner-types naming theirs: the server
    joins them (see insert_planned). At 100,000 owners this is two lists instead of 2.7 million rows built,
    encoded and parsed one by one.
    """
    priority = {job_type.name: position for position, job_type in enumerate(queue.types)}
    numbers: dict[tuple[str, Coverage, timedelta | None], int | None] = {}  # None: the rule adds nothing there
    jobs: list[ListedJob] = []
    owners: list[tuple[Owner, int]] = []
    for owner, row in rows:
        every = own_every.get((owner.id, row.type))
        key = (row.type, row.coverage, every)
        if key not in numbers:
            number = len(numbers)
            planned = plan_type(queue.job_type(row.type), row.coverage, now, every)
            numbers[key] = number if planned else None
            jobs.extend(
                ListedJob(
                    number,
                    job.type,
                    job.mode.value,
                    priority[job.type],
                    job.window_start,
                    job.window_end,
                    job.dedup_key,
                )
                for job in planned
            )
        listed = numbers[key]
        if listed is not None:
            owners.append((owner, listed))
    if not owners:
        return Counter()
    return store.insert_planned(
        queue.name,
        [owner.id for owner, _ in owners],
        [owner.lane_or_id for owner, _ in owners],
        [owner.lane_width for owner, _ in owners],
        [number for _, number in owners],
        jobs,
        now=now,
    )
