"""Retries that do not stampede: an API goes down for 10 seconds with 200 jobs in flight; when do they come back?

Every job's first page hits the API as it goes down and fails (503); each job then waits out its retry
delay (10 s doubling, full jitter by default, seeded) and retries until the API is back. The histogram is
of each job's first request after the outage, per second after the API came back: what the API sees as it
recovers. The same run without jitter shows the thundering herd the jitter prevents. Time is a pinned clock
moved in 250-ms ticks (see ``tests/support/stampede.py``), so the run is exact and takes a few seconds.

    .venv/bin/python bench/stampede.py
    .venv/bin/python bench/stampede.py --jobs 1000 --seed 7
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from harness import database_url, drop_schema, schema_name

from synclane_provider.core.declare.retry import Jitter
from tests.support.stampede import StampedeResult, stampede


def histogram(result: StampedeResult, *, width: int = 50) -> list[str]:
    """One line per second after the outage: the count and a bar."""
    if not result.first_after:
        return []
    scale = max(1, -(-result.max_per_bucket // width))
    return [
        f"  +{second:>3}s {result.first_after.get(second, 0):>4} {'#' * -(-result.first_after.get(second, 0) // scale)}"
        for second in range(min(result.first_after), max(result.first_after) + 1)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--outage-seconds", type=float, default=10)
    parser.add_argument("--retry-delay-seconds", type=float, default=10)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    url = database_url()
    results = {}
    for jitter in (Jitter.FULL, Jitter.NONE):
        schema = schema_name(f"stampede_{jitter.value}")
        try:
            result = stampede(
                url,
                schema,
                jobs=args.jobs,
                outage=timedelta(seconds=args.outage_seconds),
                retry_delay=timedelta(seconds=args.retry_delay_seconds),
                jitter=jitter,
                seed=args.seed,
            )
        finally:
            drop_schema(url, schema)
        results[jitter] = result
        print(
            f"jitter={jitter.value}: {result.completed} of {result.jobs} jobs completed; first request after the "
            f"outage, per second after the API came back:"
        )
        print("\n".join(histogram(result)))
    full, none = results[Jitter.FULL], results[Jitter.NONE]
    after = [n for second, n in full.requests_per_second.items() if second >= 1]
    print(
        f"jobs={args.jobs} outage_s={args.outage_seconds:g} max_per_bucket={full.max_per_bucket} "
        f"spread_s={full.spread_seconds} max_requests_per_s_after_start={max(after, default=0)} "
        f"max_per_bucket_without_jitter={none.max_per_bucket} spread_s_without_jitter={none.spread_seconds}"
    )


if __name__ == "__main__":
    main()
