"""What a worker's completed jobs brought in, per type and owner: the ``extra`` of the asset event it emits.

Downstream work (an Airflow DAG scheduled on a queue/type's Asset) wants to know *which* accounts got new data
and over which windows, not that a job ran. One event per worker run (not per page or per job) keeps the
metadata database small, so this folds every completed job into one entry per owner: how many jobs, how many
records, and the span of their windows. Its size grows with the owners a worker served, never with the pages.
JSON-ready both ways, because it rides through deferrals inside the trigger's event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from synclane_provider.core.records import Job


@dataclass
class OwnerLanding:
    """One owner's completed jobs of one type: count, records, and the earliest start and latest end of their windows."""

    jobs: int = 0
    records: int = 0
    window_start: datetime | None = None
    window_end: datetime | None = None

    def add(self, job: Job, records: int) -> None:
        self.jobs += 1
        self.records += records
        if job.window_start is not None and (self.window_start is None or job.window_start < self.window_start):
            self.window_start = job.window_start
        if job.window_end is not None and (self.window_end is None or job.window_end > self.window_end):
            self.window_end = job.window_end

    def merge(self, other: "OwnerLanding") -> None:
        self.jobs += other.jobs
        self.records += other.records
        starts = [s for s in (self.window_start, other.window_start) if s is not None]
        ends = [e for e in (self.window_end, other.window_end) if e is not None]
        self.window_start = min(starts) if starts else None
        self.window_end = max(ends) if ends else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "records": self.records,
            "window_start": self.window_start.isoformat() if self.window_start else None,
            "window_end": self.window_end.isoformat() if self.window_end else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OwnerLanding":
        return cls(
            jobs=int(data["jobs"]),
            records=int(data["records"]),
            window_start=datetime.fromisoformat(data["window_start"]) if data.get("window_start") else None,
            window_end=datetime.fromisoformat(data["window_end"]) if data.get("window_end") else None,
        )


@dataclass
class Landed:
    """Completed jobs by type, then by owner."""

    by_type: dict[str, dict[str, OwnerLanding]] = field(default_factory=dict)

    def add(self, job: Job, records: int) -> None:
        owners = self.by_type.get(job.type)
        if owners is None:
            owners = self.by_type[job.type] = {}
        landing = owners.get(job.owner)
        if landing is None:
            landing = owners[job.owner] = OwnerLanding()
        landing.add(job, records)

    def merge(self, other: "Landed") -> None:
        for type_name, owners in other.by_type.items():
            mine = self.by_type.setdefault(type_name, {})
            for owner, landing in owners.items():
                mine.setdefault(owner, OwnerLanding()).merge(landing)

    def extra(self, queue: str, type_name: str) -> dict[str, Any]:
        """The asset event's ``extra`` for one type: totals, and per owner its jobs, records and window span.

        >>> from datetime import timezone
        >>> landed = Landed()
        >>> landed.by_type["orders"] = {"acme": OwnerLanding(2, 150, datetime(2026, 11, 1, tzinfo=timezone.utc),
        ...                                                  datetime(2026, 11, 30, tzinfo=timezone.utc))}
        >>> landed.extra("shops", "orders")["owners"]["acme"]["records"]
        150
        """
        owners = self.by_type.get(type_name, {})
        return {
            "queue": queue,
            "type": type_name,
            "jobs": sum(o.jobs for o in owners.values()),
            "records": sum(o.records for o in owners.values()),
            "owners": {owner: owners[owner].as_dict() for owner in sorted(owners)},
        }

    def as_dict(self) -> dict[str, dict[str, dict[str, Any]]]:
        return {t: {o: landing.as_dict() for o, landing in owners.items()} for t, owners in self.by_type.items()}

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, dict[str, Any]]]) -> "Landed":
        return cls({t: {o: OwnerLanding.from_dict(v) for o, v in owners.items()} for t, owners in data.items()})
