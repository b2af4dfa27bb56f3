"""The planner: for each owner, what should exist minus what exists, inserted in one statement per batch."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from synclane_provider.core.database import Session
from synclane_provider.core.declarations import Owner, Queue
from synclane_provider.core.owners import owners_of, resolve_owner
from synclane_provider.core.planning import Coverage, PlannedJob, coverage_wanted, plan_type, utc
from synclane_provider.core.wakeups import notify

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
    session: Session,
    queue: Queue,
    *,
    now: datetime | None = None,
    owner: str | Owner | None = None,
) -> PlanSummary:
    """Plan every owner of ``queue`` (or only ``owner``) at ``now``; safe to repeat and to run concurrently.

    Each owner's waiting jobs are first moved to the lane the owner source gives it now (a running job
    finishes in the lane it started in), so that the new jobs and the old ones share one lane.
    """
    now = utc(now) if now is not None else datetime.now(timezone.utc)
    owners = owners_of(queue) if owner is None else [resolve_owner(queue, owner)]
    inserted: Counter = Counter()
    moved = 0
    for start in range(0, len(owners), OWNER_BATCH):
        batch = owners[start : start + OWNER_BATCH]
        moved += _move_lanes(session, queue, batch)
        inserted.update(_plan_batch(session, queue, batch, now))
    if inserted or moved:
        notify(session, queue.name)
    return PlanSummary(queue.name, len(owners), {t.name: inserted.get(t.name, 0) for t in queue.types}, moved)


def _move_lanes(session: Session, queue: Queue, owners: Sequence[Owner]) -> int:
    moved = session.run(
        "move_lanes", queue=queue.name, owners=[o.id for o in owners], lanes=[o.lane_or_id for o in owners]
    )
    if moved:
        log.info("queue %s: %s waiting job(s) moved to the lane their owner has now", queue.name, len(moved))
    return len(moved)


def _plan_batch(session: Session, queue: Queue, owners: Sequence[Owner], now: datetime) -> Counter:
    reach = [coverage_wanted(job_type, now) for job_type in queue.types]
    rows = session.run(
        "read_coverage",
        queue=queue.name,
        owners=[o.id for o in owners],
        types=[t.name for t in queue.types],
        horizon_starts=[horizon_start for horizon_start, _ in reach],
        period_starts=[period for _, period in reach],
    )
    by_id = {owner.id: owner for owner in owners}
    priority = {job_type.name: position for position, job_type in enumerate(queue.types)}
    wanted = [
        (by_id[row["owner"]], priority[row["type"]], job)
        for row in rows
        for job in plan_type(
            queue.job_type(row["type"]),
            Coverage(
                has_initial=bool(row["has_initial"]),
                initial_start=row["initial_start"],
                covered_until=row["covered_until"],
                first_created_at=row["first_created_at"],
            ),
            now,
        )
    ]
    if not wanted:
        return Counter()
    return _insert(session, queue, wanted, now)


def _insert(session: Session, queue: Queue, wanted: Iterable[tuple[Owner, int, PlannedJob]], now: datetime) -> Counter:
    iso: dict[datetime | None, str | None] = {None: None}  # every owner shares the same few windows

    def text(instant: datetime | None) -> str | None:
        if instant not in iso:
            iso[instant] = instant.isoformat()
        return iso[instant]

    rows = json.dumps(
        [
            {
                "owner": owner.id,
                "lane": owner.lane_or_id,
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
    inserted = session.run("insert_planned", queue=queue.name, now=now, rows=rows)
    return Counter({row["type"]: row["inserted"] for row in inserted})
