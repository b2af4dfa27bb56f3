"""A worker killed mid-page: its job is taken over from the saved cursor, and its lease is dead."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from synclane_provider.core import Operations, WorkerSlot
from synclane_provider.core.run.runner import Outcome
from tests.support.crash_worker import TOTAL_RECORDS, crash_declaration
from tests.support.helpers import rows

ROOT = Path(__file__).resolve().parent.parent


def test_a_killed_worker_is_taken_over_from_its_cursor_and_its_late_writes_are_refused(database_url, schema, admin):
    declaration = crash_declaration(schema)
    database = declaration.database(database_url)
    with Operations(declaration, database) as ops:
        ops.plan("shops")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.crash_worker", database_url, schema, "150"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        announced = child.stdout.readline().split()
        assert announced[:1] == ["in-page"], announced
        dead_worker = announced[2]
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()

    [row] = rows(admin, schema)
    assert (row["status"], row["cursor"], row["processed_count"], row["leased_by"]) == (
        "running",
        "150",
        150,
        dead_worker,
    )

    rescuer = WorkerSlot(declaration, database, "shops")
    assert rescuer.take() is None  # the lease is still the dead worker's until it expires
    results = []
    deadline = time.monotonic() + 10
    while not results or results[-1].outcome is not Outcome.COMPLETED:
        assert time.monotonic() < deadline, f"the expired lease was never taken over and retried: {results}"
        if (result := rescuer.run_one()) is not None:
            results.append(result)
        time.sleep(0.05)

    written_off = results[0]  # the dead worker's attempt, written down by the rescuer
    assert (written_off.outcome, written_off.pages) == (Outcome.FAILED, 0)
    assert written_off.error.startswith(f"WorkerLost: worker {dead_worker} stopped renewing its lease at cursor '150'")
    assert len(results) == 2
    assert (result.pages, result.records) == (3, TOTAL_RECORDS - 150)  # continued from cursor 150
    [row] = rows(admin, schema)
    assert (row["status"], row["processed_count"], row["attempt_count"]) == ("completed", TOTAL_RECORDS, 2)

    late = rescuer.store.save_page(
        row["id"], worker=dead_worker, cursor="0", processed_count=0, lease=timedelta(minutes=5), now=None
    )
    assert late is None
    assert rows(admin, schema)[0]["processed_count"] == TOTAL_RECORDS
    rescuer.close()
