"""The lane race: 24 workers, 3 lanes, 600 short jobs, with the lane index and with it dropped.

The jobs arrive in waves; each wave wakes every idle worker at once, so all of them ask for a job while
every lane is free (deferred Airflow workers do the same when one NOTIFY reaches their triggers), and comes in
several inserts while they take, each newer than the last, so that takes see different heads of a lane. Every
job's run interval is recorded by its handler and overlapping intervals in one lane are counted. With
the index there must be none; without it the same race overlaps, which shows what the index buys.

    .venv/bin/python bench/lanes.py            # 24 workers, 3 lanes, 600 jobs
    .venv/bin/python bench/lanes.py --quick    # 12 workers, 3 lanes, 200 jobs
    .venv/bin/python bench/lanes.py --width 2  # lanes 2 wide: at most 2 jobs of a lane at once

With ``--width k`` overlaps are expected (k jobs of a lane may run together); what must hold is the most jobs
of one lane seen running at one instant, ``max_running_per_lane``: k with the index, more without it.
"""

from __future__ import annotations

import argparse

from harness import database_url, drop_schema, schema_name

from tests.support.lane_race import lane_race


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=24)
    parser.add_argument("--lanes", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--waves", type=int, default=10, help="how many waves the jobs arrive in")
    parser.add_argument("--page-seconds", type=float, default=0.002, help="how long each job's one page takes")
    parser.add_argument(
        "--arrivals", type=int, default=10, help="inserts a wave arrives in while the workers take, each newer"
    )
    parser.add_argument("--width", type=int, default=1, help="lane width: how many jobs of a lane may run at once")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.workers, args.jobs = 12, 200
    url = database_url()
    results = {}
    print(
        f"{'lane index':<11} {'workers':>7} {'lanes':>5} {'width':>5} {'jobs':>5} {'overlaps':>8} "
        f"{'max running':>11} {'lane races':>10} {'seconds':>7}"
    )
    for keep in (True, False):
        schema = schema_name("lanes_with" if keep else "lanes_without")
        try:
            result = lane_race(
                url,
                schema,
                workers=args.workers,
                lanes=args.lanes,
                jobs=args.jobs,
                waves=args.waves,
                page_seconds=args.page_seconds,
                keep_lane_index=keep,
                width=args.width,
                arrivals=args.arrivals,
            )
        finally:
            drop_schema(url, schema)
        results[keep] = result
        print(
            f"{'kept' if keep else 'dropped':<11} {args.workers:>7} {args.lanes:>5} {args.width:>5} {result.jobs:>5} "
            f"{result.overlaps:>8} {result.max_running_per_lane:>11} {result.lane_races:>10} {result.seconds:7.2f}"
        )
    print(
        f"width={args.width} max_running_per_lane={results[True].max_running_per_lane} "
        f"max_running_without_index={results[False].max_running_per_lane} "
        f"overlaps_with_index={results[True].overlaps} overlaps_without_index={results[False].overlaps}"
    )


if __name__ == "__main__":
    main()
