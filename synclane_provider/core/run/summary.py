"""What a worker did: jobs by outcome, pages and records, adding up across slots and resumes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from synclane_provider.core.run.arrivals import Arrivals
from synclane_provider.core.run.results import Outcome, RunResult


@dataclass
class Summary:
    """What a worker did: jobs by outcome, pages and records. Adds up across slots and resumes.

    A job is counted completed once. It can complete twice when the database server crashed after its
    finish was acknowledged but before that commit reached the disk (see ``SyncLane.synchronous_commit``):
    the job was taken and run again. Such second completions are counted under ``repeated`` instead, with
    their pages and records, which were served again. (Across an operator's resumes only the counts are
    carried, so there a repeat is seen only within one stretch of work.)
    """

    outcomes: Counter[str] = field(default_factory=Counter)
    pages: int = 0
    records: int = 0
    empty_takes: int = 0
    lane_races: int = 0
    repeated: int = 0
    completed_jobs: set[int] = field(default_factory=set, repr=False)
    arrivals: Arrivals = field(default_factory=Arrivals)
    """The completed jobs by type and owner: what an asset event tells downstream work (see arrivals.py)."""

    def add(self, result: RunResult) -> None:
        self.pages += result.pages
        self.records += result.records
        if result.outcome is Outcome.COMPLETED:
            if result.job.id in self.completed_jobs:
                self.repeated += 1
                return
            self.completed_jobs.add(result.job.id)
            self.arrivals.add(result.job, result.records, result.landed)
        self.outcomes[result.outcome.value] += 1

    def merge(self, other: "Summary") -> None:
        twice = self.completed_jobs & other.completed_jobs
        self.outcomes.update(other.outcomes)
        if twice:
            self.outcomes[Outcome.COMPLETED.value] -= len(twice)
        self.completed_jobs |= other.completed_jobs
        self.pages += other.pages
        self.records += other.records
        self.empty_takes += other.empty_takes
        self.lane_races += other.lane_races
        self.repeated += other.repeated + len(twice)
        self.arrivals.merge(other.arrivals)

    @property
    def jobs(self) -> int:
        return sum(self.outcomes.values())

    def as_dict(self) -> dict[str, int]:
        counts = {outcome.value: self.outcomes.get(outcome.value, 0) for outcome in Outcome}
        return {"jobs": self.jobs, **counts, "repeated": self.repeated, "pages": self.pages, "records": self.records}

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> "Summary":
        summary = cls(pages=data.get("pages", 0), records=data.get("records", 0), repeated=data.get("repeated", 0))
        summary.outcomes.update({o.value: data[o.value] for o in Outcome if data.get(o.value)})
        return summary
