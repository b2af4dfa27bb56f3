"""Chaos soak: workers killed, connections terminated and the server restarted at random, for N minutes.

    .venv/bin/python bench/soak.py --minutes 2
    .venv/bin/python bench/soak.py --minutes 30 --seed 7

It starts a private PostgreSQL cluster (Debian's binaries, a temp data directory and a port of its own:
see soak_cluster.py), a fake API that records every page it serves (soak_api.py), and worker processes
(soak_worker.py, a pool of slots each). A feeder enqueues jobs at a steady rate while, every second or
few, one fault strikes at random (the first few are one of each kind):

* a worker process is SIGKILLed (and a new one started);
* some worker connections are ended with ``pg_terminate_backend``;
* the server is restarted ``fast`` (clean) or ``immediate`` (a crash, recovered at start).

After N minutes the faults and the feeder stop, the workers get time to finish every job, and are stopped
gracefully. The checks (soak_check.py) then read the API's calls, the workers' acknowledged writes and the
table, and the last line says, ``key=value``::

    lost_pages=0 lane_overlaps=0 stuck_running=0 duplicate_pages_beyond_crashes=0 ... worker_kills=…
    connections_terminated=… fast_restarts=… immediate_restarts=… completed_run_again=… cursors_gone_back=…

The process exits 1 when a figure that must be zero is not, or a worker died of anything but a kill.
``--plant`` breaks one guarantee on purpose (a lane's page asked from two threads at once, a page skipped,
a page asked twice, a job left running; or the lane index dropped, whose races a short run may not hit) to
show the checks see it. Everything it starts is stopped and the cluster removed.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from soak_api import FakeApi  # noqa: E402
from soak_check import MUST_BE_ZERO, Faults, Row, check, parse_acks  # noqa: E402
from soak_cluster import PrivateCluster  # noqa: E402
from soak_worker import LEASE, QUEUE, TYPE, declaration, owners_of  # noqa: E402

from synclane_provider.core import Operations  # noqa: E402

SCHEMA = "soak"
FAULTS = {"kill": 4, "terminate": 3, "fast": 1, "immediate": 2}
"""Relative weights of the faults: workers die most often, the server crashes now and then."""
PLANTS = ("lane-index", "parallel-call", "skip-page", "double-call", "stuck")


class Workers:
    """The worker processes: started, killed, replaced, stopped; any that dies on its own is an error."""

    def __init__(self, url: str, api_port: int, root: Path, env: dict[str, str]) -> None:
        self.url, self.api_port, self.root, self.env = url, api_port, root, env
        self.live: list[subprocess.Popen[bytes]] = []
        self.all: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.killed: set[int] = set()

    def spawn(self) -> None:
        number = len(self.all)
        stderr = self.root / f"worker-{number}.err"
        process = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "soak_worker.py"),
                self.url,
                SCHEMA,
                str(self.api_port),
                str(self.root / "acks.log"),
            ],
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=open(stderr, "wb"),
        )
        self.live.append(process)
        self.all.append((process, stderr))

    def kill(self, rng: random.Random) -> int:
        process = rng.choice(self.live)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        self.killed.add(process.pid)
        self.live.remove(process)
        self.spawn()
        return process.pid

    def died_on_their_own(self) -> list[str]:
        """Stderr tails of workers that exited without being killed, with a non-zero code."""
        return [
            f"worker pid {p.pid} exited {p.returncode}:\n" + path.read_text(errors="replace")[-3000:]
            for p, path in self.all
            if p.poll() is not None and p.pid not in self.killed and p.returncode != 0
        ]

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM every live worker (a graceful stop) and wait; one that does not stop in time is killed."""
        for process in self.live:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.live:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
                print(f"worker pid {process.pid} did not stop within {timeout:.0f}s of SIGTERM", file=sys.stderr)
                process.returncode = -1  # counted as an error

    def kill_all(self) -> None:
        for process, _ in self.all:
            if process.poll() is None:
                process.kill()
                process.wait(30)


def admin(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, connect_timeout=10, application_name="soak-admin")


def terminate_some(url: str, rng: random.Random) -> list[int]:
    """End a random half (at least one) of the worker connections; returns the worker pids hit."""
    with admin(url) as conn:
        rows = conn.execute(
            "SELECT pid, application_name FROM pg_stat_activity WHERE application_name LIKE 'soak-worker-%'"
        ).fetchall()
        chosen = rng.sample(rows, max(1, len(rows) // 2)) if rows else []
        for pid, _ in chosen:
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])
    return [int(name.rsplit("-", 1)[1]) for _, name in chosen]


class Feeder(threading.Thread):
    """Enqueues jobs at a steady rate over every owner, through the engine's own operations (which wait out
    the restarts); an error is kept and raised by the soak."""

    def __init__(self, url: str, lanes: int, rate: float) -> None:
        super().__init__(name="soak-feeder", daemon=True)
        self.synclane = declaration(SCHEMA, lanes=lanes, slots=1)
        self.owners = owners_of(lanes)
        self.url, self.rate = url, rate
        self.stop = threading.Event()
        self.enqueued = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        database = self.synclane.database(self.url)
        database.application_name = "soak-feeder"
        try:
            with Operations(self.synclane, database) as ops:
                started = time.monotonic()
                while not self.stop.is_set():
                    due = int((time.monotonic() - started) * self.rate)
                    while self.enqueued < due and not self.stop.is_set():
                        owner = self.owners[self.enqueued % len(self.owners)]
                        ops.enqueue(QUEUE, owner.id, TYPE, key=f"soak:{self.enqueued}")
                        self.enqueued += 1
                    self.stop.wait(0.05)
        except BaseException as exc:  # noqa: BLE001 - raised in the soak's thread
            self.error = exc


def final_rows(url: str) -> list[Row]:
    with admin(url) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, status, processed_count FROM {}.jobs WHERE queue = %s").format(sql.Identifier(SCHEMA)),
            [QUEUE],
        ).fetchall()
    return [Row(*row) for row in rows]


def settle(url: str, timeout: float) -> None:
    """Wait until every job is completed (or abandoned), or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with admin(url) as conn:
            (waiting,) = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.jobs WHERE status NOT IN ('completed', 'abandoned')").format(
                    sql.Identifier(SCHEMA)
                )
            ).fetchone()
        if waiting == 0:
            return
        time.sleep(0.5)


def plant_before(plant: str, url: str) -> None:
    with admin(url) as conn:
        if plant == "lane-index":
            conn.execute(sql.SQL("DROP INDEX {}.jobs_one_running_per_lane").format(sql.Identifier(SCHEMA)))


def plant_during(plant: str, url: str) -> None:
    """``stuck``: one waiting job made running under a worker that does not exist, its lease years long."""
    if plant != "stuck":
        return
    with admin(url) as conn:
        while True:
            try:
                conn.execute(
                    sql.SQL(
                        "UPDATE {}.jobs SET status = 'running', leased_by = 'ghost', lease_expires_at = now() + "
                        "interval '10 years' WHERE id = (SELECT max(id) FROM {}.jobs WHERE status = 'pending')"
                    ).format(sql.Identifier(SCHEMA), sql.Identifier(SCHEMA))
                )
                return
            except psycopg.errors.UniqueViolation:
                time.sleep(0.01)  # its lane had a job running: try again


def inject(fault: str, cluster: PrivateCluster, workers: Workers, faults: Faults, rng: random.Random) -> None:
    if fault == "kill":
        pid = workers.kill(rng)
        faults.kills.append((pid, time.monotonic()))
    elif fault == "terminate":
        for pid in terminate_some(cluster.url, rng):
            faults.terminations.append((pid, time.monotonic()))
    else:
        began = time.monotonic()
        cluster.restart(fault)
        faults.restarts.append((fault, began, time.monotonic()))


def soak(args: argparse.Namespace) -> dict[str, int]:
    rng = random.Random(args.seed)
    faults = Faults()
    api = FakeApi(seed=args.seed)
    api.start()
    env = {
        "SOAK_LANES": str(args.lanes),
        "SOAK_SLOTS": str(args.slots),
        "SOAK_SYNCHRONOUS_COMMIT": args.synchronous_commit,
        "SOAK_PLANT": args.plant or "",
    }
    with PrivateCluster() as cluster:
        workers = Workers(cluster.url, api.port, cluster.root, env)
        feeder = Feeder(cluster.url, args.lanes, args.rate)
        try:
            with Operations(feeder.synclane, feeder.synclane.database(cluster.url)) as ops:
                ops.session.run("get_job", id=0)  # connecting creates the schema, before any worker does
            plant_before(args.plant, cluster.url)
            feeder.start()
            for _ in range(args.workers):
                workers.spawn()
            ends = time.monotonic() + args.minutes * 60
            planted = False
            # One of each kind first (in a random order), so that even a short soak strikes with every one.
            first = rng.sample(list(FAULTS), len(FAULTS))
            while time.monotonic() < ends:
                time.sleep(rng.uniform(0.5, 2 * args.every - 0.5))
                if feeder.error is not None:
                    raise feeder.error
                if not planted and time.monotonic() > ends - args.minutes * 30:
                    plant_during(args.plant, cluster.url)
                    planted = True
                if died := workers.died_on_their_own():
                    raise RuntimeError("a worker died on its own:\n" + "\n".join(died))
                fault = first.pop() if first else rng.choices(list(FAULTS), weights=list(FAULTS.values()))[0]
                inject(fault, cluster, workers, faults, rng)
            feeder.stop.set()
            feeder.join(120)
            if feeder.error is not None:
                raise feeder.error
            settle(cluster.url, timeout=LEASE.total_seconds() * 3 + 60)
            workers.stop()
            died = workers.died_on_their_own()
            figures = check(
                api.snapshot(), parse_acks((cluster.root / "acks.log").read_text()), faults, final_rows(cluster.url)
            )
            figures.update(faults.counts())
            figures["enqueued"] = feeder.enqueued
            figures["worker_errors"] = len(died) + len(api.errors)
            for text in api.errors:
                print(f"the fake API failed a request:\n{text}", file=sys.stderr)
            figures["deadlocks"] = cluster.count_in_log("deadlock detected")
            for text in died:
                print(text, file=sys.stderr)
            return figures
        finally:
            feeder.stop.set()
            workers.kill_all()
            api.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=2.0, help="how long faults are injected")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--workers", type=int, default=3, help="worker processes alive at any time")
    parser.add_argument("--slots", type=int, default=3, help="slots (threads) per worker process")
    parser.add_argument("--lanes", type=int, default=12)
    parser.add_argument("--rate", type=float, default=25.0, help="jobs enqueued per second")
    parser.add_argument("--every", type=float, default=2.0, help="mean seconds between faults")
    parser.add_argument(
        "--synchronous-commit",
        default="off",
        choices=["off", "on"],
        help="the worker sessions' setting (the engine ships off)",
    )
    parser.add_argument("--plant", choices=PLANTS, help="break one guarantee on purpose: the checks must see it")
    args = parser.parse_args()
    # The feeder waiting out each restart says so at WARNING: expected here, and the summary says what counts.
    logging.basicConfig(level=logging.ERROR)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (finally blocks) on SIGTERM too
    started = time.monotonic()
    figures = soak(args)
    figures["minutes"] = round((time.monotonic() - started) / 60, 1)
    first = list(MUST_BE_ZERO) + ["worker_errors"]
    print(" ".join(f"{key}={figures[key]}" for key in first + [k for k in figures if k not in first]), flush=True)
    sys.exit(1 if any(figures[key] for key in first) else 0)


if __name__ == "__main__":
    main()
