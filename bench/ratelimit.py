"""The rate budget: one lane, workers in two processes, a fake API logging when each request arrives.

Every page makes two requests (the second taken with ``job.spend()``); the lane's budget is taken from the
database before each. The API's log is then counted: the most requests in any one-second window (at most
``requests + burst``) and the share of the budget used over the run (the lane kept busy uses most of it;
the rate's 5 % headroom is the rest).

    .venv/bin/python bench/ratelimit.py            # 5 a second, burst 1, 8 jobs of 5 pages: about 25 s
    .venv/bin/python bench/ratelimit.py --quick    # 4 jobs: about 20 s
    .venv/bin/python bench/ratelimit.py --rate 20 --burst 5 --jobs 20
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from harness import database_url, drop_schema, schema_name

from synclane_provider.core import Rate
from tests.support.budget_race import budget_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=5, help="requests a second of the lane's budget")
    parser.add_argument("--burst", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=8, help="jobs in the lane, half for each of its two owners")
    parser.add_argument("--pages", type=int, default=5, help="pages per job (two requests each)")
    parser.add_argument("--slots", type=int, default=2, help="worker slots in each of the two processes")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.jobs = 4
    rate = Rate(args.rate, per=timedelta(seconds=1), burst=args.burst)
    url = database_url()
    schema = schema_name("ratelimit")
    try:
        run = budget_run(
            url, schema, rate=rate, jobs_per_owner=max(args.jobs // 2, 1), pages=args.pages, slots=args.slots
        )
    finally:
        drop_schema(url, schema)
    print(f"{'budget/s':>8} {'burst':>5} {'requests':>8} {'max in 1 s':>10} {'utilisation':>11} {'seconds':>7}")
    print(
        f"{run.budget_per_s:>8g} {run.burst:>5} {run.requests:>8} {run.max_in_any_window:>10} "
        f"{run.utilisation:>11.3f} {run.seconds:>7.1f}"
    )
    print(
        f"budget_per_s={run.budget_per_s:g} max_in_any_window={run.max_in_any_window} utilisation={run.utilisation:.3f}"
    )


if __name__ == "__main__":
    main()
