"""Scale-out: jobs per second with one and with two Celery workers, each worker with the same number of slots.

Airflow runs with the CeleryExecutor on this machine (tests/support/celery_cluster.py): API server, scheduler,
DAG processor, triggerer, Redis as the broker, and 1 or 2 Celery workers of --slots processes each; the
queue's concurrency is slots x workers, so the worker DAG maps that many tasks. The queue holds --owners
one-job owners over --lanes lanes; a job is --pages pages and each page waits --latency seconds on a slow
API, as real syncs do, so worker slots and not the CPU should set the pace.

Each configuration starts a fresh Airflow (its own metadata database, Redis database and jobs schema), waits
until every slot is running a job, then counts the jobs completed in a window of --window seconds (from the
table's ``completed_at``) while sampling the running jobs and the machine's CPU. Rounds take turns at which
configuration goes first; each keeps its best round. Overlaps are pairs of completed jobs of one lane whose
runs overlap, plus samples with two running jobs in one lane. The CPU columns say whether the machine
or the slots set the pace: the machine's busy share (everything on it) and the CPU seconds per second
Airflow's own processes used.

    .venv/bin/python bench/scaleout.py            # 4 slots a worker, 2 rounds, 40-s windows: about 7 minutes
    .venv/bin/python bench/scaleout.py --quick    # 1 round, 20-s windows: about 3 minutes
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
from harness import database_url
from psycopg import sql

from tests.support.celery_cluster import CeleryCluster, find_redis
from tests.support.celery_workload import Workload, lane_overlaps


@dataclass(frozen=True)
class Measured:
    workers: int
    slots: int
    jobs: int
    seconds: float
    busy: float
    """Average share of the slots running a job during the window."""
    cpu: float
    """Share of the machine's CPU time that was not idle during the window (other users of the machine count)."""
    airflow_cpu: float
    """CPU seconds per second that Airflow's processes (tasks included) used during the window, of 2 on 2 cores."""
    overlaps: int

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds


class Watch(threading.Thread):
    """Samples the running jobs (per lane) a few times a second while the cluster works."""

    def __init__(self, url: str, schema: str) -> None:
        super().__init__(name="watch", daemon=True)
        self.url, self.schema = url, schema
        self.samples: list[tuple[float, int, int]] = []  # (time, running jobs, running lanes)
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        query = sql.SQL("SELECT count(*), count(DISTINCT lane) FROM {}.jobs WHERE status = %s").format(
            sql.Identifier(self.schema)
        )
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self.done.wait(0.2):
                    running, lanes = conn.execute(query, ["running"]).fetchone()
                    self.samples.append((time.monotonic(), running, lanes))
        except BaseException as exc:  # noqa: BLE001 - raised by stop()
            self.error = exc

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=10)
        if self.error is not None:
            raise RuntimeError("sampling the running jobs failed") from self.error


def cpu_times() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def process_cpu(pids: list[int]) -> float:
    """CPU seconds the processes have used so far (user + system)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def measure(url: str, args: argparse.Namespace, workers: int, home: Path) -> Measured:
    slots = args.slots * workers
    schema = f"synclane_bench_scaleout_{uuid.uuid4().hex[:8]}"
    workload = Workload(
        schema=schema,
        database_url=url,
        owners=args.owners,
        lanes=args.lanes,
        pages=args.pages,
        latency=args.latency,
        slots=slots,
        lease=60,
    )
    broker = find_redis(home)
    cluster = CeleryCluster(
        url,
        broker.url,
        workload,
        home / f"{workers}-workers-{uuid.uuid4().hex[:4]}",
        workers=workers,
        concurrency=args.slots,
        idle_timeout=600,
    )
    watch = Watch(url, schema)
    try:
        workload.prepare()
        cluster.start()
        watch.start()
        cluster.unpause()
        cluster.wait(
            lambda: watch.samples and watch.samples[-1][1] == slots, 180, f"all {slots} slots running a job", every=0.2
        )
        with psycopg.connect(url, autocommit=True) as conn:
            (opened,) = conn.execute("SELECT clock_timestamp()").fetchone()
            pids = [pid for service in cluster.services.values() for pid in service.members()]
            busy_before, total_before = cpu_times()
            airflow_before = process_cpu(pids)
            began = time.monotonic()
            time.sleep(args.window)
            (closed,) = conn.execute("SELECT clock_timestamp()").fetchone()
            busy_after, total_after = cpu_times()
            airflow_after = process_cpu(pids)
            ended = time.monotonic()
        window = [s for s in watch.samples if began <= s[0] <= ended]
        jobs = workload.jobs()
        if not any(job["status"] == "pending" for job in jobs):
            raise RuntimeError(f"the queue ran dry during the window: raise --owners above {args.owners}")
        done = sum(1 for job in jobs if job["completed_at"] is not None and opened <= job["completed_at"] < closed)
        watch.stop()
        lane_twice = sum(1 for _, running, lanes in watch.samples if running != lanes)
        return Measured(
            workers=workers,
            slots=slots,
            jobs=done,
            seconds=(closed - opened).total_seconds(),
            busy=sum(running for _, running, _ in window) / (len(window) * slots),
            cpu=(busy_after - busy_before) / (total_after - total_before),
            airflow_cpu=(airflow_after - airflow_before) / (ended - began),
            overlaps=len(lane_overlaps(jobs)) + lane_twice,
        )
    finally:
        watch.done.set()
        try:
            cluster.close()
        finally:
            broker.close()
            workload.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, default=4, help="slots (Celery processes) per worker")
    parser.add_argument("--owners", type=int, default=900, help="jobs in the queue (one per owner)")
    parser.add_argument("--lanes", type=int, default=64)
    parser.add_argument("--pages", type=int, default=4, help="pages per job")
    parser.add_argument("--latency", type=float, default=0.25, help="seconds the API takes per page")
    parser.add_argument("--window", type=float, default=40.0, help="seconds measured per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1 round, 20-s windows")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.window = 1, 20.0

    url = database_url()
    best: dict[int, Measured] = {}
    overlaps = 0
    print(
        f"{'workers':>7} {'slots':>5} {'round':>5} {'jobs':>5} {'seconds':>7} {'jobs/s':>7} {'pages/s':>7} "
        f"{'busy slots':>10} {'cpu':>5} {'airflow cpu':>11} {'overlaps':>8}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="synclane-scaleout-") as home:
        for round_number in range(args.rounds):
            for workers in (1, 2) if round_number % 2 == 0 else (2, 1):
                result = measure(url, args, workers, Path(home))
                overlaps += result.overlaps
                if workers not in best or result.jobs_per_s > best[workers].jobs_per_s:
                    best[workers] = result
                print(
                    f"{workers:>7} {result.slots:>5} {round_number + 1:>5} {result.jobs:>5} {result.seconds:7.1f} "
                    f"{result.jobs_per_s:7.2f} {result.jobs_per_s * args.pages:7.1f} {result.busy:10.0%} "
                    f"{result.cpu:5.0%} {result.airflow_cpu:11.2f} {result.overlaps:>8}",
                    flush=True,
                )
    one, two = best[1].jobs_per_s, best[2].jobs_per_s
    if args.latency > 0:
        ideal = args.slots / (args.pages * args.latency)
        print(
            f"one worker's slots at best: {ideal:.2f} jobs/s (slots / (pages x latency)); "
            f"one worker reached {one / ideal:.0%} of it, two reached {two / (2 * ideal):.0%} of twice that"
        )
    print(f"jobs_per_s_1={one:.2f} jobs_per_s_2={two:.2f} scaleout_ratio={two / one:.2f} overlaps={overlaps}")


if __name__ == "__main__":
    main()
