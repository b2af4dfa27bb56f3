"""The planner: for each owner, what should exist minus what exists, inserted in one statement per batch."""

from __future__ import annotations

import logging
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
    the owner is degraded or failing (:mod:`~synclane_provider.core.declare.backoff`; one read of the owners
    in trouble per run).

    Each batch of owners costs one read of their coverage rows (what exists per owner and type, and the lane
    it was planned in), then, only for what that read found, one move of the waiting jobs of owners the owner
    source gives another lane or lane width (a running job finishes in the lane and slot it started in), and
    one insert of the jobs missing. The width is written on every job, like the lane, because the take reads
    it from the job it is about to lease: the database then needs no table of lanes, and the index alone
    keeps the lane k wide.

    A run over the whole queue holds the queue's planning lock while it runs, and lets go of it when it ends,
    with an error too (or when its connection does). A run that starts while another still runs -- one that
    took longer than its interval, say -- does nothing and returns at once with ``skipped`` set (the running
    one plans everything there is to plan; the next run after it catches up on anything later), so runs never
    pile up on a queue. Planning one owner takes no lock: it is short, and safe beside a whole run.
    """
    now = utc(now) if now is not None else datetime.now(timezone.utc)
    if owner is not None:
        return _plan_owners(store, queue, [resolve_owner(queue, owner)], now)
    if not store.try_planning_lock(queue.name):
        log.warning("queue %s: another planning run is still running; this one does nothing", queue.name)
        return PlanSummary(queue.name, 0, {t.name: 0 for t in queue.types}, skipped=True)
    try:
        return _plan_owners(store, queue, owners_of(queue), now)
    finally:
        store.planning_unlock(queue.name)


def _plan_owners(store: Store, queue: Queue, owners: Sequence[Owner], now: datetime) -> PlanSummary:
    inserted: Counter[str] = Counter()
    moved = 0
    stretch = _stretches(store, queue)
    for start in range(0, len(owners), READ_BATCH):
        batch_moved, batch_inserted = _plan_batch(store, queue, owners[start : start + READ_BATCH], now, stretch)
        moved += batch_moved
        inserted.update(batch_inserted)
    if inserted or moved:
        store.notify(queue.name)
    return PlanSummary(queue.name, len(owners), {t.name: inserted.get(t.name, 0) for t in queue.types}, moved)


def _stretches(store: Store, queue: Queue) -> dict[str, int]:
    """How many times its period each owner in trouble is planned at (owners not named: once)."""
    backoff = queue.owner_backoff
    if backoff.max_stretch == 1:
        return {}
    return {
        owner: backoff.stretch(health, failures)
        for owner, (health, failures) in store.owners_in_trouble(queue.name).items()
    }


def _plan_batch(
    store: Store, queue: Queue, owners: Sequence[Owner], now: datetime, stretch: dict[str, int]
) -> tuple[int, Counter[str]]:
    """Plan one batch of owners. A paused owner gets no new jobs: what its pause skips is planned once it is
    resumed, from where its coverage ends (one recurring window reaching over the pause, as after a planner
    that was down), while its lane moves like anyone's. The paused owners are read only when the batch lacks
    something: a repeated plan that adds nothing costs no statement more."""
    reach = [coverage_wanted(job_type, now) for job_type in queue.types]
    own_every = {  # looked at only for owners with periods or a stretch of their own: most have neither
        (owner.id, job_type.name): every
        for owner in owners
        if owner.every or owner.id in stretch
        for job_type in queue.types
        if (every := _own_every(owner, job_type, stretch.get(owner.id, 1))) is not None
    }
    found = store.read_coverage(
        queue.name,
        [o.id for o in owners],
        [o.lane_or_id for o in owners],
        [o.lane_width for o in owners],
        [t.name for t in queue.types],
        [horizon_start for horizon_start, _ in reach],
        [period for _, period in reach],
        [(name, type_name, period_start(now, every)) for (name, type_name), every in own_every.items()],
    )
    by_id = {owner.id: owner for owner in owners}
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
