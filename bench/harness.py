"""What the benchmarks share: the database, a table filled with due jobs, and timed runs of the engine,
of a minimal psycopg loop issuing the same statements (the baseline), and of procrastinate (the peer).

Figures are only compared within one run on one server: the machine is shared and noisy, so a
benchmark reports ratios measured side by side, never absolute targets.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from synclane_provider.core import Job, Page, Queue, SnapshotType, SyncLane, WorkerPool  # noqa: E402
from synclane_provider.core.db.queries import statement  # noqa: E402
from synclane_provider.core.db.wakeups import channel, payload  # noqa: E402
from synclane_provider.core.declare.stretch import OwnerStretch  # noqa: E402
from synclane_provider.core.run.slot import WORKER_SETTINGS  # noqa: E402
from synclane_provider.core.schema import create_schema  # noqa: E402
from synclane_provider.core.states import OwnerHealth  # noqa: E402
from tools.postgres import find_url  # noqa: E402

QUEUE = "bench"
POLL = SyncLane(queues=[]).poll_interval  # the default: how long an idle worker sleeps between looks


def database_url() -> str:
    return find_url("SYNCLANE_BENCH_DATABASE_URL", ROOT / ".pgdata" / "bench")


@dataclass(frozen=True)
class Run:
    """One timed run: jobs and pages done, takes that returned nothing or lost a lane race."""

    jobs: int
    pages: int
    empty_takes: int
    lane_races: int
    seconds: float

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds

    @property
    def wasted(self) -> int:
        return self.empty_takes + self.lane_races

    @property
    def wasted_share(self) -> float:
        takes = self.jobs + self.wasted
        return self.wasted / takes if takes else 0.0


def fresh_jobs_table(url: str, schema: str, *, jobs: int, lanes: int) -> None:
    """A new schema holding ``jobs`` due jobs spread round-robin over ``lanes`` lanes, newest window first."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        create_schema(conn, schema)
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.jobs (queue, owner, lane, type, mode, window_start, window_end, dedup_key, next_run_at) "
                "SELECT %s, 'owner-' || (i %% %s), 'lane-' || (i %% %s), 'work', 'initial', "
                "       timestamptz '2026-01-01' - i * interval '1 minute', "
                "       timestamptz '2026-01-01' - (i - 1) * interval '1 minute', "
                "       'initial:' || i, now() - interval '1 minute' "
                "FROM generate_series(1, %s) AS i"
            ).format(sql.Identifier(schema)),
            [QUEUE, lanes, lanes, jobs],
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(schema)))


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def noop_handler(pages: int):
    """A handler that stores nothing and finishes after ``pages`` pages."""

    def handler(job: Job) -> Page:
        done = int(job.cursor or 0) + 1
        return Page(None if done >= pages else str(done), 1)

    return handler


def session_settings(synchronous_commit: str) -> dict[str, str]:
    """The engine's worker session settings, with ``synchronous_commit`` as given (the engine ships ``off``)."""
    return {**WORKER_SETTINGS, "synchronous_commit": synchronous_commit}


@dataclass(frozen=True)
class Load:
    """What a run asks of either side alike: its workers, each job's pages, how long, and its commit setting."""

    workers: int
    pages: int
    seconds: float
    synchronous_commit: str = WORKER_SETTINGS["synchronous_commit"]


def run_engine(url: str, schema: str, load: Load) -> Run:
    """The engine's own worker loop (a WorkerPool) for ``load.seconds``; then it stops gracefully."""
    declaration = SyncLane(
        queues=[
            Queue(
                QUEUE,
                owners=lambda q: [],
                types=[SnapshotType("work", noop_handler(load.pages), every=timedelta(days=1))],
            )
        ],
        schema=schema,
        create_schema=False,
        synchronous_commit=load.synchronous_commit == "on",  # each slot's session takes its settings from here
    )
    pool = WorkerPool(declaration, declaration.database(url), QUEUE, slots=load.workers, poll_interval=POLL)
    timer = threading.Timer(load.seconds, pool.shutdown)
    started = time.perf_counter()
    timer.start()
    summary = pool.run()
    elapsed = time.perf_counter() - started
    pool.close()
    completed = summary.outcomes.get("completed", 0)
    return Run(completed, summary.pages, summary.empty_takes, summary.lane_races, elapsed)


def run_baseline(url: str, schema: str, load: Load) -> Run:
    """The same statements from a minimal psycopg loop per connection: the raw-SQL limit for this design."""
    advance, save = statement("finish_and_take", schema), statement("save_page", schema)
    stop = threading.Event()
    idle = threading.Condition()  # idle loops sleep here, as the engine's slots do, until a lane is left
    totals = {"jobs": 0, "pages": 0, "empty": 0, "races": 0}
    lock = threading.Lock()
    lease = timedelta(minutes=5)
    nothing = {"finished": None, "status": None, "processed_count": None, "error": None, "delay": None}

    def loop(number: int) -> None:
        worker = f"baseline-{number}"
        base = {"queue": QUEUE, "worker": worker, "lease": lease, "now": None, "channel": channel(schema)}
        base["payload"] = payload(QUEUE)
        base["landed"] = None  # the job's land counts: this loop lands no rows
        degraded_after, failing_after = OwnerStretch().health_after  # the owner's health, as a queue's default
        base.update(degraded_after=degraded_after, failing_after=failing_after, owner_failed=False)
        base.update({health.value: health.value for health in OwnerHealth})
        jobs = done_pages = empty = races = 0
        job_id = lane = None
        with psycopg.connect(
            url, autocommit=True, cursor_factory=psycopg.RawCursor, prepare_threshold=0, row_factory=dict_row
        ) as conn:
            for name, value in session_settings(load.synchronous_commit).items():  # as the engine's worker sessions
                conn.execute(sql.SQL("SET {} TO {}").format(sql.Identifier(name), sql.Literal(value)))
            while True:
                if job_id is None and stop.is_set():
                    break
                if job_id is None:
                    params = {**base, **nothing, "take": True}
                else:  # as the engine does: finish this job and take the next in one statement
                    for page in range(1, load.pages):
                        conn.execute(
                            save.text,
                            save.arguments(
                                {
                                    "id": job_id,
                                    "worker": worker,
                                    "cursor": str(page),
                                    "processed_count": page,
                                    "landed": None,
                                    "lease": lease,
                                    "now": None,
                                }
                            ),
                        )
                    params = {
                        **base,
                        "finished": job_id,
                        "status": "completed",
                        "processed_count": load.pages,
                        "error": None,
                        "delay": timedelta(0),
                        "take": not stop.is_set(),
                    }
                try:
                    row = conn.execute(advance.text, advance.arguments(params)).fetchone()
                except psycopg.errors.DeadlockDetected:
                    continue  # rolled back whole, as in the engine's session: send it again
                except psycopg.errors.UniqueViolation:
                    races += 1
                    if job_id is not None:
                        conn.execute(advance.text, advance.arguments({**params, "take": False}))
                        jobs, done_pages, job_id = jobs + 1, done_pages + load.pages, None
                    continue
                if job_id is not None:
                    jobs, done_pages = jobs + 1, done_pages + load.pages
                left = lane
                job_id, lane = row["id"], row["lane"]  # the taken job's (None: nothing taken)
                if lane != left and left is not None:
                    with idle:
                        idle.notify()
                if job_id is None and params["take"]:
                    empty += 1
                    with idle:
                        if not stop.is_set():
                            idle.wait(POLL.total_seconds())
        with lock:
            totals["jobs"] += jobs
            totals["pages"] += done_pages
            totals["empty"] += empty
            totals["races"] += races

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(load.workers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(load.seconds)
    stop.set()
    with idle:
        idle.notify_all()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return Run(totals["jobs"], totals["pages"], totals["empty"], totals["races"], elapsed)


def peer_available() -> bool:
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        return False
    return True


def run_procrastinate(
    url: str,
    *,
    jobs: int,
    lanes: int,
    workers: int,
    seconds: float,
    synchronous_commit: str = WORKER_SETTINGS["synchronous_commit"],
) -> Run:
    """procrastinate with each job's ``lock`` set to its lane, ``workers`` concurrent jobs, for ``seconds``.

    Prepared as the engine's table is: the jobs inserted in one statement, then ``VACUUM ANALYZE``, before
    the clock starts; every connection with the same ``synchronous_commit`` as the engine's run beside it.
    """
    import procrastinate

    database = "synclane_bench_procrastinate"
    admin_url = url
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    peer_url = psycopg.conninfo.make_conninfo(
        url, dbname=database, options=f"-c synchronous_commit={synchronous_commit}"
    )
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=peer_url, max_size=workers + 4))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    async def create_schema() -> None:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def work() -> int:
        async with app.open_async():
            worker = asyncio.create_task(app.run_worker_async(concurrency=workers, wait=True))
            await asyncio.sleep(seconds)
            worker.cancel()
            try:
                await worker
            except asyncio.CancelledError:
                pass
            async with app.connector.pool.connection() as conn:
                cur = await conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
                (done,) = await cur.fetchone()
            return done

    asyncio.run(create_schema())
    with psycopg.connect(peer_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, lock) "
            "SELECT 'default', 'noop', 'lane-' || (i %% %s) FROM generate_series(1, %s) AS i",
            [lanes, jobs],
        )
        conn.execute("VACUUM ANALYZE procrastinate_jobs")
    done = asyncio.run(work())
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
    return Run(done, done, 0, 0, seconds)


def schema_name(label: str) -> str:
    return f"synclane_bench_{label}_{os.getpid()}"
