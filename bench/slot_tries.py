"""Failed slot tries and start latency in a real ``airflow standalone``, with work arriving in bursts.

Airflow fails a worker try that defers and is resumed moments later (the scheduler processes the deferring
try's exit after the resumed try was queued: "finished with state success, but the task instance's state
attribute is queued"). Slots linger in their process before they defer, and a deferred slot's trigger
settles before it fires (see docs/operating.md). This runs the example DAGs in ``airflow standalone``
(LocalExecutor, metadata in PostgreSQL) on a queue of three slots and eight one-owner lanes, and for
--minutes enqueues jobs in bursts drawn from --seed: 1 to 6 jobs, 1 to 8 s apart, then a gap of 5 to 30 s,
30 to 90 s or 90 s to 4 min (a third each); half of the jobs are due at once, half 3 s to a minute after
they are enqueued. A job is two pages of 0.3 s. Then it reports

* the failed tries of ``synclane_work``'s task instances, from Airflow's REST API (each try's state), and
  the scheduler's "finished with state …, but the task instance's state attribute is …" lines for them;
  both split at the first burst, since at start-up every task's first try can fail, handed out before the
  API server answered (a start-up race, nothing to do with deferrals);
* the latency a user sees: from the instant a job is due to the start of its first page (written by the
  handler, by the database's clock), p50, p95 and max, over the jobs the bench enqueued.

``--mode before`` sets linger and settle to 0 (defer as soon as nothing is due, resume as soon as anything
is); ``--mode after`` keeps the defaults. The two can run at once on different ``--port`` (each also takes
the next two ports for Airflow's log servers) and different databases:

    nice .venv/bin/python bench/slot_tries.py --mode after --port 28080 --minutes 30
    nice .venv/bin/python bench/slot_tries.py --mode before --port 28180 --minutes 30

Run it from a checkout that nothing changes meanwhile (``git worktree add --detach``, with ``PYTHONPATH``
set to it): every task process imports the DAGs and the provider anew, and a branch rebased under a
running Airflow fails its tasks.

This module is also the declaration the Airflow it starts runs (``bench.slot_tries:synclane``, through
``PYTHONPATH``): the queue and the handler below, configured by ``SLOT_TRIES_SCHEMA`` and
``SLOT_TRIES_DATABASE_URL``.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import psycopg
from psycopg import sql

from synclane_provider.core import Job, Owner, Page, Queue, SnapshotType, SyncLane

QUEUE = "bursts"
OWNERS = [f"shop{i}" for i in range(8)]
PAGE_SECONDS = 0.3
SCHEMA = os.environ.get("SLOT_TRIES_SCHEMA", "slot_tries")


def _record_start(job: Job) -> None:
    """The first page of a job's first attempt: when it started and when the job was due."""
    url = os.environ["SLOT_TRIES_DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.page_starts (job_id, dedup_key, due_at, started_at)"
                " VALUES (%s, %s, %s, clock_timestamp()) ON CONFLICT DO NOTHING"
            ).format(sql.Identifier(SCHEMA)),
            [job.id, job.dedup_key, job.next_run_at],
        )


def pull(job: Job) -> Page:
    if job.cursor is None:
        _record_start(job)
    time.sleep(PAGE_SECONDS)
    return Page(None if job.cursor else "second", 10)


def shops(queue: str) -> list[Owner]:
    return [Owner(name) for name in OWNERS]


synclane = SyncLane(
    queues=[Queue(QUEUE, owners=shops, concurrency=3, types=[SnapshotType("pull", pull, every=timedelta(days=365))])],
    schema=SCHEMA,
    poll_interval=timedelta(seconds=5),
)


def main() -> None:  # noqa: C901, PLR0915 - one run, step by step
    import argparse
    import json
    import random
    import re
    import statistics
    import sys
    import tempfile
    import urllib.parse
    import uuid
    from datetime import datetime, timezone
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from synclane_demo.local import airflow_environment, airflow_service, wait_for_airflow
    from synclane_provider.core import Database, Operations
    from tests.support.real_airflow import AirflowApi, clean_environment
    from tools.postgres import find_url

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["before", "after"], required=True)
    parser.add_argument("--port", type=int, default=28080, help="API server; the next two: log servers")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--keep", action="store_true", help="keep the databases and the Airflow home")
    args = parser.parse_args()

    server = find_url("SYNCLANE_BENCH_DATABASE_URL", root / ".pgdata" / "bench")
    suffix = uuid.uuid4().hex[:6]
    metadata_db, schema = f"slots_bench_airflow_{args.mode}_{suffix}", f"slots_bench_{args.mode}_{suffix}"
    data_url = server
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(metadata_db)))
    metadata_url = psycopg.conninfo.make_conninfo(server, dbname=metadata_db)
    home = Path(tempfile.mkdtemp(prefix=f"slots-bench-{args.mode}-"))
    linger, settle = ("0", "0") if args.mode == "before" else ("120", "10")
    base = {
        **clean_environment(),
        "PYTHONPATH": str(root),
        "SLOT_TRIES_SCHEMA": schema,
        "SLOT_TRIES_DATABASE_URL": data_url,
        "SYNCLANE_LINGER": linger,
        "SYNCLANE_SETTLE": settle,
        "SYNCLANE_HEALTH_EVERY": "300",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(args.port + 1),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(args.port + 2),
    }
    env = airflow_environment(
        base, home=home / "airflow", data_url=data_url, metadata_url=metadata_url, port=args.port, shop_url=None
    )
    env.update(SYNCLANE_DECLARATION="bench.slot_tries:synclane", SYNCLANE_QUEUE=QUEUE, SLOT_TRIES_SCHEMA=schema)
    os.environ["SLOT_TRIES_SCHEMA"] = schema
    declaration = SyncLane(queues=synclane.queues, schema=schema, poll_interval=synclane.poll_interval)

    rng = random.Random(args.seed)
    plan: list[tuple[float, float]] = []  # (seconds after the start to enqueue, seconds after that it is due)
    at = 0.0
    while at < args.minutes * 60:
        for _ in range(rng.randint(1, 6)):  # a burst
            plan.append((at, 0.0 if rng.random() < 0.5 else rng.uniform(3, 60)))
            at += rng.uniform(1, 8)
        at += rng.choice([rng.uniform(5, 30), rng.uniform(30, 90), rng.uniform(90, 240)])

    def count(where: str) -> int:
        with psycopg.connect(data_url, autocommit=True) as conn:
            query = sql.SQL("SELECT count(*) FROM {}.jobs WHERE " + where).format(sql.Identifier(schema))
            return conn.execute(query).fetchone()[0]

    def report(api: AirflowApi, home: Path, started_at: datetime, bursts_at: datetime, loads: list[float]) -> None:
        """Tries and scheduler lines are split at ``bursts_at``: before it, every task's first try can fail at
        start-up (handed out before the API server answered: "finished with state failed"), which has nothing
        to do with deferrals."""
        with psycopg.connect(data_url, autocommit=True) as conn:
            latencies = [
                r[0]
                for r in conn.execute(
                    sql.SQL(
                        "SELECT extract(epoch FROM started_at - due_at)::float FROM {}.page_starts"
                        " WHERE dedup_key LIKE 'manual:burst:%'"
                    ).format(sql.Identifier(schema))
                )
            ]
            unfinished = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {}.jobs WHERE dedup_key LIKE 'manual:burst:%' AND status <> 'completed'"
                ).format(sql.Identifier(schema))
            ).fetchone()[0]
        tries: dict[str, int] = {}
        failed_at_start = failed = 0
        for run in api.runs("synclane_work"):
            run_id = urllib.parse.quote(run["dag_run_id"], safe="")
            for ti in api.task_instances("synclane_work", run["dag_run_id"]):
                if ti["task_id"] != "work":
                    continue
                listed = api.get(
                    f"/api/v2/dags/synclane_work/dagRuns/{run_id}/taskInstances/work/{ti['map_index']}/tries"
                )
                for attempt in listed["task_instances"]:
                    tries[attempt["state"] or "none"] = tries.get(attempt["state"] or "none", 0) + 1
                    if attempt["state"] in ("failed", "up_for_retry"):
                        ended = attempt.get("end_date") or attempt.get("queued_when") or attempt.get("start_date")
                        early = ended is not None and datetime.fromisoformat(ended.replace("Z", "+00:00")) < bursts_at
                        failed_at_start += early
                        failed += not early
        log = (home / "airflow.log").read_text(errors="replace")
        lines = re.findall(
            r"(\d{4}-\d\d-\d\dT[\d:.]+)Z \[error\s*\] Executor .*? reported that the task instance "
            r"<TaskInstance: synclane_work\.work .*?> finished with state (\w+), but the task instance's state "
            r"attribute is (\w+)",
            log,
        )
        stale: dict[str, int] = {}
        for at, reported, actual in lines:
            when = "at_start" if datetime.fromisoformat(at + "+00:00") < bursts_at else "during_bursts"
            key = f"{when}: {reported} but {actual}"
            stale[key] = stale.get(key, 0) + 1
        latencies.sort()
        q = statistics.quantiles(latencies, n=20) if len(latencies) >= 2 else [float("nan")] * 19
        result = {
            "mode": args.mode,
            "date": started_at.isoformat(timespec="seconds"),
            "minutes": args.minutes,
            "jobs": len(plan),
            "measured": len(latencies),
            "unfinished": unfinished,
            "tries_by_state": tries,
            "failed_tries": failed,
            "failed_tries_at_start": failed_at_start,
            "scheduler_lines": stale,
            "latency_p50_s": round(statistics.median(latencies), 3) if latencies else None,
            "latency_p95_s": round(q[18], 3),
            "latency_max_s": round(latencies[-1], 3) if latencies else None,
            "loadavg_1min_mean": round(statistics.fmean(loads), 2) if loads else None,
            "cpus": os.cpu_count(),
        }
        print(json.dumps(result), flush=True)

    with Operations(declaration, Database(data_url, schema=schema)) as ops:
        ops.plan(QUEUE)  # makes the schema; the planner's first jobs (one per owner) run before the measured ones
        with psycopg.connect(data_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {}.page_starts (job_id bigint PRIMARY KEY, dedup_key text, due_at timestamptz,"
                    " started_at timestamptz)"
                ).format(sql.Identifier(schema))
            )
        started_at = datetime.now(timezone.utc)
        print(f"{args.mode}: {len(plan)} jobs over {args.minutes:.0f} min; Airflow home {home}", flush=True)
        airflow = airflow_service(env, home).start()
        try:
            wait_for_airflow(airflow, args.port, timeout=600)
            api = AirflowApi(f"http://127.0.0.1:{args.port}", home / "airflow")
            deadline = time.monotonic() + 600
            while count("status <> 'completed'") and time.monotonic() < deadline:
                time.sleep(2)
            bursts_at = datetime.now(timezone.utc)
            print(f"{args.mode}: the first plan ran; bursts start {bursts_at:%H:%M:%S}", flush=True)
            t0 = time.monotonic()
            loads: list[float] = []
            for i, (offset, ahead) in enumerate(plan):
                time.sleep(max(0.0, t0 + offset - time.monotonic()))
                run_at = datetime.now(timezone.utc) + timedelta(seconds=ahead) if ahead else None
                ops.enqueue(QUEUE, rng.choice(OWNERS), "pull", key=f"burst:{i}", run_at=run_at)
                loads.append(os.getloadavg()[0])
            deadline = time.monotonic() + 600
            while count("dedup_key LIKE 'manual:burst:%' AND status <> 'completed'") and time.monotonic() < deadline:
                time.sleep(2)
            report(api, home, started_at, bursts_at, loads)
        finally:
            airflow.stop()
            if not args.keep:
                with psycopg.connect(server, autocommit=True) as conn:
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(metadata_db)))
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
