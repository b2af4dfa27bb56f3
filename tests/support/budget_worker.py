"""A worker process for the rate-budget run: a pool of slots on the queue of ``tests.support.budget_race`` until every job
is settled; exits non-zero (with the traceback on stderr) if the pool raised.

    python tests/support/budget_worker.py DATABASE_URL SCHEMA API_URL SPEC_JSON SLOTS
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from datetime import timedelta
from urllib.request import urlopen

from synclane_provider.core import Rate, WorkerPool
from synclane_provider.core.run.lane_gate import LaneGate
from tests.support.budget_race import QUEUE, WARM_UP_ACCOUNT, declaration


def main() -> None:
    url, schema, api_url, spec_json, slots = sys.argv[1:6]
    spec = json.loads(spec_json)
    rate = Rate(spec["requests"], per=timedelta(seconds=spec["per"]), burst=spec["burst"], headroom=spec["headroom"])
    synclane = declaration(
        schema,
        api_url,
        rate=rate if spec["enforce"] else None,
        pages=spec["pages"],
        requests_per_page=spec["requests_per_page"],
    )
    if spec.get("wakes_late_every"):
        wake_late(spec["wakes_late_every"])
    with urlopen(f"{api_url}/{WARM_UP_ACCOUNT}/0", timeout=10) as response:  # a fresh process's first request is slow
        response.read()
    summary = WorkerPool(synclane, synclane.database(url), QUEUE, slots=int(slots)).run_until_settled()
    print(json.dumps(summary.as_dict()), flush=True)


LATE = 0.3
"""Seconds a slot that wakes late oversleeps its turn: more than the rate's room for lateness at any rate."""


def wake_late(every: int) -> None:
    """Make every ``every``-th wait for a lane's turn in this process end ``LATE`` seconds late, as a thread the
    machine did not schedule in time would."""
    waits = itertools.count(1)
    sleep = LaneGate._sleep

    def late(gate: LaneGate, seconds: float) -> float:
        slept = sleep(gate, seconds)
        if seconds > 0 and next(waits) % every == 0:
            time.sleep(LATE)
            slept += LATE
        return slept

    LaneGate._sleep = late  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
