"""A lease expired or shortened by hand, while its worker still runs pages.

Another worker may then take the job over. The first worker must notice at its next write (a cursor save or
a renewal, both fenced on the lease) and stop: it runs no page after the one in flight, writes nothing more,
and says once why it stopped, in words that tell this case from a row deleted or handed back by hand. The job is retried from the cursor last saved, like any lost attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest

from synclane_provider.core import Operations, Page, WorkerSlot
from synclane_provider.core.run.runner import Outcome
from tests.support.helpers import Background, declare, execute, owners, products, rows

PAGE_SECONDS = 0.3


class SlowPages:
    """Six pages of 50 records, each taking a while; remembers which worker started which page, and when."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str | None, float]] = []
        self.lock = threading.Lock()

    def __call__(self, job) -> Page:
        with self.lock:
            self.started.append((job.leased_by, job.cursor, time.monotonic()))
        time.sleep(PAGE_SECONDS)
        done = int(job.cursor or 0) + 50
        return Page(None if done >= 300 else str(done), 50)

    def pages_started_by(self, worker: str, after: float) -> list[str | None]:
        with self.lock:
            return [cursor for who, cursor, at in self.started if who == worker and at > after]


@pytest.mark.parametrize(
    "edit",
    [
        "lease_expires_at = now() - interval '1 second'",  # expired by hand
        "lease_expires_at = now() + interval '10 milliseconds'",  # shortened by hand
    ],
)
def test_a_worker_whose_lease_was_cut_short_by_hand_stops_when_another_takes_its_job(
    schema, database_url, admin, caplog, edit
):
    caplog.set_level(logging.WARNING)
    pages = SlowPages()
    declaration = declare(schema, products(pages), owner_source=owners("acme"), lease=timedelta(seconds=5))
    database = declaration.database(database_url)
    with (
        Operations(declaration, database) as ops,
        WorkerSlot(declaration, database, "shops", worker_id="first") as first,
        WorkerSlot(declaration, database, "shops", worker_id="second") as second,
    ):
        job = ops.enqueue("shops", "acme", "products", key="slow")
        running = Background(lambda: first.run_one(then_continue=False), name="first")
        deadline = time.monotonic() + 20
        while rows(admin, schema)[0]["cursor"] != "100":
            assert time.monotonic() < deadline, rows(admin, schema)
            time.sleep(0.02)

        execute(admin, schema, "UPDATE {jobs} SET " + edit)
        time.sleep(0.05)
        taken_over = second.run_one(then_continue=False)
        taken_at = time.monotonic()

        assert (taken_over.job.id, taken_over.outcome) == (job.id, Outcome.FAILED)  # the cut attempt, written down
        assert running.result(20).outcome is Outcome.LEASE_LOST
        assert pages.pages_started_by("first", after=taken_at) == []  # no page after the one in flight
        [row] = rows(admin, schema)
        assert (row["status"], row["leased_by"], row["attempt_count"]) == ("failed", None, 1)
        assert row["cursor"] in ("100", "150")  # the last page the first worker saved before the takeover
        assert "worker first stopped renewing its lease" in row["error"]

    told = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "lease ran out" in r.getMessage()
    ]
    assert len(told) == 1, told  # once, by whichever write noticed first
    assert "another worker took the job over, writing this attempt down as lost; the job is failed" in told[0]
