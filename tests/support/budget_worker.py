"""A worker process for the rate-budget runs: a pool of slots on the queue of ``tests.support.budget_race`` until every
job is settled, or until the instant its spec names; exits non-zero (with the traceback on stderr) if the pool raised.

    python tests/support/budget_worker.py DATABASE_URL SCHEMA API_URL SPEC_JSON SLOTS

The spec (see :func:`tests.support.budget_race.run_workers`) names the lane's rate (``requests`` None: none), the
handler's ``pages``, ``requests_per_page`` and whether it hands every answer to ``job.observe()`` (``observe``), and
optionally ``stop_at`` (a Unix time: the pool is shut down then, its jobs handed back at their cursors) and
``wakes_late_every`` (see :func:`wake_late`).
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from datetime import timedelta
from typing import Any
from urllib.request import urlopen

from synclane_provider.core import Rate, Summary, WorkerPool
from synclane_provider.core.run import waits
from tests.support.budget_race import QUEUE, WARM_UP_ACCOUNT, declaration


def main() -> None:
    url, schema, api_url, spec_json, slots = sys.argv[1:6]
    spec = json.loads(spec_json)
    synclane = declaration(
        schema,
        api_url,
        rate=rate_of(spec),
        pages=spec["pages"],
        requests_per_page=spec["requests_per_page"],
        observe=spec.get("observe", False),
    )
    if spec.get("wakes_late_every"):
        wake_late(spec["wakes_late_every"])
    with urlopen(f"{api_url}/{WARM_UP_ACCOUNT}/0", timeout=10) as response:  # a fresh process's first request is slow
        response.read()
    pool = WorkerPool(synclane, synclane.database(url), QUEUE, slots=int(slots))
    summary = pool.run_until_settled() if spec.get("stop_at") is None else run_until(pool, spec["stop_at"])
    print(json.dumps(summary.as_dict()), flush=True)


def rate_of(spec: dict[str, Any]) -> Rate | None:
    if spec["requests"] is None:
        return None
    return Rate(spec["requests"], per=timedelta(seconds=spec["per"]), burst=spec["burst"], headroom=spec["headroom"])


def run_until(pool: WorkerPool, stop_at: float) -> Summary:
    """Run the pool until the Unix time ``stop_at``, then shut it down (running pages finish first)."""
    timer = threading.Timer(max(stop_at - time.time(), 0.0), pool.shutdown)
    timer.start()
    try:
        return pool.run()
    finally:
        timer.cancel()


LATE = 0.3
"""Seconds a slot that wakes late oversleeps its turn: more than the rate's room for lateness at any rate."""


def wake_late(every: int) -> None:
    """Make every ``every``-th wait for a lane's turn in this process end ``LATE`` seconds late, as a thread the
    machine did not schedule in time would."""
    turns = itertools.count(1)
    sleep = waits.slept_on

    def late(wait: waits.Wait, stop: threading.Event) -> float:
        slept = sleep(wait, stop)
        if next(turns) % every == 0:
            time.sleep(LATE)
            slept += LATE
        return slept

    waits.slept_on = late


if __name__ == "__main__":
    main()
