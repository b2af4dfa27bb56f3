"""What a worker's completed jobs brought in, per type and owner: the ``extra`` of the asset event it emits.

Downstream work (an Airflow DAG scheduled on a queue/type's Asset) wants to know *which* accounts got new data
and over which windows, not that a job ran -- and what its pages did to the destination tables (``landed``: rows
inserted, updated, unchanged, stale and deleted, the jobs' counts). One event per worker run (not per page or per job) keeps the
metadata database small, so this folds every completed job into one entry per owner: how many jobs, how many
records, and the span of their windows. Its size grows with the owners a worker served, never with the pages.
JSON-ready both ways, because it rides through deferrals inside the trigger's event.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from synclane_provider.core.records import Completed, Job, LandCounts


@dataclass
class OwnerArrivals:
    """One owner's completed jobs of one type: count, records, and the earliest start and latest end of their windows.

    A re-sync's jobs fetched an old range again: they are kept apart (``resyncs``: per request key, each window
    and the records it brought), so that the span says where new data landed and a downstream DAG can rebuild
    exactly the re-fetched windows.
    """

    jobs: int = 0
    records: int = 0
    window_start: datetime | None = None
    window_end: datetime | None = None
    resyncs: dict[str, list[list[Any]]] = field(default_factory=dict)
    """Per re-sync request key: ``[window_start, window_end, records]`` of each re-fetched window (ISO texts;
    None for a snapshot)."""
    landed: LandCounts = LandCounts()
    """What the jobs' pages did to their destination tables (re-sync jobs' too), from the jobs' rows."""

    def add(self, job: Job, records: int, landed: LandCounts = LandCounts()) -> None:
        self.landed += landed
        if job.request_key is not None:
            self.resyncs.setdefault(job.request_key, []).append(
                [_text(job.window_start), _text(job.window_end), records]
            )
            return
        self.jobs += 1
        self.records += records
        if job.window_start is not None and (self.window_start is None or job.window_start < self.window_start):
            self.window_start = job.window_start
        if job.window_end is not None and (self.window_end is None or job.window_end > self.window_end):
            self.window_end = job.window_end

    @classmethod
    def of(cls, completed: Completed) -> "OwnerArrivals":
        """The landing of jobs completed together (an announcement's row): a re-sync's job as its window."""
        if completed.request_key is not None:
            window = [_text(completed.window_start), _text(completed.window_end), completed.records]
            return cls(resyncs={completed.request_key: [window]}, landed=completed.landed)
        return cls(
            completed.jobs,
            completed.records,
            completed.window_start,
            completed.window_end,
            landed=completed.landed,
        )

    def merge(self, other: "OwnerArrivals") -> None:
        self.landed += other.landed
        self.jobs += other.jobs
        self.records += other.records
        starts = [s for s in (self.window_start, other.window_start) if s is not None]
        ends = [e for e in (self.window_end, other.window_end) if e is not None]
        self.window_start = min(starts) if starts else None
        self.window_end = max(ends) if ends else None
        for key, windows in other.resyncs.items():
            self.resyncs.setdefault(key, []).extend(windows)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "jobs": self.jobs,
            "records": self.records,
            "window_start": _text(self.window_start),
            "window_end": _text(self.window_end),
            "landed": asdict(self.landed),
        }
        if self.resyncs:
            data["resyncs"] = self.resyncs
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OwnerArrivals":
        return cls(
            jobs=int(data["jobs"]),
            records=int(data["records"]),
            window_start=datetime.fromisoformat(data["window_start"]) if data.get("window_start") else None,
            window_end=datetime.fromisoformat(data["window_end"]) if data.get("window_end") else None,
            resyncs={key: [list(w) for w in windows] for key, windows in data.get("resyncs", {}).items()},
            landed=LandCounts(**data.get("landed", {})),
        )


def _text(instant: datetime | None) -> str | None:
    return instant.isoformat() if instant is not None else None


@dataclass
class Arrivals:
    """Completed jobs by type, then by owner."""

    by_type: dict[str, dict[str, OwnerArrivals]] = field(default_factory=dict)

    def add(self, job: Job, records: int, landed: LandCounts = LandCounts()) -> None:
        owners = self.by_type.get(job.type)
        if owners is None:
            owners = self.by_type[job.type] = {}
        landing = owners.get(job.owner)
        if landing is None:
            landing = owners[job.owner] = OwnerArrivals()
        landing.add(job, records, landed)

    def add_completed(self, completed: Completed) -> None:
        """Fold in jobs completed together, as an announcement reads them from the table."""
        owners = self.by_type.setdefault(completed.type, {})
        owners.setdefault(completed.owner, OwnerArrivals()).merge(OwnerArrivals.of(completed))

    def merge(self, other: "Arrivals") -> None:
        for type_name, owners in other.by_type.items():
            mine = self.by_type.setdefault(type_name, {})
            for owner, landing in owners.items():
                mine.setdefault(owner, OwnerArrivals()).merge(landing)

    def extra(self, queue: str, type_name: str) -> dict[str, Any]:
        """The asset event's ``extra`` for one type: totals, per owner its jobs, records, window span and ``landed``
        (rows inserted, updated, unchanged, stale and deleted by its completed jobs), and -- when
        re-sync work completed -- ``resyncs``: per request key, per owner, the windows fetched again.

        >>> from datetime import timezone
        >>> arrivals = Arrivals()
        >>> arrivals.by_type["orders"] = {"acme": OwnerArrivals(2, 150, datetime(2026, 11, 1, tzinfo=timezone.utc),
        ...                                                  datetime(2026, 11, 30, tzinfo=timezone.utc))}
        >>> arrivals.extra("shops", "orders")["owners"]["acme"]["records"]
        150
        >>> arrivals.by_type["orders"]["acme"].resyncs["march"] = [["2026-03-01T00:00:00+00:00", "2026-03-02T00:00:00+00:00", 7]]
        >>> arrivals.extra("shops", "orders")["resyncs"]
        {'march': {'acme': [{'window_start': '2026-03-01T00:00:00+00:00', 'window_end': '2026-03-02T00:00:00+00:00', 'records': 7}]}}
        """
        owners = self.by_type.get(type_name, {})
        extra: dict[str, Any] = {
            "queue": queue,
            "type": type_name,
            "jobs": sum(o.jobs for o in owners.values()),
            "records": sum(o.records for o in owners.values()),
            "landed": asdict(sum((o.landed for o in owners.values()), LandCounts())),
            "owners": {
                owner: {k: v for k, v in owners[owner].as_dict().items() if k != "resyncs"}
                for owner in sorted(owners)
                if owners[owner].jobs
            },
        }
        resyncs: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for owner in sorted(owners):
            for key, windows in owners[owner].resyncs.items():
                resyncs.setdefault(key, {})[owner] = [
                    {"window_start": start, "window_end": end, "records": records}
                    for start, end, records in sorted(windows, key=lambda w: w[0] or "", reverse=True)
                ]
        if resyncs:
            extra["resyncs"] = {key: resyncs[key] for key in sorted(resyncs)}
        return extra

    def as_dict(self) -> dict[str, dict[str, dict[str, Any]]]:
        return {t: {o: landing.as_dict() for o, landing in owners.items()} for t, owners in self.by_type.items()}

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, dict[str, Any]]]) -> "Arrivals":
        return cls({t: {o: OwnerArrivals.from_dict(v) for o, v in owners.items()} for t, owners in data.items()})
