"""How one attempt at a job ended, from the worker's point of view: its outcome, pages, records and waits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from synclane_provider.core.durations import duration_text
from synclane_provider.core.records import Job, LandCounts


class Outcome(StrEnum):
    """How one run of a job ended, from the worker's point of view."""

    COMPLETED = "completed"
    FAILED = "failed"
    DEFERRED = "deferred"
    ABANDONED = "abandoned"
    RELEASED = "released"  # handed back as pending on a graceful stop
    PAUSED = "paused"  # its owner was paused (by its handler or a person): handed back as pending at its cursor
    LEASE_LOST = "lease_lost"  # the job is no longer this worker's (taken over, handed back); nothing more was written
    LEFT_RUNNING = "left_running"  # stopping, the worker gave up waiting for a page: the job's lease lapses


@dataclass(frozen=True)
class RunResult:
    job: Job
    outcome: Outcome
    pages: int
    records: int
    error: str | None = None
    waited: timedelta = timedelta(0)
    """How long the job waited before its pages for its lane's rate budget or a throttle on its lane."""
    landed: LandCounts = LandCounts()
    """What the job's saved pages landed in their destination tables, all its attempts (its row's counts)."""

    def describe(self) -> str:
        text = f"{self.job.describe()}: {self.outcome} after {self.pages} page(s), {self.records} record(s)"
        if self.landed != LandCounts():
            text += f" (rows {self.landed.describe()})"
        if self.waited >= timedelta(milliseconds=1):
            text += f", waited {duration_text(timedelta(seconds=round(self.waited.total_seconds(), 2)))} for lane {self.job.lane}"
        return f"{text}; {self.error}" if self.error else text

    __str__ = describe  # so that loggers format it only when the line is written
