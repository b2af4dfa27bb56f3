"""A page that kills its worker process every time: the job is taken over, backs off, is deferred and ends
abandoned with the reason on its row -- after exactly one death per attempt -- and the other job of its lane
completes meanwhile."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from synclane_provider.core import Operations
from tests.support.helpers import rows
from tests.support.poison_worker import MAX_ATTEMPTS, declaration

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 90.0


def test_a_page_that_kills_its_worker_every_time_is_abandoned_and_its_lane_goes_on(database_url, schema, admin):
    synclane = declaration(schema)
    with Operations(synclane, synclane.database(database_url)) as ops:
        ops.plan("poison")
    deaths: list[int] = []
    started = time.monotonic()
    while True:
        assert time.monotonic() - started < DEADLINE, (
            f"not settled after {len(deaths)} worker deaths: {rows(admin, schema)}"
        )
        child = subprocess.run(
            [sys.executable, "-m", "tests.support.poison_worker", database_url, schema],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        pid = int(child.stdout.split()[1])
        if child.returncode == 0:
            assert child.stdout.split()[-1] == "settled", child.stdout + child.stderr
            break
        assert child.returncode == -9, child.stderr[-3000:]  # killed by its own page
        deaths.append(pid)

    by_owner = {r["owner"]: r for r in rows(admin, schema)}
    poison, neighbour = by_owner["acme-us"], by_owner["acme-eu"]
    assert len(deaths) == MAX_ATTEMPTS + 1  # one death per attempt: the regular ones and the last
    assert (poison["status"], poison["cursor"], poison["processed_count"]) == ("abandoned", "50", 50)
    assert poison["attempt_count"] == MAX_ATTEMPTS + 1
    lost = re.fullmatch(
        r"WorkerLost: worker [^:]+:(\d+):poison-\d:\w+ stopped renewing its lease at cursor '50' "
        r"\(lost (\d+) time\(s\) in a row\)",
        poison["error"],
    )
    assert lost, poison["error"]
    assert (int(lost.group(1)), int(lost.group(2))) == (deaths[-1], MAX_ATTEMPTS + 1)
    assert (neighbour["status"], neighbour["processed_count"]) == ("completed", 250)
