"""A worker's summary counts each job once.

A job completes twice only when the database server crashed after acknowledging its finish but before that
commit reached the disk (worker sessions commit with ``synchronous_commit`` off unless the declaration asks
otherwise): it is taken and run again. Such a second completion is a repeat, not another job.
"""

from __future__ import annotations

from datetime import datetime, timezone

from synclane_provider.core import Summary
from synclane_provider.core.records import Job, JobMode, JobStatus
from synclane_provider.core.run.runner import Outcome, RunResult

NOON = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)


def a_job(job_id: int) -> Job:
    return Job(
        id=job_id,
        queue="shops",
        owner="acme",
        lane="acme",
        type="orders",
        mode=JobMode.MANUAL,
        status=JobStatus.RUNNING,
        priority=0,
        window_start=None,
        window_end=None,
        dedup_key=f"k{job_id}",
        cursor=None,
        processed_count=0,
        attempt_count=1,
        error=None,
        next_run_at=NOON,
        leased_by="w",
        lease_expires_at=NOON,
        created_at=NOON,
        started_at=NOON,
        heartbeat_at=NOON,
        completed_at=None,
        stop_reason=None,
    )


def ran(job_id: int, outcome: Outcome = Outcome.COMPLETED) -> RunResult:
    return RunResult(a_job(job_id), outcome, pages=2, records=10)


def test_a_job_completed_twice_in_one_slot_counts_once_and_as_a_repeat() -> None:
    summary = Summary()
    for result in (ran(1), ran(2), ran(1)):
        summary.add(result)

    assert summary.as_dict()["completed"] == 2
    assert summary.jobs == 2
    assert summary.repeated == 1
    assert summary.pages == 6 and summary.records == 30  # the repeat's pages were served again


def test_a_job_completed_by_two_slots_counts_once_in_the_pool_total() -> None:
    first, second = Summary(), Summary()
    first.add(ran(1))
    first.add(ran(2))
    second.add(ran(2))
    second.add(ran(3))

    total = Summary()
    total.merge(first)
    total.merge(second)

    assert total.as_dict()["completed"] == 3
    assert total.repeated == 1


def test_attempts_that_did_not_complete_are_each_counted() -> None:
    summary = Summary()
    summary.add(ran(1, Outcome.FAILED))
    summary.add(ran(1, Outcome.FAILED))
    summary.add(ran(1))

    counts = summary.as_dict()
    assert (counts["jobs"], counts["failed"], counts["completed"], counts["repeated"]) == (3, 2, 1, 0)


def test_counts_survive_a_round_trip_through_the_operators_state() -> None:
    summary = Summary()
    summary.add(ran(1))
    summary.add(ran(1))

    assert Summary.from_dict(summary.as_dict()).as_dict() == summary.as_dict()
