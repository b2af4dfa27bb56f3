"""The demo in a real Airflow: ``airflow standalone`` (scheduler, DAG processor, triggerer, API server),
the shop as its own process, the demo's declaration at a compressed scale, and checks through SQL, the
shop's request log and Airflow's REST API.

One scenario runs once for the module (it takes minutes); each test asserts one promise about it:

1. start the shop and Airflow; the planning DAG plans, the worker DAG's mapped slots drain;
2. mid-run, with a job running mid-slice, stop Airflow (SIGTERM to its process group) and start it again;
   then twice more while jobs run: once with Ctrl-C (SIGINT), once while the restarted scheduler is still
   handing out the slots' retries; within two minutes of the last start every slot works again;
3. wait until everything settled: all completed except globex's broken slice, abandoned at cursor 50, and
   umbrella's jobs, waiting: the shop revoked its OAuth grant after its first two pages, its next token refresh
   was refused (``invalid_grant``) and the engine paused it as needing reconnecting;
4. heal the shop, requeue through a manual run of ``synclane_requeue``; connect umbrella at the shop again and
   set its new tokens through the SyncLane page's API, as the Owners view's credentials form does, which
   resumes it; wait until every job completed.

The shop's access tokens live a minute and the queue refreshes them two minutes ahead: every page's
``job.credentials()`` refreshes its owner's token, with refresh tokens that rotate (a refresh token sent twice
would revoke the grant), from three worker processes at once.

Meanwhile ``synclane_health`` runs every minute (it fails once the slice is abandoned, and once when umbrella
is paused) and Airflow sends its metrics to a StatsD socket of the test's own.

Rows are sampled several times a second throughout, so states that come and go (a failed job, two jobs
of a lane) are seen, not inferred.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from cryptography.fernet import Fernet
from psycopg import sql
from psycopg.rows import dict_row

from synclane_demo.connect import set_initial_credentials
from synclane_demo.local import PROJECT, airflow_environment, airflow_service, wait_for_airflow
from synclane_demo.processes import Service, wait_for_http
from synclane_demo.shop.catalogue import Catalogue
from synclane_demo.store import Store
from synclane_provider.cli.commands import NARROW_JOB
from synclane_provider.core import LandCounts
from tests.support.database import drop_schemas
from tests.support.real_airflow import AirflowApi, Sampler, clean_environment, free_port, wait_until
from tests.support.statsd import Listener

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(2400)]

QUEUE = "shops"
REVOKED = "umbrella"
"""The account whose grant the shop revokes after its first two pages (its products, at cursor 100)."""
KEY = Fernet.generate_key().decode()
"""The key owners' credentials are encrypted with (``[synclane] credentials_key``)."""
SCALE = {
    # 90 days in 30-day slices: three slices per account, the second holding globex's broken page
    "SYNCLANE_DEMO_HORIZON": "90d",
    "SYNCLANE_DEMO_SLICE": "30d",
    "SYNCLANE_DEMO_CONCURRENCY": "3",
    "SYNCLANE_DEMO_MAX_ATTEMPTS": "5",
    "SYNCLANE_DEMO_LEASE": "20s",
    "SYNCLANE_DEMO_RETRY_DELAY": "2s",
    "SYNCLANE_DEMO_RETRY_MAX_DELAY": "4s",
    "SYNCLANE_DEMO_THROTTLE_DELAY": "2s",
    "SYNCLANE_DEMO_THROTTLE_MAX_DELAY": "4s",
    "SYNCLANE_DEMO_POLL_INTERVAL": "2s",
    "SYNCLANE_IDLE_TIMEOUT": "20",
    "SYNCLANE_DEMO_CREDENTIALS_SKEW": "2m",
}
SHOP = [
    "--latency",
    "0.4",
    "--rate-429",
    "0.05",
    "--rate-503",
    "0.05",
    "--retry-after",
    "1",
    "--seed",
    "5",
    "--heal-after",
    "never",
    "--history-days",
    "120",
    "--orders-per-day",
    "8-12",
    "--revoke-account",
    REVOKED,
    "--revoke-after-pages",
    "2",
    "--token-lifetime",
    "60",
    "--limit-changes",  # acme's limit stays as the declaration's rate says: this run checks other things
    "none",
]


@dataclass
class Scenario:
    url: str
    schema: str
    data_schema: str
    shop_url: str
    broken_at: datetime
    api: AirflowApi | None = None
    running_before_stop: list[dict] = field(default_factory=list)
    after_stop: dict[int, dict] = field(default_factory=dict)
    restart_seq: int = 0
    restarts: list[tuple[datetime, datetime]] = field(default_factory=list)  # (stopped, started again), UTC
    slots_back_after: float | None = None
    slot_states: list[dict] = field(default_factory=list)
    settled: list[dict] = field(default_factory=list)
    requeue_seq: int = 0
    requeue_run: dict = field(default_factory=dict)
    final: list[dict] = field(default_factory=list)
    samples: list[list[dict]] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    """The shop's data requests (``tokens``: its token endpoint's answers)."""
    tokens: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    logs: Path | None = None
    health_failed: dict = field(default_factory=dict)
    paused_alert: dict = field(default_factory=dict)
    paused_on_page: dict = field(default_factory=dict)
    resume_seq: int = 0
    resumed: dict = field(default_factory=dict)
    metrics: dict[str, list[tuple[str, str, float]]] = field(default_factory=dict)

    def rows(self) -> list[dict]:
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            query = sql.SQL("SELECT * FROM {}.jobs ORDER BY id").format(sql.Identifier(self.schema))
            try:
                return conn.execute(query).fetchall()
            except psycopg.errors.UndefinedTable:
                return []

    def paused(self, owner: str) -> bool:
        """Whether the owners table has ``owner`` paused."""
        with psycopg.connect(self.url) as conn:
            query = sql.SQL("SELECT paused_at IS NOT NULL FROM {}.owners WHERE owner = %s").format(
                sql.Identifier(self.schema)
            )
            try:
                found = conn.execute(query, [owner]).fetchone()
            except psycopg.errors.UndefinedTable:
                return False
        return bool(found and found[0])

    def shop(self, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body or {}).encode() if body is not None else None
        request = urllib.request.Request(self.shop_url + path, data=data, method="POST" if data is not None else "GET")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def last_seq(self) -> int:
        items = self.shop("/control/requests")["items"]
        return items[-1]["seq"] if items else 0

    def is_broken_slice(self, row: dict) -> bool:
        return (row["owner"], row["type"], row["mode"]) == ("globex", "orders", "initial") and (
            row["window_start"] <= self.broken_at < row["window_end"]
        )


def settled(rows: list[dict], scenario: Scenario) -> bool:
    """Nothing will run again without help: all completed except the broken slice, which is abandoned, and the
    revoked account's jobs, which wait while it is paused (none running; one that ran before its pause, a
    one-page window, may have completed)."""
    if not rows or not scenario.paused(REVOKED):
        return False

    def done(row: dict) -> bool:
        if scenario.is_broken_slice(row):
            return row["status"] == "abandoned"
        if row["owner"] == REVOKED:
            return row["status"] in ("pending", "failed", "completed")
        return row["status"] == "completed"

    return all(done(r) for r in rows)


def paused_alert(run: Scenario) -> dict | None:
    """The first synclane_health run whose log names the revoked account's pause, once it has ended."""
    return next(
        (
            r
            for r in run.api.runs("synclane_health")
            if r["state"] in ("success", "failed")
            and f"paused: owner {REVOKED}" in health_log(run.logs, r["dag_run_id"])
        ),
        None,
    )


def every_job_completed(rows: list[dict]) -> list[dict] | None:
    """The rows when every job has completed, else None."""
    return rows if rows and all(r["status"] == "completed" for r in rows) else None


@pytest.fixture(scope="module")
def scenario(database_url: str, tmp_path_factory, airflow_metadata) -> Scenario:
    started = time.monotonic()
    suffix = uuid.uuid4().hex[:8]
    home = tmp_path_factory.mktemp("airflow-e2e")
    metadata_db, jobs_schema, data_schema = (
        f"synclane_e2e_airflow_{suffix}",
        f"synclane_e2e_{suffix}",
        f"synclane_e2e_data_{suffix}",
    )
    airflow_metadata(metadata_db)  # migrated already: standalone finds nothing to migrate
    metadata_url = psycopg.conninfo.make_conninfo(database_url, dbname=metadata_db)

    shop_port, api_port = free_port(), free_port()
    base = clean_environment()
    shop = Service(
        "shop",
        [sys.executable, "-m", "synclane_demo.shop", "--port", str(shop_port), *SHOP],
        env=base,
        log_path=home / "shop.log",
        cwd=PROJECT,
    ).start()
    services = [shop]
    statsd = Listener()
    metrics = {  # plain StatsD, as most users have it: no tags, the values in the names
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
    }
    env = airflow_environment(
        {**base, **SCALE, **metrics, "SYNCLANE_DEMO_SCHEMA": jobs_schema, "SYNCLANE_DEMO_DATA_SCHEMA": data_schema},
        home=home / "airflow",
        data_url=database_url,
        metadata_url=metadata_url,
        port=api_port,
        shop_url=f"http://127.0.0.1:{shop_port}",
        parallelism=6,
        credentials_key=KEY,
    )
    sampler = Sampler(database_url, jobs_schema)
    try:
        wait_for_http(f"http://127.0.0.1:{shop_port}/health", timeout=30, service=shop)
        status = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{shop_port}/control/status").read())
        run = Scenario(
            database_url,
            jobs_schema,
            data_schema,
            f"http://127.0.0.1:{shop_port}",
            datetime.fromisoformat(status["broken_at"]),
        )
        run.samples = sampler.samples  # filled while the scenario runs
        Store(database_url, data_schema).prepare()
        set_initial_credentials(env)  # as the launcher does: each account connected at the shop
        sampler.start()

        # 1. Airflow starts; planning runs; the worker slots drain.
        airflow = airflow_service(env, home).start()
        services.append(airflow)
        wait_for_airflow(airflow, api_port, timeout=300)
        run.timings["airflow healthy"] = time.monotonic() - started
        explain = lambda: airflow.tail(60)  # noqa: E731 - shown when a wait times out

        # 2. Mid-run, with jobs running and some done: stop Airflow, then start it again.
        def mid_run():
            # A job mid-slice with pages to go: it cannot finish in the moment Airflow takes to stop it.
            rows = run.rows()
            running = [
                r
                for r in rows
                if r["status"] == "running" and r["cursor"] is not None and shop_count(r) - int(r["cursor"]) >= 150
            ]
            done = [r for r in rows if r["status"] == "completed"]
            return running if running and len(done) >= 3 else None

        wait_until(mid_run, 240, "jobs running mid-page with some completed", every=0.2, explain=explain)
        run.timings["first jobs done"] = time.monotonic() - started
        run.running_before_stop = [r for r in run.rows() if r["status"] == "running"]
        airflow.stop(graceful=90)
        services.remove(airflow)
        run.timings["stopped"] = time.monotonic() - started
        run.after_stop = {r["id"]: r for r in run.rows()}
        run.restart_seq = run.last_seq()
        stopped = datetime.now(timezone.utc)
        airflow = airflow_service(env, home).start()
        services.append(airflow)
        wait_for_airflow(airflow, api_port, timeout=300)
        run.restarts.append((stopped, datetime.now(timezone.utc)))

        # Twice more while jobs run: Ctrl-C, then a restart right after the last one came up. Ctrl-C interrupts
        # the tasks within seconds; the scheduler may then wait on its executor's idle worker processes for
        # good ("Signal again if you don't want to wait"), and the DAG processor with it: what is left of Airflow
        # 30 s after the Ctrl-C is killed (a SIGTERM stop takes seconds).
        for stop_signal, after_start, graceful in ((signal.SIGINT, 20, 30), (signal.SIGTERM, 0, 90)):
            time.sleep(after_start)
            wait_until(
                lambda: any(r["status"] == "running" for r in run.rows()),
                120,
                "a job running",
                every=0.2,
                explain=lambda: airflow.tail(40),
            )
            airflow.stop(graceful=graceful, signal_first=stop_signal)
            services.remove(airflow)
            stopped = datetime.now(timezone.utc)
            airflow = airflow_service(env, home).start()
            services.append(airflow)
            wait_for_airflow(airflow, api_port, timeout=300)
            run.restarts.append((stopped, datetime.now(timezone.utc)))
        restarted = time.monotonic()
        run.api = AirflowApi(f"http://127.0.0.1:{api_port}", home / "airflow")
        explain = lambda: airflow.tail(60)  # noqa: E731
        run.slot_states = wait_until(
            lambda: all_slots_working(run.api),
            180,
            "every slot of the worker DAG working again",
            every=1,
            explain=explain,
        )
        run.slots_back_after = time.monotonic() - restarted

        # 3. Everything settles: completed, except the broken slice, abandoned.
        wait_until(
            lambda: settled(run.rows(), run),
            420,
            "every job completed but the broken slice abandoned",
            explain=lambda: (
                f"{[(r['id'], r['owner'], r['status'], r['cursor'], r['error']) for r in run.rows() if r['status'] != 'completed']}\n{airflow.tail(40)}"
            ),
        )
        run.settled = run.rows()
        run.timings["settled"] = time.monotonic() - started
        # The health check's next run fails on the abandoned slice (earlier runs may have failed on a lag
        # or a worker stopped by the restart: those are findings too, but not this one).
        run.logs = home / "airflow" / "logs"
        run.health_failed = wait_until(
            lambda: next(
                (
                    r
                    for r in run.api.runs("synclane_health")
                    if r["state"] == "failed" and "abandoned: owner globex" in health_log(run.logs, r["dag_run_id"])
                ),
                None,
            ),
            180,
            "a synclane_health run to fail on the abandoned slice",
            explain=lambda: (
                "\n".join(
                    f"{r['dag_run_id']} {r['state']} [{r['data_interval_start']}, {r['data_interval_end']}): "
                    + " | ".join(line for line in health_log(run.logs, r["dag_run_id"]).splitlines() if "- " in line)[
                        -400:
                    ]
                    for r in run.api.runs("synclane_health")
                )
                + f"\nbroken slice: {[(r['id'], r['status'], r['next_run_at']) for r in run.rows() if run.is_broken_slice(r)]}"
            ),
        )
        run.timings["health check failed"] = time.monotonic() - started
        run.paused_alert = wait_until(
            lambda: paused_alert(run), 180, f"a synclane_health run to name {REVOKED}'s pause", explain=explain
        )
        [run.paused_on_page] = run.api.get(f"/synclane/api/queues/{QUEUE}/owners", owner=REVOKED)["items"]

        # 4. The shop heals; a manual run of the requeue DAG; the slice completes from cursor 50. The revoked
        # account connects again and its new tokens are set as the Owners view's form sets them, which resumes it.
        run.shop("/control/heal", {})
        granted = run.shop("/control/connect", {"account": REVOKED})
        run.requeue_seq = run.resume_seq = run.last_seq()
        run.resumed = run.api.post(
            f"/synclane/api/queues/{QUEUE}/credentials",
            {
                "owner": REVOKED,
                "kind": "oauth",
                **{k: granted[k] for k in ("access_token", "refresh_token", "expires_in")},
            },
        )
        created = run.api.post(
            "/api/v2/dags/synclane_requeue/dagRuns", {"logical_date": None, "conf": {"owner": "globex"}}
        )
        run_id = created["dag_run_id"]
        run.requeue_run = wait_until(
            lambda: (lambda r: r if r["state"] in ("success", "failed") else None)(
                run.api.get(f"/api/v2/dags/synclane_requeue/dagRuns/{urllib.parse.quote(run_id, safe='')}")
            ),
            180,
            "the requeue run to finish",
            explain=explain,
        )
        # The rows as they were the moment everything completed: the planner goes on adding recurring jobs
        # every few minutes, so a later read may hold one not yet run.
        run.final = wait_until(
            lambda: every_job_completed(run.rows()),
            180,
            f"the requeued slice and {REVOKED}'s jobs to complete",
            explain=explain,
        )
        # a worker run that ended on its own (idle timeout) after the work was done
        wait_until(
            lambda: any(r["state"] == "success" for r in run.api.runs("synclane_work")),
            180,
            "a worker DAG run to succeed",
            explain=explain,
        )
        # a health check whose interval reaches past the last restart (at most a minute after it, usually long ago)
        wait_until(
            lambda: any(end >= run.restarts[-1][1] for _, end in checked_ranges(run.logs)),
            180,
            "a health check of an interval after the last restart",
            explain=lambda: f"{checked_ranges(run.logs)}; restarts {run.restarts}",
        )
        run.timings["done"] = time.monotonic() - started
        answered = run.shop("/control/requests")["items"]
        run.requests = [e for e in answered if e["resource"] != "token"]
        run.tokens = [e for e in answered if e["resource"] == "token"]
        run.metrics = statsd.received(prefix="airflow.synclane.")
        sampler.stop()  # the promises are checked on its samples: a sampler that died fails here
        yield run
    finally:
        for service in reversed(services):
            service.stop(graceful=60)
        statsd.close()
        try:
            sampler.stop()
        finally:
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(metadata_db)))
                for schema in (jobs_schema, data_schema):
                    drop_schemas(conn, schema)
        if "run" in locals():
            print(report(run, home / "airflow" / "logs"))


def all_slots_working(api: AirflowApi) -> list[dict] | None:
    """The worker DAG's current run's slots when all of them are taking jobs or deferred waiting for one."""
    runs = [r for r in api.runs("synclane_work") if r["state"] == "running"]
    if not runs:
        return None
    slots = [ti for ti in api.task_instances("synclane_work", runs[0]["dag_run_id"]) if ti["task_id"] == "work"]
    return slots if len(slots) == 3 and all(ti["state"] in ("running", "deferred") for ti in slots) else None


def report(run: Scenario, logs: Path) -> str:
    """What the run ended with, for ``pytest -s`` and for failures: timings, the final rows, a worker's log."""
    lines = [
        f"\nend-to-end timings (s): { {k: round(v) for k, v in run.timings.items()} }",
        f"every slot working {run.slots_back_after} s after the third restart",
        "final rows:",
    ]
    for row in run.final or run.rows():
        values = {
            **row,
            "window_start": row["window_start"].date() if row["window_start"] else None,
            "landed": LandCounts(*(row[f"{kind.name}_count"] for kind in fields(LandCounts))).brief(),
        }
        lines.append(" | ".join(str(values[c]) if values[c] is not None else "" for c in NARROW_JOB))
    worker_logs = {path: operator_lines(path) for path in logs.glob("dag_id=synclane_work/**/attempt=*.log")}
    if worker_logs:
        busiest = max(worker_logs, key=lambda path: len(worker_logs[path]))
        lines.append(f"the busiest worker task's log ({busiest.relative_to(logs)}), the operator's lines:")
        lines.extend(worker_logs[busiest][:40])
    return "\n".join(lines)


def operator_lines(path: Path) -> list[str]:
    """The worker operator's lines of a task log (Airflow writes one JSON object a line), as time, level, text."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if "synclane" in str(entry.get("logger", "")).lower():
            found.append(
                f"{entry.get('timestamp', '')[11:19]} {entry.get('level', '').upper():<7} {entry.get('event')}"
            )
    return found


# -- the promises ----------------------------------------------------------------------------------------

SHOP_CATALOGUE = Catalogue(history_days=120, orders_per_day=(8, 12))  # as the shop started above


def shop_count(row: dict) -> int:
    """How many records the shop has for the job's window (deterministic; the windows end in the past)."""
    if row["type"] == "products":
        return len(SHOP_CATALOGUE.products(row["owner"]))
    return len(SHOP_CATALOGUE.orders(row["owner"], row["window_start"], row["window_end"], datetime.now(timezone.utc)))


def request_key(row: dict) -> tuple:
    since = row["window_start"].isoformat() if row["window_start"] is not None else None
    return (row["owner"], row["type"], since)


def entry_key(entry: dict) -> tuple:
    return (entry["account"], entry["resource"], entry.get("since"))


def test_planning_and_worker_runs_succeed_and_mapped_slots_are_named(scenario):
    api = scenario.api
    assert any(r["state"] == "success" for r in api.runs("synclane_plan"))
    succeeded = [r for r in api.runs("synclane_work") if r["state"] == "success"]
    assert succeeded
    slots = [ti for ti in api.task_instances("synclane_work", succeeded[0]["dag_run_id"]) if ti["task_id"] == "work"]
    assert sorted(ti["map_index"] for ti in slots) == [0, 1, 2]
    assert {ti["rendered_map_index"] for ti in slots} == {f"{QUEUE} slot {i}" for i in range(3)}
    assert all(ti["state"] == "success" for ti in slots)
    assert scenario.requeue_run["state"] == "success"


def test_no_two_jobs_of_one_lane_ever_ran_at_once(scenario):
    rows = scenario.final
    assert {r["owner"]: r["lane"] for r in rows} == {
        "acme-us": "acme",
        "acme-eu": "acme",
        "globex": "globex",
        "initech": "initech",
        REVOKED: REVOKED,
    }
    assert len(scenario.samples) > 100
    for sample in scenario.samples:
        lanes = [r["lane"] for r in sample if r["status"] == "running"]
        assert len(lanes) == len(set(lanes)), f"two running jobs in one lane: {lanes}"
    spans = defaultdict(list)
    for row in rows:
        spans[row["lane"]].append((row["started_at"], row["completed_at"], row["id"]))
    for lane, intervals in spans.items():
        intervals.sort()
        for (_, end, first), (start, _, second) in zip(intervals, intervals[1:]):
            assert end <= start, f"jobs {first} and {second} of lane {lane} overlap"
    assert (
        max(len({r["lane"] for r in s if r["status"] == "running"}) for s in scenario.samples) >= 2
    )  # lanes side by side


def test_each_owner_loaded_its_newest_slice_first(scenario):
    first_asked = {}
    for entry in scenario.requests:
        if entry["resource"] == "orders" and entry["cursor"] == 0:
            first_asked.setdefault(entry_key(entry), entry["seq"])
    for owner in ("acme-us", "acme-eu", "globex", "initech", REVOKED):
        slices = [r for r in scenario.final if r["owner"] == owner and r["type"] == "orders" and r["mode"] == "initial"]
        assert len(slices) == 3
        by_first_request = sorted(slices, key=lambda r: first_asked[request_key(r)])
        assert [r["window_end"] for r in by_first_request] == sorted((r["window_end"] for r in slices), reverse=True)


def test_failed_and_throttled_jobs_continued_from_their_cursor(scenario):
    failed_mid_job = {r["id"] for sample in scenario.samples for r in sample if r["status"] == "failed" and r["cursor"]}
    final = {r["id"]: r for r in scenario.final}
    assert any(final[i]["status"] == "completed" for i in failed_mid_job), "no job failed mid-way and then completed"
    for row in scenario.final:
        assert row["processed_count"] == shop_count(row), f"job {row['id']} counted pages twice (or missed some)"
    refusals = [e for e in scenario.requests if (e["status"] != 200 or e.get("fault")) and e["cursor"] > 0]
    assert refusals
    for refused in refusals:
        following = [e for e in scenario.requests if e["seq"] > refused["seq"] and entry_key(e) == entry_key(refused)]
        assert following and following[0]["cursor"] == refused["cursor"], (
            f"after {refused} the job did not ask again from its cursor"
        )


def test_the_broken_slice_ended_abandoned_at_cursor_50_while_its_lane_completed(scenario):
    [broken] = [r for r in scenario.settled if scenario.is_broken_slice(r)]
    assert (broken["status"], broken["cursor"], broken["processed_count"]) == ("abandoned", "50", 50)
    # Five attempts, then the last one: more only when a last attempt was throttled (a 429 from the shop). The
    # row says it stepped aside: a sixth attempt is only ever given to a deferred job, as its last. (Status
    # samples taken every few seconds may miss the failed and deferred spells on a busy machine; the row cannot.)
    assert broken["attempt_count"] >= 6
    # Its attempts met the unreadable page at cursor 50; the last may instead have met one of the shop's
    # random 503s, which come before the page is read (a 429 there would have kept it deferred), or have
    # been running when a restart killed its worker (the attempt is then written down as lost, at cursor 50).
    assert broken["error"].startswith(
        (
            "UnreadablePage: the shop returned a page",
            "ShopUnavailable: the shop answered 503",
            "WorkerLost: worker ",
        )
    ), broken["error"]
    assert "WorkerLost" not in broken["error"] or "at cursor '50'" in broken["error"]
    unreadable = [
        e for e in scenario.requests if entry_key(e) == request_key(broken) and e.get("fault") == "unreadable"
    ]
    assert unreadable and all(e["cursor"] == 50 for e in unreadable)
    assert all(
        r["status"] == "completed" for r in scenario.settled if r["lane"] == "globex" and r["id"] != broken["id"]
    )


def test_after_healing_a_requeue_completed_the_slice_from_cursor_50(scenario):
    [broken] = [r for r in scenario.final if scenario.is_broken_slice(r)]
    assert broken["status"] == "completed" and broken["processed_count"] == shop_count(broken) > 50
    asked = [
        e["cursor"]
        for e in scenario.requests
        if e["seq"] > scenario.requeue_seq and entry_key(e) == request_key(broken)
    ]
    assert asked[0] == 50 and 0 not in asked


def test_three_restarts_lost_no_worker_slot(scenario):
    """However often Airflow restarts, the queue is back to its full number of slots within minutes, unaided."""
    assert scenario.slots_back_after is not None and scenario.slots_back_after < 120
    failed = [
        (run["dag_run_id"], ti["map_index"], ti["try_number"])
        for run in scenario.api.runs("synclane_work")
        for ti in scenario.api.task_instances("synclane_work", run["dag_run_id"])
        if ti["task_id"] == "work" and ti["state"] == "failed"
    ]
    assert failed == [], "worker slots that failed for good"


def test_a_restart_left_no_job_running_and_each_resumed_from_its_saved_cursor(scenario):
    assert scenario.running_before_stop, "nothing was running when Airflow was stopped"
    assert [r["id"] for r in scenario.after_stop.values() if r["status"] == "running"] == []
    resumed = 0
    for before in scenario.running_before_stop:
        after = scenario.after_stop[before["id"]]
        if after["status"] == "completed":
            continue
        assert after["status"] in ("pending", "failed") and int(after["cursor"] or 0) >= int(before["cursor"] or 0)
        asked = [
            e["cursor"]
            for e in scenario.requests
            if e["seq"] > scenario.restart_seq and entry_key(e) == request_key(after)
        ]
        assert asked and asked[0] == int(after["cursor"] or 0), (
            f"job {after['id']} did not resume from cursor {after['cursor']}"
        )
        resumed += 1
    assert resumed >= 1


def log_text(path: Path) -> str:
    """Every string of a task log (Airflow writes one JSON object a line), one per line."""
    texts: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for line in path.read_text(errors="replace").splitlines():
        try:
            walk(json.loads(line))
        except ValueError:
            texts.append(line)
    return "\n".join(texts)


def health_log(logs: Path, run_id: str) -> str:
    return "\n".join(
        log_text(path) for path in logs.glob(f"dag_id=synclane_health/run_id={run_id}/task_id=check/attempt=*.log")
    )


def test_the_health_check_failed_naming_the_owner_the_abandoned_slice_and_its_error(scenario):
    [broken] = [r for r in scenario.settled if scenario.is_broken_slice(r)]
    run_id = scenario.health_failed["dag_run_id"]
    [instance] = scenario.api.task_instances("synclane_health", run_id)
    assert (instance["task_id"], instance["state"]) == ("check", "failed")
    text = health_log(scenario.logs, run_id)
    start, end = (broken[k].astimezone(timezone.utc) for k in ("window_start", "window_end"))
    window = f"[{start:%Y-%m-%d %H:%M} → {end:%Y-%m-%d %H:%M}]"
    assert (
        f"abandoned: owner globex, job globex/orders {window} #{broken['id']}, at cursor '50' after "
        f"{broken['attempt_count']} attempt(s): {broken['error']}"
    ) in text, text[-3000:]


CHECKED = re.compile(r"queue shops checked \(abandoned from (\S+) to (\S+)\)")


def checked_ranges(logs: Path) -> list[tuple[datetime, datetime]]:
    """The ranges of abandonments the health check's runs checked, as their logs say, in order."""
    return sorted(
        (datetime.fromisoformat(start), datetime.fromisoformat(end))
        for path in logs.glob("dag_id=synclane_health/run_id=*/task_id=check/attempt=*.log")
        for start, end in CHECKED.findall(log_text(path))
    )


def test_the_health_checks_left_no_instant_unchecked_across_the_restarts(scenario):
    """Airflow restarted three times: intervals it skipped and runs it killed are covered by the next check."""
    ranges = checked_ranges(scenario.logs)
    assert len(scenario.restarts) == 3
    first_stop, last_start = scenario.restarts[0][0], scenario.restarts[-1][1]
    assert ranges and ranges[0][0] <= first_stop, (ranges, scenario.restarts)  # the checks began before it
    assert max(end for _, end in ranges) >= last_start, (ranges, scenario.restarts)  # and went on after
    reached = ranges[0][1]
    for start, end in ranges[1:]:
        assert start <= reached, f"nothing checked abandonments in [{reached}, {start}): {ranges}"
        reached = max(reached, end)


def test_metrics_arrived_from_the_real_task_processes(scenario):
    got = scenario.metrics
    completed = sum(v for _, _, v in got["airflow.synclane.jobs.finished.shops.orders.completed"])
    assert completed >= len([r for r in scenario.final if r["type"] == "orders"])  # plus attempts cut by the restart
    assert sum(v for _, _, v in got["airflow.synclane.jobs.finished.shops.orders.abandoned"]) == 1
    assert sum(v for _, _, v in got["airflow.synclane.records.shops.orders"]) >= sum(
        r["processed_count"] for r in scenario.final if r["type"] == "orders"
    )
    assert sum(v for _, _, v in got["airflow.synclane.throttles.shops.orders"]) > 0  # the shop's 429s
    assert got["airflow.synclane.page.duration.shops.orders"] and got["airflow.synclane.take.wait.shops.orders"]
    # Every planning run sends the gauges (whether one fell while the slice lay abandoned depends on timing).
    for gauge in ("waiting", "running", "abandoned", "max_freshness_lag"):
        assert {kind for _, kind, _ in got[f"airflow.synclane.queue.{gauge}.shops"]} == {"g"}, gauge


def test_every_token_refresh_succeeded_but_the_revoked_accounts_last(scenario):
    """Three worker processes refreshed every owner's token at each page: a rotated refresh token never sent
    twice (the shop would have revoked that grant, and that owner would wait, not complete)."""
    refused = [e for e in scenario.tokens if e["status"] != 200]
    assert [(e["account"], e["status"], e.get("fault")) for e in refused] == [(REVOKED, 400, "invalid_grant")]
    refreshed = {e["account"] for e in scenario.tokens if e["status"] == 200}
    assert refreshed == {"acme-us", "acme-eu", "globex", "initech", REVOKED}


def test_the_revoked_account_was_paused_as_needs_reconnecting_alerted_once_and_completed_from_its_cursors_after_new_credentials(
    scenario,
):
    pages = [e for e in scenario.requests if e["account"] == REVOKED and e["seq"] <= scenario.resume_seq]
    answered = [e["status"] for e in pages if e.get("fault") is None]  # not a random 429 or 503
    assert answered == [200, 200], pages  # two pages, then its grant was revoked
    [refused] = [e for e in scenario.tokens if e["account"] == REVOKED and e["status"] != 200]
    assert refused["seq"] > pages[-1]["seq"] and refused.get("fault") == "invalid_grant"  # its next refresh
    assert not [
        e for e in scenario.requests if refused["seq"] < e["seq"] <= scenario.resume_seq and e["account"] == REVOKED
    ]
    waiting = [r for r in scenario.settled if r["owner"] == REVOKED]
    assert {r["status"] for r in waiting} <= {"pending", "failed", "completed"}
    assert any(r["status"] != "completed" for r in waiting)
    # a job that had pages (its products, unless a random 503 sent it aside) waited at its cursor
    interrupted = [r for r in waiting if r["status"] != "completed" and int(r["cursor"] or 0) > 0]
    assert interrupted, waiting
    # the SyncLane page's API (what its Owners view shows) had it paused by 'credentials', needing reconnecting
    page = scenario.paused_on_page
    assert page["paused_at"] is not None and page["paused_by"] == "credentials"
    assert page["paused_reason"].startswith("needs reconnecting: ") and "invalid_grant" in page["paused_reason"]
    assert page["credentials"].startswith("needs reconnecting: ") and "invalid_grant" in page["credentials"]
    # one alert: exactly one synclane_health run named the pause, and it failed
    naming = [
        r["dag_run_id"]
        for r in scenario.api.runs("synclane_health")
        if f"paused: owner {REVOKED}" in health_log(scenario.logs, r["dag_run_id"])
    ]
    assert naming == [scenario.paused_alert["dag_run_id"]] and scenario.paused_alert["state"] == "failed"
    # new credentials set from the page's form endpoint resumed it; each job went on from its cursor, and every
    # job completed with what the shop has
    assert scenario.resumed["credentials"].startswith("set (oauth), expires in ")
    assert "access_token" not in json.dumps(scenario.resumed) and "rt_" not in json.dumps(scenario.resumed)
    after = [e for e in scenario.requests if e["account"] == REVOKED and e["seq"] > scenario.resume_seq]
    assert after and 401 not in {e["status"] for e in after}
    for row in interrupted:
        asked = [e["cursor"] for e in after if entry_key(e) == request_key(row)]
        assert asked[0] == int(row["cursor"]), f"job {row['id']} did not go on from its cursor"
    done = [r for r in scenario.final if r["owner"] == REVOKED]
    assert {r["status"] for r in done} == {"completed"} and len(done) >= len(waiting)
    for row in done:
        assert row["processed_count"] == shop_count(row)
