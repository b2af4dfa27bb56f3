"""Worker processes SIGKILLed again and again, at random points: during a page, just as a cursor save or a
completion goes out. Every job still ends completed with exactly the records the fake API served, and no
lane ever ran two pages at once.

Three child processes (two slots each, leases of two seconds) drain 48 jobs over 16 lanes; the parent reads
what each child is doing and kills it on a chosen line, after a random delay of up to a few milliseconds,
so the kill lands before, inside or after the statement or page. A killed child is replaced at once; its
jobs wait for their leases to lapse and are taken over from their cursors.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from synclane_provider.core import Operations
from tests.support.crash_pool import LANES, OWNERS_PER_LANE, declaration, records_of
from tests.support.helpers import rows
from tests.support.lane_race import count_overlaps

ROOT = Path(__file__).resolve().parents[2]
KILLS = 30
KINDS = ("begin", "save", "finish")
DEADLINE = 240.0
"""Seconds the whole loop may take before the test gives up (it normally takes well under a minute)."""


class Child:
    """One worker process; its lines are read on a thread into the shared ``events`` queue."""

    def __init__(self, number: int, url: str, schema: str, events: queue.Queue, stderr) -> None:
        self.number = number
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.crash_pool", url, schema],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        self.kill_on: tuple[str, int] | None = None
        self.killed_at: float | None = None
        self.seen: Counter = Counter()
        self.open_pages: dict[tuple[str, str], tuple[str, float]] = {}  # (job, worker): (lane, began)
        threading.Thread(target=self._read, args=(events,), daemon=True).start()

    def _read(self, events: queue.Queue) -> None:
        for line in self.process.stdout:
            events.put((self, line.split()))
        events.put((self, ["exited"]))

    def go(self) -> None:
        """Let the slot that announced something go on."""
        try:
            self.process.stdin.write("go\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it is dead already

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.killed_at = time.monotonic()
        self.process.wait(30)


def test_worker_processes_killed_at_random_points_lose_no_job_and_never_overlap_a_lane(
    database_url, schema, admin, tmp_path
):
    synclane = declaration(schema)
    with Operations(synclane, synclane.database(database_url)) as ops:
        ops.plan("crash")
    rng = random.Random(20261130)
    events: queue.Queue = queue.Queue()
    log = tmp_path / "children.log"
    stderr = open(log, "w")
    started = time.monotonic()
    children: list[Child] = []
    running: set[Child] = set()  # not yet seen to exit
    pages: dict[str, list[tuple[float, float]]] = defaultdict(list)
    killed_on: Counter = Counter()

    def spawn(kill: bool) -> None:
        child = Child(len(children), database_url, schema, events, stderr)
        if kill:
            child.kill_on = (KINDS[len(children) % len(KINDS)], rng.randint(1, 3))
        children.append(child)
        running.add(child)

    try:
        for _ in range(3):
            spawn(kill=True)
        while running:
            assert time.monotonic() - started < DEADLINE, f"the crash loop ran out of time after {killed_on} kills"
            try:
                child, words = events.get(timeout=DEADLINE)
            except queue.Empty:
                raise AssertionError("no worker said anything for minutes") from None
            kind = words[0]
            if kind == "begin":
                child.open_pages[words[1], words[3]] = (words[2], float(words[4]))
            elif kind == "end":
                lane, began = child.open_pages.pop((words[1], words[3]))
                pages[lane].append((began, float(words[4])))
            elif kind == "exited":
                running.discard(child)
                if child.killed_at is None:
                    assert child.process.wait(30) == 0, log.read_text()[-3000:]
                for lane, began in child.open_pages.values():
                    pages[lane].append((began, child.killed_at))  # cut short by the kill
                continue
            if kind not in KINDS or child.killed_at is not None:
                continue
            child.seen[kind] += 1
            child.go()
            if child.kill_on == (kind, child.seen[kind]):
                time.sleep(rng.uniform(0, 0.003))  # before, inside or after what it announced
                child.kill()
                killed_on[kind] += 1
                if sum(killed_on.values()) == KILLS:
                    for survivor in running:
                        survivor.kill_on = None  # enough: let the last workers finish every job
                spawn(kill=sum(killed_on.values()) < KILLS)
    finally:
        for child in children:
            if child.process.poll() is None:
                child.process.kill()
                child.process.wait(30)
        stderr.close()

    assert sum(killed_on.values()) == KILLS, killed_on
    assert all(killed_on[kind] >= KILLS // len(KINDS) - 2 for kind in KINDS), killed_on
    done = rows(admin, schema)
    assert len(done) == LANES * OWNERS_PER_LANE
    wrong = [
        (r["owner"], r["status"], r["processed_count"], records_of(r["owner"]))
        for r in done
        if (r["status"], r["processed_count"]) != ("completed", records_of(r["owner"]))
    ]
    assert wrong == []
    assert sum(r["attempt_count"] for r in done) > len(done)  # jobs were taken over from killed workers
    assert count_overlaps(pages) == 0
