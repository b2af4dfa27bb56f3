"""The planner: for each owner, what should exist minus what exists, inserted in one statement per batch."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from synclane_provider.core.declarations import Owner, Queue
from synclane_provider.core.owners import owners_of, resolve_owner
from synclane_provider.core.planning import PlannedJob, coverage_wanted, plan_type, utc
from synclane_provider.core.store import Store

log = logging.getLogger(__name__)

OWNER_BATCH = 1000
"""Owners planned per read and insert: bounds memory and statement size for large owner lists."""


@dataclass(frozen=True)
class PlanSummary:
    """What one planning pass did: the owners it looked at and the jobs it inserted, per type."""

    queue: str
    owners: int
    inserted: dict[str, int] = field(default_factory=dict)
    moved: int = 0
    """Waiting jobs moved to the lane the owner source now gives their owner."""

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

    Each owner's waiting jobs are first moved to the lane (and lane width) the owner source gives it now (a
    running job finishes in the lane and slot it started in), so that the new jobs and the old ones share one
    lane. The width is written on every job, like the lane, because the take reads it from the job it is
    about to lease: the database then needs no table of lanes, and the index alone keeps the lane k wide.
    """
    now = utc(now) if now is not None else datetime.now(timezone.utc)
    owners = owners_of(queue) if owner is None else [resolve_owner(queue, owner)]
    inserted: Counter[str] = Counter()
    moved = 0
    for start in range(0, len(owners), OWNER_BATCH):
        batch = owners[start : start + OWNER_BATCH]
        moved += _move_lanes(store, queue, batch)
        inserted.update(_plan_batch(store, queue, batch, now))
    if inserted or moved:
        store.notify(queue.name)
    return PlanSummary(queue.name, len(owners), {t.name: inserted.get(t.name, 0) for t in queue.types}, moved)


def _move_lanes(store: Store, queue: Queue, owners: Sequence[Owner]) -> int:
    moved = store.move_lanes(
        queue.name, [o.id for o in owners], [o.lane_or_id for o in owners], [o.lane_width for o in owners]
    )
    if moved:
        log.info("queue %s: %s waiting job(s) moved to the lane (or lane width) their owner has now", queue.name, moved)
    return moved


def _plan_batch(store: Store, queue: Queue, owners: Sequence[Owner], now: datetime) -> Counter[str]:
    reach = [coverage_wanted(job_type, now) for job_type in queue.types]
    found = store.read_coverage(
        queue.name,
        [o.id for o in owners],
        [t.name for t in queue.types],
        [horizon_start for horizon_start, _ in reach],
        [period for _, period in reach],
    )
    by_id = {owner.id: owner for owner in owners}
    priority = {job_type.name: position for position, job_type in enumerate(queue.types)}
    wanted = [
        (by_id[row.owner], priority[row.type], job)
        for row in found
        for job in plan_type(queue.job_type(row.type), row.coverage, now)
    ]
    if not wanted:
        return Counter()
    return _insert(store, queue, wanted, now)


def _insert(store: Store, queue: Queue, wanted: Iterable[tuple[Owner, int, PlannedJob]], now: datetime) -> Counter[str]:
    iso: dict[datetime | None, str | None] = {None: None}  # every owner shares the same few windows

    def text(instant: datetime | None) -> str | None:
        if instant not in iso:
            iso[instant] = instant.isoformat() if instant is not None else None
        return iso[instant]

    rows = json.dumps(
        [
            {
                "owner": owner.id,
                "lane": owner.lane_or_id,
                "lane_width": owner.lane_width,
                "type": job.type,
                "mode": job.mode.value,
                "priority": priority,
                "window_start": text(job.window_start),
                "window_end": text(job.window_end),
                "dedup_key": job.dedup_key,
            }
            for owner, priority, job in wanted
        ]
    )
    return store.insert_planned(queue.name, rows, now=now)
