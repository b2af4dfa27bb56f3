"""The chaos soak (bench/soak.py) for two minutes in the suite, and its checks shown to see what they count.

The soak starts its own PostgreSQL cluster (it restarts and crashes it), so it needs Debian's server
binaries, not the test database; it fails, never skips, when they are missing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from soak_api import PAGE_RECORDS, Call, pages_of  # noqa: E402
from soak_check import MUST_BE_ZERO, Ack, Faults, Row, check  # noqa: E402


def soak(*args: str, timeout: float) -> tuple[dict[str, int], subprocess.CompletedProcess[str]]:
    done = subprocess.run(
        [sys.executable, str(BENCH / "soak.py"), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert "lost_pages=" in last, (
        f"no summary line; exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    return {key: int(float(value)) for key, value in (pair.split("=") for pair in last.split())}, done


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_minutes_of_kills_terminations_and_restarts_lose_no_page_and_never_overlap_a_lane():
    figures, done = soak("--minutes", "2", timeout=540)
    assert done.returncode == 0, f"{figures}\n{done.stderr[-4000:]}"
    for key in (*MUST_BE_ZERO, "worker_errors"):
        assert figures[key] == 0, (key, figures)
    for fault in ("worker_kills", "connections_terminated", "fast_restarts", "immediate_restarts"):
        assert figures[fault] > 0, (fault, figures)
    assert figures["jobs"] > 500 and figures["duplicate_pages"] > 0, figures  # work done, and crashes bit


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_planted_skipped_page_fails_the_soak():
    figures, done = soak("--minutes", "0.2", "--plant", "skip-page", timeout=280)
    assert done.returncode == 1
    assert figures["lost_pages"] > 0 and figures["wrong_counts"] > 0, figures


# The checks on planted records: each figure is shown to move.


def served(job: int, *, lane: str = "a", pid: int = 1, at: float = 0.0, pages: int | None = None) -> list[Call]:
    """Every page of ``job`` served once, one after the other from ``at``, 1 s each."""
    return [Call(job, lane, page, pid, at + page, at + page + 1) for page in range(pages or pages_of(job))]


def completed(*jobs: int) -> list[Row]:
    return [Row(job, "completed", pages_of(job) * PAGE_RECORDS) for job in jobs]


def test_a_clean_record_counts_nothing():
    figures = check(served(3) + served(4, lane="b"), [], Faults(), completed(3, 4))
    assert {k: figures[k] for k in ("lost_pages", "lane_overlaps", "duplicate_pages", "wrong_counts")} == dict.fromkeys(
        ("lost_pages", "lane_overlaps", "duplicate_pages", "wrong_counts"), 0
    )


def test_a_page_never_served_is_lost_and_a_running_job_is_stuck():
    assert pages_of(3) == 3
    figures = check(served(3)[:2], [], Faults(), [Row(3, "running", 20)])
    assert figures["lost_pages"] == 1 and figures["stuck_running"] == 1 and figures["unfinished"] == 1


def test_two_jobs_of_one_lane_served_at_once_overlap():
    figures = check(served(3) + served(4, at=0.5), [], Faults(), completed(3, 4))
    assert figures["lane_overlaps"] > 0


def test_a_page_served_twice_is_explained_only_by_a_fault_that_hit_its_worker():
    calls = served(3, pid=7) + [Call(3, "a", 1, 8, 10, 11)]  # page 1 again at 10, by another worker
    assert check(calls, [], Faults(), completed(3))["duplicate_pages_beyond_crashes"] == 1
    assert check(calls, [], Faults(kills=[(7, 5.0)]), completed(3))["duplicate_pages_beyond_crashes"] == 0
    assert check(calls, [], Faults(kills=[(9, 5.0)]), completed(3))["duplicate_pages_beyond_crashes"] == 1
    assert check(calls, [], Faults(terminations=[(7, 5.0)]), completed(3))["duplicate_pages_beyond_crashes"] == 0
    assert check(calls, [], Faults(restarts=[("fast", 4.0, 5.0)]), completed(3))["duplicate_pages_beyond_crashes"] == 0
    assert check(calls, [], Faults(kills=[(7, 20.0)]), completed(3))["duplicate_pages_beyond_crashes"] == 1


def test_an_acknowledged_write_seen_lost_is_blamed_on_an_immediate_restart_or_counted():
    calls = served(3) + [Call(3, "a", 1, 2, 20, 21), Call(3, "a", 2, 2, 21, 22)]  # back to page 1 at 20
    saved = [Ack("saved", 3, 2, 2.5)]  # the cursor at page 2 was acknowledged at 2.5
    crash = Faults(restarts=[("immediate", 10.0, 11.0)])
    figures = check(calls, saved, crash, completed(3))
    assert (figures["cursors_gone_back"], figures["acked_lost_without_crash"]) == (1, 0)
    figures = check(calls, saved, Faults(restarts=[("fast", 10.0, 11.0)]), completed(3))
    assert (figures["cursors_gone_back"], figures["acked_lost_without_crash"]) == (1, 1)
    done = [Ack("done", 3, -1, 3.5)]
    figures = check(calls, done, crash, completed(3))
    assert (figures["completed_run_again"], figures["acked_lost_without_crash"]) == (1, 0)
    assert check(served(3), done, Faults(), completed(3))["completed_run_again"] == 0


def test_a_request_the_fake_api_cannot_serve_is_kept_for_the_soak_to_report():
    import http.client

    from soak_api import FakeApi

    api = FakeApi()
    api.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
        conn.request("GET", "/page?lane=a&pid=1")  # no job: the API cannot serve it
        try:
            conn.getresponse()
        except (http.client.HTTPException, OSError):
            pass  # it closed the connection without answering
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
        conn.request("GET", "/page?job=3&lane=a&pid=1")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        api.close()
    assert len(api.errors) == 1 and "KeyError" in api.errors[0]
    assert [(call.job, call.page) for call in api.calls] == [(3, 0)]
