"""Taking many jobs at once: ``take_many`` for n workers a statement against single takes, one a statement.

A worker process that runs many jobs at once can lease them ``--batch`` at a time (``Store.take_many``, each job
to a worker id of its own) instead of one ``finish_and_take`` (take only) each. On a fresh table of due jobs, four
a lane, spread round-robin over ``--lanes`` lanes (harness.fresh_jobs_table: the newest window of every lane
first), each side takes one job of every lane, through the engine's own Store on one session with a worker's
settings, and is timed from its first statement to its last. The sides take turns at going first, each on a table
prepared the same way; each side's best round counts, so that a burst of load from a neighbour on a shared
machine does not decide the ratio.

    .venv/bin/python bench/take_many.py                  # 500 jobs from 500 lanes, 50 a statement, 5 rounds
    .venv/bin/python bench/take_many.py --batch 10 --lanes 3000

Last line: ``take_many_s=… single_s=… ratio=…`` (ratio: single_s over take_many_s, how many times faster).
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

from harness import QUEUE, database_url, drop_schema, fresh_jobs_table, schema_name, session_settings

from synclane_provider.core import Queue, SnapshotType, SyncLane
from synclane_provider.core.db.database import Session
from synclane_provider.core.db.store import Store
from synclane_provider.core.run.slot import WORKER_SETTINGS

LEASE = timedelta(minutes=5)
JOBS_A_LANE = 4
"""Due jobs in each lane: a lane's head is taken, the rest wait behind it."""


def timed_takes(url: str, schema: str, *, take: int, batch: int) -> float:
    """Seconds to lease ``take`` jobs, ``batch`` a statement (take_many; 1: finish_and_take alone, take only)."""
    declaration = SyncLane(
        queues=[Queue(QUEUE, owners=lambda q: [], types=[SnapshotType("work", print, every=timedelta(days=1))])],
        schema=schema,
        create_schema=False,
    )
    session = Session(declaration.database(url), settings=session_settings(WORKER_SETTINGS["synchronous_commit"]))
    store = Store(session)
    store.queue_counts(QUEUE)  # connect before the clock starts
    taken = statements = 0
    started = time.perf_counter()
    while taken < take:
        asking = min(batch, take - taken)
        workers = [f"worker-{taken + n}" for n in range(asking)]
        if batch == 1:
            done = store.finish_and_take(queue=QUEUE, worker=workers[0], lease=LEASE, finish=None, take=True, now=None)
            got = 0 if done.taken is None else 1
        else:
            got = len(store.take_many(queue=QUEUE, workers=workers, lease=LEASE, now=None))
        statements += 1
        if got == 0:
            raise SystemExit(f"nothing left to take after {taken} jobs")
        taken += got
    seconds = time.perf_counter() - started
    session.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=int, default=500, help="lanes, and jobs each side takes (one a lane)")
    parser.add_argument("--batch", type=int, default=50, help="workers a take_many statement takes for")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    url = database_url()
    schema = schema_name("take_many")
    sides = {"take_many": args.batch, "single": 1}
    best: dict[str, float] = {}
    try:
        for round_number in range(args.rounds):
            order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
            for side in order:
                fresh_jobs_table(url, schema, jobs=JOBS_A_LANE * args.lanes, lanes=args.lanes)
                seconds = timed_takes(url, schema, take=args.lanes, batch=sides[side])
                best[side] = min(seconds, best.get(side, seconds))
                print(f"round {round_number + 1} {side}: {seconds:.3f} s")
    finally:
        drop_schema(url, schema)
    print(
        f"take_many_s={best['take_many']:.4f} single_s={best['single']:.4f} "
        f"ratio={best['single'] / best['take_many']:.2f}"
    )


if __name__ == "__main__":
    main()
