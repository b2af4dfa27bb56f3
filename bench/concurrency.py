"""Many jobs in one slot: how close one process comes to running every lane at once, on how few connections
and how little memory, against one job per slot.

The work: ``lanes`` lanes of ``jobs`` one-page jobs each, every page waiting ``page`` seconds (``time.sleep`` in a
plain handler, ``await asyncio.sleep`` in an ``async def`` one), as an API call would. Lanes run in parallel and a
lane's jobs one after another, so no schedule beats ``jobs x page`` seconds; the efficiency is that bound over the
makespan achieved. Three sides, each on a fresh table of the same due jobs (one insert, then VACUUM ANALYZE):

* **threads**: one slot of ``jobs_per_slot = lanes`` over ``connections`` connections, the plain handler;
* **async**: the same slot, the ``async def`` handler;
* **one job per slot**: today's way, the plain handler, one job per slot and as many slots as the server has
  connections left for (``Store.connection_room()`` less a margin of 10, looked up just before each of its runs,
  at most one a lane; under ``--quick`` at most 20, so that a smoke check beside other tests leaves the shared
  server room: its ratio then says little).

While each runs, a watcher samples every 50 ms the client connections of the run (``pg_stat_activity`` rows with
the run's ``application_name``), this process's resident memory (``VmRSS``) and the pages in flight.
``rss_mb_per_job`` is the peak resident memory of a many-jobs run less what it was before its slot was made,
over the jobs it ran at once. ``vs_one_job_per_slot`` is the threads side's throughput over one job per slot's.
Sides take turns at going first from round to round and each keeps its best round (a shared machine's burst of
load should not decide a ratio); the connections and memory figures are the worst of every round.

    .venv/bin/python bench/concurrency.py            # 500 lanes x 4 jobs, 1 s pages, 2 rounds: about 2 minutes
    .venv/bin/python bench/concurrency.py --quick    # 100 lanes x 2 jobs, 0.5 s pages, 1 round: about 15 s
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import psycopg
from harness import POLL, QUEUE, database_url, drop_schema, fresh_jobs_table, schema_name

from synclane_provider.core import Job, Page, Queue, SnapshotType, SyncLane, WorkerPool
from synclane_provider.core.db.database import Database
from synclane_provider.core.db.store import Store

SAMPLE_EVERY = 0.05
"""Seconds between two of the watcher's looks."""
ROOM_MARGIN = 10
"""Connections left to the server's other clients when one job per slot takes as many slots as there is room for."""
QUICK_ONE_JOB_SLOTS = 20
"""The most slots of one job in a quick run, a smoke check that may run beside other tests on a shared server."""
TARGETS = {
    "efficiency_threads": (">=", 0.85),
    "efficiency_async": (">=", 0.85),
    "connections_peak": ("<=", 8),
    "rss_mb_per_job": ("<=", 1.0),
    "vs_one_job_per_slot": (">=", 5.0),
}


def rss_mb() -> float:
    """This process's resident memory now, in MB (``VmRSS``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


class InFlight:
    """Pages running now, counted by the handlers themselves, and the most at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


def handlers(page: float, in_flight: InFlight) -> dict[str, Callable[[Job], object]]:
    """The plain and the ``async def`` handler: one page each, waiting ``page`` seconds as an API call would."""

    def plain(job: Job) -> Page:
        in_flight.enter()
        try:
            time.sleep(page)
        finally:
            in_flight.leave()
        return Page(None, 1)

    async def asynchronous(job: Job) -> Page:
        in_flight.enter()
        try:
            await asyncio.sleep(page)
        finally:
            in_flight.leave()
        return Page(None, 1)

    return {"threads": plain, "async": asynchronous}


class Watcher:
    """Samples the run's client connections, this process's memory and the pages in flight every 50 ms, on a
    thread and a connection of its own (named apart, so that it does not count itself)."""

    def __init__(self, url: str, application_name: str, in_flight: InFlight) -> None:
        self._url = url
        self._application_name = application_name
        self._in_flight = in_flight
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="concurrency-watcher", daemon=True)
        self.connections_peak = 0
        self.rss_peak = 0.0
        self.samples = 0
        self.error: BaseException | None = None

    def __enter__(self) -> Watcher:
        self._conn = psycopg.connect(self._url, autocommit=True, application_name=f"{self._application_name}-watch")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()
        if self.error is not None:
            raise self.error

    def connections(self) -> int:
        """The run's client connections open now."""
        row = self._conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [self._application_name]
        ).fetchone()
        assert row is not None
        return int(row[0])

    def connections_after_close(self, *, within: float = 2.0) -> int:
        """The run's client connections still open ``within`` seconds after it closed them (0 as soon as none is: a
        server process leaves ``pg_stat_activity`` a moment after its client closes)."""
        deadline = time.monotonic() + within
        while (left := self.connections()) and time.monotonic() < deadline:
            time.sleep(SAMPLE_EVERY)
        return left

    def _watch(self) -> None:
        try:
            while not self._stop.wait(SAMPLE_EVERY):
                self.connections_peak = max(self.connections_peak, self.connections())
                self.rss_peak = max(self.rss_peak, rss_mb())
                self.samples += 1
        except BaseException as exc:  # noqa: BLE001 - raised on the bench's thread as the watch ends
            self.error = exc


@dataclass(frozen=True)
class Run:
    """One side's timed run."""

    side: str
    slots: int
    jobs_per_slot: int
    jobs: int
    completed: int
    seconds: float
    connections_peak: int
    connections_left: int
    rss_before: float
    rss_peak: float
    in_flight_peak: int

    @property
    def jobs_per_s(self) -> float:
        return self.completed / self.seconds

    @property
    def rss_mb_per_job(self) -> float:
        return (self.rss_peak - self.rss_before) / max(self.in_flight_peak, 1)


@dataclass(frozen=True)
class Work:
    lanes: int
    jobs: int
    """Jobs per lane, one after another."""
    page: float
    """Seconds each page waits."""
    connections: int
    """Connections of the many-jobs slot."""
    one_job_slots: int
    """The most slots of one job each (fewer when the server has less room)."""

    @property
    def bound(self) -> float:
        """No schedule finishes sooner: a lane's jobs in sequence, every lane at once."""
        return self.jobs * self.page


def run_side(url: str, schema: str, work: Work, *, side: str, slots: int | None, jobs_per_slot: int) -> Run:
    """``side``'s run on a fresh table: a WorkerPool drained, watched from start to end. ``slots`` None: as many as
    the server has room for (see :func:`one_job_slots`), at most ``work.one_job_slots``."""
    total = work.lanes * work.jobs
    fresh_jobs_table(url, schema, jobs=total, lanes=work.lanes)
    if slots is None:
        slots = one_job_slots(url, schema, work.one_job_slots)
    in_flight = InFlight()
    handler = handlers(work.page, in_flight)["async" if side == "async" else "threads"]
    declaration = SyncLane(
        queues=[
            Queue(QUEUE, owners=lambda q: [], types=[SnapshotType("work", handler, every=timedelta(days=1))]),
        ],
        schema=schema,
        create_schema=False,
    )
    application_name = f"synclane-bench-{schema}"[:63]
    database = Database(url, schema=schema, create_schema=False, application_name=application_name)
    with Watcher(url, application_name, in_flight) as watcher:
        rss_before = rss_mb()
        pool = WorkerPool(
            declaration,
            database,
            QUEUE,
            slots=slots,
            jobs_per_slot=jobs_per_slot,
            connections=work.connections,
            poll_interval=POLL,
        )
        started = time.perf_counter()
        try:
            summary = pool.drain()  # closes the slots' connections as it returns
            seconds = time.perf_counter() - started
            left = watcher.connections_after_close()
        finally:
            database.close()  # any connection the pool left open all the same: the server is shared
    return Run(
        side=side,
        slots=slots,
        jobs_per_slot=jobs_per_slot,
        jobs=total,
        completed=summary.outcomes.get("completed", 0),
        seconds=seconds,
        connections_peak=watcher.connections_peak,
        connections_left=left,
        rss_before=rss_before,
        rss_peak=watcher.rss_peak,
        in_flight_peak=in_flight.peak,
    )


def one_job_slots(url: str, schema: str, most: int) -> int:
    """Today's way at its widest: a slot per connection the server has room for now, less a margin, ``most`` at
    most. Looked up just before each run, as the server's other clients come and go."""
    database = Database(url, schema=schema, create_schema=False)
    session = database.session()
    try:
        room = Store(session).connection_room()
    finally:
        session.close()
    return max(1, min(room - ROOM_MARGIN, most))


def best_of_rounds(url: str, schema: str, work: Work, *, rounds: int) -> tuple[dict[str, Run], list[Run]]:
    """Each side's best (shortest) run over ``rounds`` rounds, sides taking turns at going first; and every run."""
    sides = {
        "threads": lambda: run_side(url, schema, work, side="threads", slots=1, jobs_per_slot=work.lanes),
        "async": lambda: run_side(url, schema, work, side="async", slots=1, jobs_per_slot=work.lanes),
        "one_job": lambda: run_side(url, schema, work, side="one_job", slots=None, jobs_per_slot=1),
    }
    names = list(sides)
    best: dict[str, Run] = {}
    runs: list[Run] = []
    for number in range(rounds):
        shift = number % len(names)
        for side in names[shift:] + names[:shift]:
            run = sides[side]()
            runs.append(run)
            print(
                f"{number + 1:>5} {side:>8} {run.slots:>5} {run.jobs_per_slot:>8} {run.completed:>5}/{run.jobs:<5} "
                f"{run.seconds:8.2f} {work.bound / run.seconds:10.3f} {run.jobs_per_s:7.1f} {run.connections_peak:>11} "
                f"{run.connections_left:>4} {run.rss_peak - run.rss_before:8.1f} {run.in_flight_peak:>9}",
                flush=True,
            )
            if side not in best or run.seconds < best[side].seconds:
                best[side] = run
    return best, runs


def judged(name: str, value: float) -> str:
    """The figure beside its target, and whether it held (printed, never asserted: the machine is shared)."""
    sign, target = TARGETS[name]
    held = value >= target if sign == ">=" else value <= target
    text = str(value) if isinstance(value, int) else f"{value:.3f}"
    return f"{name}: {text} (target {sign} {target:g}: {'held' if held else 'missed'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=int, default=500, help="lanes, and the many-jobs slot's jobs_per_slot")
    parser.add_argument("--jobs", type=int, default=4, help="one-page jobs per lane")
    parser.add_argument("--page", type=float, default=1.0, help="seconds each page waits")
    parser.add_argument("--connections", type=int, default=4, help="connections of the many-jobs slot")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; every side keeps its best")
    parser.add_argument("--one-job-slots", type=int, help="the most slots of one job (default: one a lane)")
    parser.add_argument(
        "--quick", action="store_true", help="100 lanes x 2 jobs, 0.5 s pages, 1 round, at most 20 slots of one job"
    )
    args = parser.parse_args()
    if args.quick:
        args.lanes, args.jobs, args.page, args.rounds = 100, 2, 0.5, 1
        args.one_job_slots = args.one_job_slots or QUICK_ONE_JOB_SLOTS
    work = Work(
        lanes=args.lanes,
        jobs=args.jobs,
        page=args.page,
        connections=args.connections,
        one_job_slots=min(args.one_job_slots or args.lanes, args.lanes),
    )

    url = database_url()
    schema = schema_name("concurrency")
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load {load()}")
    try:
        print(
            f"{work.lanes} lanes x {work.jobs} one-page jobs of {work.page:g} s: bound {work.bound:g} s; many jobs: "
            f"1 slot x {work.lanes} jobs over {work.connections} connections; one job per slot: as many slots as the "
            f"server has room for less {ROOM_MARGIN}, at most {work.one_job_slots}",
            flush=True,
        )
        print(
            f"{'round':>5} {'side':>8} {'slots':>5} {'jobs/slot':>8} {'completed':>11} {'seconds':>8} {'efficiency':>10} "
            f"{'jobs/s':>7} {'connections':>11} {'left':>4} {'+rss MB':>8} {'in flight':>9}"
        )
        best, runs = best_of_rounds(url, schema, work, rounds=args.rounds)
    finally:
        drop_schema(url, schema)
    figures, extra = figures_of(work, best, runs)
    for name, value in figures.items():
        print(judged(name, value))
    print(f"load at the end {load()}")
    print(
        " ".join(f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}" for key, value in extra.items())
    )
    if extra["incomplete_runs"] or extra["connections_left"]:
        raise SystemExit("not every job completed, or connections were left open: see the table above")


def figures_of(work: Work, best: dict[str, Run], runs: list[Run]) -> tuple[dict[str, float], dict[str, float | int]]:
    """The figures judged against their targets, and every figure of the last line (theirs first)."""
    many = [run for run in runs if run.side != "one_job"]
    figures: dict[str, float] = {
        "efficiency_threads": work.bound / best["threads"].seconds,
        "efficiency_async": work.bound / best["async"].seconds,
        "connections_peak": max(run.connections_peak for run in many),
        "rss_mb_per_job": max(run.rss_mb_per_job for run in many),
        "vs_one_job_per_slot": best["threads"].jobs_per_s / best["one_job"].jobs_per_s,
    }
    extra: dict[str, float | int] = {
        **figures,
        "rss_mb_per_job_threads": max(run.rss_mb_per_job for run in runs if run.side == "threads"),
        "rss_mb_per_job_async": max(run.rss_mb_per_job for run in runs if run.side == "async"),
        "connections_peak_one_job": max(run.connections_peak for run in runs if run.side == "one_job"),
        "one_job_slots": best["one_job"].slots,
        "incomplete_runs": sum(run.completed != run.jobs for run in runs),
        "connections_left": sum(run.connections_left for run in runs),
    }
    return figures, extra


if __name__ == "__main__":
    main()
