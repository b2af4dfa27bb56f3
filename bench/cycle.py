"""Cycle throughput: the engine's worker loop against the raw-SQL limit of its own statements, and a peer.

For each commit setting (``synchronous_commit`` off, as the engine ships, and on, the server's default) and
each cell of workers x lanes, on a fresh table of due jobs, it times the engine (a WorkerPool with a no-op
handler, 1 page and 10 pages per job), the baseline (a minimal psycopg loop per connection issuing the same
take / save / finish statements) and, for 1-page jobs, the peer (procrastinate with each job's lock set to
its lane) in rounds, taking turns at going first, and keeps each side's best round, so that a burst of load
from a neighbour on a shared machine does not decide a ratio. Every side gets the same commit setting, the
same table preparation (one insert, then VACUUM ANALYZE) and the same number of rounds.

    .venv/bin/python bench/cycle.py                      # the full matrix, both commit settings
    .venv/bin/python bench/cycle.py --quick              # 8x100 and 24x3, 1 page, both settings
    .venv/bin/python bench/cycle.py --commit off --private   # one setting, on a private cluster of its own
"""

from __future__ import annotations

import argparse

from harness import (
    WORKER_SETTINGS,
    Load,
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

SHIPPED = WORKER_SETTINGS["synchronous_commit"]


def parse_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def best_of_rounds(
    url: str,
    schema: str,
    *,
    rounds: int,
    jobs: int,
    lanes: int,
    workers: int,
    pages: int,
    seconds: float,
    commit: str,
    peer: bool,
) -> dict[str, Run]:
    """Each side's best run over ``rounds`` rounds, the order of the sides rotating from round to round."""
    load = Load(workers=workers, pages=pages, seconds=seconds, synchronous_commit=commit)
    sides = {
        "engine": lambda: run_engine(url, schema, load),
        "baseline": lambda: run_baseline(url, schema, load),
    }
    if peer:
        sides["peer"] = lambda: run_procrastinate(
            url, jobs=jobs, lanes=lanes, workers=workers, seconds=seconds, synchronous_commit=commit
        )
    names = list(sides)
    best: dict[str, Run] = {}
    for round_number in range(rounds):
        shift = round_number % len(names)
        for side in names[shift:] + names[:shift]:
            if side != "peer":
                fresh_jobs_table(url, schema, jobs=jobs, lanes=lanes)
            run = sides[side]()
            if side not in best or run.jobs_per_s > best[side].jobs_per_s:
                best[side] = run
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=parse_list, default=[2, 8, 24])
    parser.add_argument("--lanes", type=parse_list, default=[3, 100, 10000])
    parser.add_argument("--pages", type=parse_list, default=[1, 10])
    parser.add_argument("--jobs", type=int, default=100_000, help="due jobs in the table at the start of each run")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each timed run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per cell; every side keeps its best")
    parser.add_argument(
        "--commit",
        type=lambda text: text.split(","),
        default=["off", "on"],
        help="synchronous_commit settings to run, each for every side (default: off,on)",
    )
    parser.add_argument("--private", action="store_true", help="run on a private cluster started for the run")
    parser.add_argument("--no-peer", action="store_true", help="skip procrastinate")
    parser.add_argument("--quick", action="store_true", help="8x100 and 24x3 only, 1 page, 20k jobs, 2-second runs")
    args = parser.parse_args()
    cells = [(workers, lanes) for workers in args.workers for lanes in args.lanes]
    if args.quick:
        cells, args.pages, args.jobs, args.seconds = [(8, 100), (24, 3)], [1], 20_000, 2.0
    peer = peer_available() and not args.no_peer
    if not peer and not args.no_peer:
        print(
            "procrastinate is not installed: the peer column stays empty "
            "(install it with: .venv/bin/uv pip install --python .venv/bin/python -c constraints.txt -e '.[bench]')"
        )

    if args.private:
        from soak_cluster import PrivateCluster  # a server of its own, stock settings, nothing else on it

        with PrivateCluster(settings={"shared_buffers": "128MB", "max_connections": "100"}) as cluster:
            measure(args, cells, peer, cluster.url)
    else:
        measure(args, cells, peer, database_url())


def measure(args: argparse.Namespace, cells: list[tuple[int, int]], peer: bool, url: str) -> None:
    schema = schema_name("cycle")
    figures: dict[str, float] = {}
    peer_ratios: dict[str, list[float]] = {}
    print(
        f"{'commit':>6} {'workers':>7} {'lanes':>6} {'pages':>5} | {'engine j/s':>10} {'pages/s':>8} {'wasted':>7} | "
        f"{'baseline j/s':>12} {'wasted':>7} | {'ratio':>5} | {'peer j/s':>8} {'vs peer':>7}"
    )
    for commit in args.commit:
        for workers, lanes in cells:
            for pages in args.pages:
                best = best_of_rounds(
                    url,
                    schema,
                    rounds=args.rounds,
                    jobs=args.jobs,
                    lanes=lanes,
                    workers=workers,
                    pages=pages,
                    seconds=args.seconds,
                    commit=commit,
                    peer=peer and pages == 1,
                )
                engine, baseline = best["engine"], best["baseline"]
                ratio = engine.jobs_per_s / baseline.jobs_per_s if baseline.jobs else float("nan")
                peer_text = f"{'-':>8} {'-':>7}"
                if "peer" in best:
                    other = best["peer"]
                    versus = engine.jobs_per_s / other.jobs_per_s if other.jobs else float("inf")
                    peer_ratios.setdefault(commit, []).append(versus)
                    peer_text = f"{other.jobs_per_s:8.0f} {versus:7.2f}"
                print(
                    f"{commit:>6} {workers:>7} {lanes:>6} {pages:>5} | {engine.jobs_per_s:10.0f} "
                    f"{engine.pages_per_s:8.0f} {engine.wasted_share:7.1%} | {baseline.jobs_per_s:12.0f} "
                    f"{baseline.wasted_share:7.1%} | {ratio:5.2f} | {peer_text}",
                    flush=True,
                )
                suffix = "" if commit == SHIPPED else f"_commit_{commit}"
                if pages == 1:
                    figures[f"ratio_{workers}x{lanes}{suffix}"] = ratio
                    figures[f"wasted_{workers}x{lanes}{suffix}"] = engine.wasted_share
                    figures[f"jobs_per_s_{workers}x{lanes}{suffix}"] = engine.jobs_per_s
                else:
                    figures[f"ratio_{workers}x{lanes}_p{pages}{suffix}"] = ratio
    drop_schema(url, schema)
    for commit, ratios in peer_ratios.items():
        figures[f"vs_procrastinate_min_commit_{commit}"] = min(ratios)
        figures[f"vs_procrastinate_max_commit_{commit}"] = max(ratios)
    keys = [
        "ratio_8x100",
        "ratio_24x3",
        "wasted_24x3",
        "vs_procrastinate_min_commit_off",
        "vs_procrastinate_min_commit_on",
    ]
    ordered = [k for k in keys if k in figures] + [k for k in figures if k not in keys]
    print(" ".join(f"{key}={figures[key]:.3f}" for key in ordered))


if __name__ == "__main__":
    main()
