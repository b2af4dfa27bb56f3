"""Adaptive rate: a lane steered by the API's ``X-RateLimit-*`` headers, against declared rates and retrying alone.

The API (:mod:`adaptive_api`) allows 600 requests a minute in fixed 60-second windows from its start, and cuts
that to 300 from 45 s to 105 s of a 165-second run: a cut that starts and ends inside windows, which no declared
rate knows of. Two worker processes of two slots each share one lane of two owners with far more pages than the
run can fetch (one request a page). Four variants run one after the other, each on a fresh API and schema:

* ``adaptive``: no declared rate; the handler hands every answer's headers, a 429's too, to ``job.observe()``;
* ``static_right``: ``Rate(600, per=timedelta(minutes=1))``, the limit outside the cut;
* ``static_high``: 900 a minute, 50 % above it;
* ``retry_only``: no rate; a 429 raises ``JobThrottled`` with its ``Retry-After``, which holds the lane.

Each variant's line: ``quota_used`` (requests served over those the API allowed over the run, the limit in force
prorated over the time it was), ``refused_share`` (429s over all requests) and ``recovery_s`` (seconds from the
cut's end until 5 s of served requests come to 90 % of 10 a second again; ``inf``: never). The last line says
which of the adaptive lane's targets held: ``quota_used`` ≥ 0.9, ``refused_share`` ≤ 0.005, ``recovery_s`` ≤ 10,
and more quota used or fewer refusals than each baseline. A missed target is a finding, not a failure: the exit
code is non-zero only when a run crashed.

    .venv/bin/python bench/adaptive_rate.py            # 4 runs of 165 s: about 12 minutes
    .venv/bin/python bench/adaptive_rate.py --quick    # 3-second windows, 8.25-second runs: under a minute
    .venv/bin/python bench/adaptive_rate.py --variants adaptive,retry_only
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from adaptive_api import Figures, Schedule, WindowedAPI
from harness import database_url, drop_schema, schema_name

from synclane_provider.core import Rate
from tests.support.budget_race import ACCOUNTS, WORKERS, Served, declaration, enqueue_due, rate_spec, run_workers

JOBS_PER_OWNER = 2
PAGES = 1_000_000
"""Pages per job: more than any run fetches, so the lane always has work."""
SLOTS = 2
"""Slots in each worker process."""
STOP_GRACE = 60.0
"""Seconds the worker processes may take past the run's end to hand their jobs back and exit."""


@dataclass(frozen=True)
class Variant:
    name: str
    rate: Rate | None
    observe: bool


VARIANTS = (
    Variant("adaptive", None, observe=True),
    Variant("static_right", Rate(600, per=timedelta(minutes=1)), observe=False),
    Variant("static_high", Rate(900, per=timedelta(minutes=1)), observe=False),
    Variant("retry_only", None, observe=False),
)


def run_variant(url: str, variant: Variant, schedule: Schedule, seconds: float) -> Figures:
    """One run of ``seconds`` from when the jobs fall due, on a fresh API and a schema of its own (dropped after)."""
    schema = schema_name(f"adaptive_{variant.name}")
    api = WindowedAPI(schedule, ACCOUNTS)
    try:
        with Served(api) as served:
            synclane = declaration(
                schema, served.url, rate=variant.rate, pages=PAGES, requests_per_page=1, observe=variant.observe
            )
            due = enqueue_due(synclane, url, JOBS_PER_OWNER)
            api.start(origin_of(due))
            spec = {
                **rate_spec(variant.rate),
                "pages": PAGES,
                "requests_per_page": 1,
                "observe": variant.observe,
                "stop_at": due.timestamp() + seconds,
            }
            timeout = (due - datetime.now(timezone.utc)).total_seconds() + seconds + STOP_GRACE
            run_workers(url, schema, served.url, spec, slots=SLOTS, timeout=timeout)
    finally:
        drop_schema(url, schema)
    return Figures.of(api.log, schedule, seconds)


def origin_of(due: datetime) -> float:
    """The monotonic instant of the wall-clock instant ``due``."""
    return time.monotonic() + (due - datetime.now(timezone.utc)).total_seconds()


def targets(figures: dict[str, Figures]) -> list[tuple[str, bool]]:
    """The adaptive lane's targets, each with whether it held: its own figures, then against each baseline run."""
    adaptive = figures["adaptive"]
    held = [
        ("quota_used_at_least_0.9", adaptive.quota_used >= 0.9),
        ("refused_share_at_most_0.005", adaptive.refused_share <= 0.005),
        ("recovery_s_at_most_10", adaptive.recovery_s <= 10),
    ]
    for name, baseline in figures.items():
        if name != "adaptive":
            better = adaptive.quota_used > baseline.quota_used or adaptive.refused_share < baseline.refused_share
            held.append((f"better_than_{name}", better))
    return held


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, help="length of each run (default 2.75 windows: 165 s)")
    parser.add_argument("--window", type=float, default=60.0, help="the API's window in seconds (10 requests a second)")
    parser.add_argument("--variants", default=",".join(v.name for v in VARIANTS), help="which to run, comma-separated")
    parser.add_argument("--quick", action="store_true", help="3-second windows and 8.25-second runs")
    args = parser.parse_args()
    if args.quick:
        args.window = 3.0
    schedule = Schedule.scaled(args.window)
    seconds = args.seconds or 2.75 * args.window
    chosen = args.variants.split(",")
    unknown = set(chosen) - {v.name for v in VARIANTS}
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")

    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load {load()}")
    print(
        f"API: {schedule.limit} per {schedule.window:g} s window, cut to {schedule.cut_limit} from "
        f"{schedule.cut_from:g} s to {schedule.cut_to:g} s; runs of {seconds:g} s; {WORKERS} worker processes x "
        f"{SLOTS} slots on one lane",
        flush=True,
    )
    url = database_url()
    figures: dict[str, Figures] = {}
    for variant in VARIANTS:
        if variant.name in chosen:
            figures[variant.name] = run_variant(url, variant, schedule, seconds)
            print(figures[variant.name].line(variant.name), flush=True)
    print(f"load at the end {load()}")
    if "adaptive" not in figures:
        print("targets: not judged (no adaptive run)")
        return
    held = targets(figures)
    verdicts = " ".join(f"{name}={'held' if ok else 'missed'}" for name, ok in held)
    print(f"targets_held={sum(ok for _, ok in held)}/{len(held)} {verdicts}")


if __name__ == "__main__":
    main()
