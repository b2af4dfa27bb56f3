"""Cycle throughput: the engine's worker loop against the raw-SQL limit of its own statements, and a peer.

For each cell of workers x lanes, on a fresh table of due jobs, it times the
engine (a WorkerPool with a no-op handler, 1 page and 10 pages per job) and the
baseline (a minimal psycopg loop per connection issuing the same take / save /
finish statements) in alternating rounds -- engine first in odd rounds,
baseline first in even ones -- and keeps each side's best round, so that a
burst of load from a neighbour on a shared machine does not decide the ratio.
The peer is procrastinate with each job's lock set to its lane (1 "page" per
job, one round).

    .venv/bin/python bench/cycle.py            # the full matrix (about ten minutes)
    .venv/bin/python bench/cycle.py --quick    # 8x100 and 24x3 (under half a minute)
"""

from __future__ import annotations

import argparse

from harness import (
    Run,
    database_url,
    drop_schema,
    fresh_jobs_table,
    peer_available,
    run_baseline,
    run_engine,
    run_procrastinate,
    schema_name,
)


def parse_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def best_of_alternating(url: str, schema: str, *, rounds: int, jobs: int, lanes: int, workers: int, pages: int,
                        seconds: float) -> tuple[Run, Run]:
    """The engine's and the baseline's best run over ``rounds`` rounds, taking turns at going first."""
    sides = {"engine": run_engine, "baseline": run_baseline}
    best: dict[str, Run] = {}
    for round_number in range(rounds):
        order = ["engine", "baseline"] if round_number % 2 == 0 else ["baseline", "engine"]
        for side in order:
            fresh_jobs_table(url, schema, jobs=jobs, lanes=lanes)
            run = sides[side](url, schema, workers=workers, pages=pages, seconds=seconds)
            if side not in best or run.jobs_per_s > best[side].jobs_per_s:
                best[side] = run
    return best["engine"], best["baseline"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=parse_list, default=[2, 8, 24])
    parser.add_argument("--lanes", type=parse_list, default=[3, 100, 10000])
    parser.add_argument("--pages", type=parse_list, default=[1, 10])
    parser.add_argument("--jobs", type=int, default=100_000, help="due jobs in the table at the start of each run")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each timed run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of engine and baseline per cell")
    parser.add_argument("--no-peer", action="store_true", help="skip procrastinate")
    parser.add_argument("--quick", action="store_true", help="8x100 and 24x3 only, 1 page, 20k jobs, 2-second runs")
    args = parser.parse_args()
    cells = [(w, l) for w in args.workers for l in args.lanes]
    if args.quick:
        cells, args.pages, args.jobs, args.seconds = [(8, 100), (24, 3)], [1], 20_000, 2.0
    peer = peer_available() and not args.no_peer
    if not peer and not args.no_peer:
        print("procrastinate is not installed: the peer column stays empty "
              "(install it with: .venv/bin/uv pip install --python .venv/bin/python -c constraints.txt -e '.[bench]')")

    url = database_url()
    schema = schema_name("cycle")
    figures: dict[str, float] = {}
    peer_ratios = []
    print(f"{'workers':>7} {'lanes':>6} {'pages':>5} | {'engine j/s':>10} {'pages/s':>8} {'wasted':>7} | "
          f"{'baseline j/s':>12} {'wasted':>7} | {'ratio':>5} | {'peer j/s':>8} {'vs peer':>7}")
    for workers, lanes in cells:
        for pages in args.pages:
            engine, baseline = best_of_alternating(url, schema, rounds=args.rounds, jobs=args.jobs, lanes=lanes,
                                                   workers=workers, pages=pages, seconds=args.seconds)
            ratio = engine.jobs_per_s / baseline.jobs_per_s if baseline.jobs else float("nan")
            peer_text = f"{'-':>8} {'-':>7}"
            if peer and pages == 1:
                other = run_procrastinate(url, jobs=args.jobs, lanes=lanes, workers=workers, seconds=args.seconds)
                versus = engine.jobs_per_s / other.jobs_per_s if other.jobs else float("inf")
                peer_ratios.append(versus)
                peer_text = f"{other.jobs_per_s:8.0f} {versus:7.2f}"
            print(f"{workers:>7} {lanes:>6} {pages:>5} | {engine.jobs_per_s:10.0f} {engine.pages_per_s:8.0f} "
                  f"{engine.wasted_share:7.1%} | {baseline.jobs_per_s:12.0f} {baseline.wasted_share:7.1%} | "
                  f"{ratio:5.2f} | {peer_text}", flush=True)
            if pages == 1:
                figures[f"ratio_{workers}x{lanes}"] = ratio
                figures[f"wasted_{workers}x{lanes}"] = engine.wasted_share
                figures[f"jobs_per_s_{workers}x{lanes}"] = engine.jobs_per_s
            else:
                figures[f"ratio_{workers}x{lanes}_p{pages}"] = ratio
    drop_schema(url, schema)
    if peer_ratios:
        figures["vs_procrastinate_min"] = min(peer_ratios)
    keys = ["ratio_8x100", "ratio_24x3", "wasted_24x3", "vs_procrastinate_min"]
    ordered = [k for k in keys if k in figures] + [k for k in figures if k not in keys]
    print(" ".join(f"{key}={figures[key]:.3f}" for key in ordered))


if __name__ == "__main__":
    main()
