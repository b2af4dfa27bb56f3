"""Assets in a real Airflow: ``airflow standalone`` (scheduler, DAG processor, triggerer, API server) runs the
example DAGs over a small declaration; the planning DAG's ``assets`` task announces every minute what the
queue completed since its last run, one asset event per type, while the worker slots go on running (they
linger and defer as they do by default, for up to an hour); the downstream DAG ``synclane_downstream`` runs
on the ``orders`` asset within two minutes of the first orders window completing, and counts the new orders
per account.

Checked through the REST API and SQL: the events' ``extra`` names exactly the accounts, record counts and
windows the jobs table holds, and the downstream runs together counted every account's orders once.
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections import defaultdict
from datetime import datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from synclane_demo.local import PROJECT, airflow_environment, airflow_service, wait_for_airflow
from tests.support.database import drop_schemas
from tests.support.real_airflow import AirflowApi, clean_environment, free_port, wait_until

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]


def jobs(url: str, schema: str) -> list[dict]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        try:
            return conn.execute(sql.SQL("SELECT * FROM {}.jobs ORDER BY id").format(sql.Identifier(schema))).fetchall()
        except psycopg.errors.UndefinedTable:
            return []


def downstream_counts(api: AirflowApi) -> list[dict[str, int]]:
    """What each successful downstream run returned: new orders per account."""
    counted = []
    for run in api.runs("synclane_downstream"):
        if run["state"] != "success":
            continue
        run_id = urllib.parse.quote(run["dag_run_id"], safe="")
        entry = api.get(
            f"/api/v2/dags/synclane_downstream/dagRuns/{run_id}/taskInstances/count_new_records"
            "/xcomEntries/return_value"
        )
        counted.append(entry["value"])
    return counted


def test_the_downstream_dag_runs_when_orders_land_with_owners_windows_and_counts_in_the_extra(
    database_url, tmp_path, airflow_metadata
):
    suffix = uuid.uuid4().hex[:8]
    metadata_db, schema = f"synclane_assets_airflow_{suffix}", f"synclane_assets_{suffix}"
    airflow_metadata(metadata_db)  # migrated already: standalone finds nothing to migrate
    metadata_url = psycopg.conninfo.make_conninfo(database_url, dbname=metadata_db)
    port = free_port()
    base = {
        **clean_environment(),
        "PYTHONPATH": str(PROJECT),  # the task processes import the test declaration
        "SYNCLANE_TEST_ASSETS_SCHEMA": schema,
        # The worker DAG's defaults: a slot lingers two minutes after its last job and then defers, for up to
        # an hour; the events must not wait for it.
    }
    env = airflow_environment(
        base,
        home=tmp_path / "airflow",
        data_url=database_url,
        metadata_url=metadata_url,
        port=port,
        shop_url=None,
        parallelism=4,
    )
    env.update(SYNCLANE_DECLARATION="tests.support.assets_declaration:synclane", SYNCLANE_QUEUE="shops")
    airflow = airflow_service(env, tmp_path).start()
    try:
        wait_for_airflow(airflow, port, timeout=300)
        api = AirflowApi(f"http://127.0.0.1:{port}", tmp_path / "airflow")
        explain = lambda: airflow.tail(60)  # noqa: E731 - shown when a wait times out

        def orders_done() -> list[dict] | None:
            rows = [r for r in jobs(database_url, schema) if r["type"] == "orders"]
            return rows if rows and all(r["status"] == "completed" for r in rows) else None

        orders = wait_until(orders_done, 300, "every orders job completed", explain=explain)
        first_done = min(r["completed_at"] for r in orders)
        expected: dict[str, int] = defaultdict(int)
        for row in orders:
            expected[row["owner"]] += row["processed_count"]

        def counted_everything() -> list[dict[str, int]] | None:
            counted = downstream_counts(api)
            total: dict[str, int] = defaultdict(int)
            for counts in counted:
                for owner, records in counts.items():
                    total[owner] += records
            return counted if dict(total) == dict(expected) else None

        counted = wait_until(
            counted_everything,
            300,
            f"downstream runs to count {dict(expected)}",
            every=2,
            explain=lambda: f"counted so far: {downstream_counts(api)}\n{airflow.tail(40)}",
        )

        # Downstream heard of the first orders within two minutes, while the slots that completed them ran on.
        first_downstream = min(
            datetime.fromisoformat(run["start_date"]) for run in api.runs("synclane_downstream") if run["start_date"]
        )
        assert first_downstream - first_done < timedelta(minutes=2), (first_done, first_downstream)
        first_work = api.runs("synclane_work")[-1]  # its slots lingered, then deferred: the run went on
        assert first_work["end_date"] is None or datetime.fromisoformat(first_work["end_date"]) > first_downstream

        events = [
            e
            for e in api.get("/api/v2/assets/events", limit=100)["asset_events"]
            if e.get("extra", {}).get("type") == "orders"
        ]
        assert events, "no orders asset event"
        assert {(e["source_dag_id"], e["source_task_id"]) for e in events} == {("synclane_plan", "assets")}
        # One orders event per planning run that found orders jobs completed, not per job or page.
        assert len({e["source_run_id"] for e in events}) == len(events)
        windows: dict[str, tuple] = {}
        for event in events:
            assert event["extra"]["queue"] == "shops"
            for owner, landing in event["extra"]["owners"].items():
                start, end = windows.get(owner, (landing["window_start"], landing["window_end"]))
                windows[owner] = (min(start, landing["window_start"]), max(end, landing["window_end"]))
        for owner in expected:
            mine = [r for r in orders if r["owner"] == owner]
            assert windows[owner] == (
                min(r["window_start"] for r in mine).isoformat(),
                max(r["window_end"] for r in mine).isoformat(),
            )
        print(f"\ndownstream runs counted {counted}; {len(events)} orders event(s); expected {dict(expected)}")
        print(f"first orders completed {first_done}, first downstream run started {first_downstream}")

        # A re-sync triggered through the DAG synclane_resync with params: the page's JSON shows the request
        # complete, and a downstream run rebuilds exactly the days it fetched again.
        conf = {
            "type": "orders",
            "start": "2026-03-01",
            "end": "2026-04-05",
            "owners": ["globex"],
            "reason": "March orders again",
            "key": "march-again",
        }
        created = api.post("/api/v2/dags/synclane_resync/dagRuns", {"logical_date": None, "conf": conf})
        run_id = urllib.parse.quote(created["dag_run_id"], safe="")
        wait_until(
            lambda: api.get(f"/api/v2/dags/synclane_resync/dagRuns/{run_id}")["state"] == "success",
            180,
            "the re-sync DAG run to succeed",
            explain=explain,
        )

        def request_done() -> dict | None:
            listed = [p for p in api.get("/synclane/api/queues/shops/resyncs") if p["request"]["key"] == "march-again"]
            return listed[0] if listed and listed[0]["total"] and listed[0]["done"] == listed[0]["total"] else None

        done = wait_until(request_done, 300, "the re-sync request to complete on the page's JSON", explain=explain)
        assert (done["total"], done["request"]["reason"], done["request"]["owners"]) == (
            2,
            "March orders again",
            ["globex"],
        )

        def rebuilt() -> dict | None:
            for run in api.runs("synclane_downstream"):
                if run["state"] != "success":
                    continue
                entry = api.get(
                    f"/api/v2/dags/synclane_downstream/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"
                    "/taskInstances/rebuild_resynced_partitions/xcomEntries/return_value"
                )
                if "march-again" in entry["value"]:
                    return entry["value"]["march-again"]
            return None

        days = wait_until(rebuilt, 300, "a downstream run to rebuild the re-fetched days", every=2, explain=explain)
        assert days == {
            "globex": [f"2026-03-{d:02d}" for d in range(1, 32)] + [f"2026-04-{d:02d}" for d in range(1, 5)]
        }
    finally:
        airflow.stop(graceful=60)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(metadata_db)))
            drop_schemas(conn, schema)
