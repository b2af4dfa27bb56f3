"""The example DAGs: they parse without touching any database, and run for real with dag.test() against PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from psycopg import sql

from tests.support import provider_declaration as decl
from tests.support.airflow_env import REPO
from tests.support.database import DataRole
from tests.support.helpers import execute, rows
from tests.support.provider_helpers import operations

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize(
    "declaration",
    [None, "tests.support.provider_declaration:synclane"],
    ids=["example declaration", "test declaration"],
)
def test_the_dag_files_parse_without_touching_any_database_or_connection(declaration):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCLANE_DECLARATION") and k != "SYNCLANE_QUEUE"}
    if declaration:
        env.update(SYNCLANE_DECLARATION=declaration, SYNCLANE_QUEUE="shops")
    # Were anything to use the connection at parse time, it would find nothing listening.
    env["AIRFLOW_CONN_SYNCLANE_DEFAULT"] = "postgresql://postgres@127.0.0.1:1/postgres"
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.parse_probe", str(REPO / "dags")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["import_errors"] == {}
    assert report["dags"] == [
        "synclane_downstream",
        "synclane_health",
        "synclane_plan",
        "synclane_requeue",
        "synclane_resync",
        "synclane_work",
    ]
    assert report["tasks"] == {
        "synclane_downstream": ["count_new_records", "rebuild_resynced_partitions"],
        "synclane_health": ["check"],
        "synclane_plan": ["assets", "plan"],
        "synclane_requeue": ["requeue"],
        "synclane_resync": ["resync"],
        "synclane_work": ["work"],
    }
    assert report["attempts"] == []
    assert report["seconds"] < 60


@pytest.fixture(scope="module")
def dags(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    return bag.dags


def xcoms(run, task_id: str) -> dict[int, dict]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        found = session.scalars(
            XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key="return_value")
        ).all()
        return {x.map_index: XComModel.deserialize_value(x) for x in found}


def task_instances(run) -> list:
    from airflow.utils.session import create_session

    with create_session() as session:
        return sorted(run.get_task_instances(session=session), key=lambda ti: ti.map_index)


def test_the_planning_dag_inserts_the_planned_rows_once_and_announces_completions_once(dags, provider_schema, admin):
    # One run at a time, and after one that outlasted its interval only the latest interval runs: Airflow starts
    # no run while one is active, and without catchup it does not queue the intervals missed meanwhile.
    assert (dags["synclane_plan"].max_active_runs, dags["synclane_plan"].catchup) == (1, False)
    start = datetime.now(timezone.utc)
    first = dags["synclane_plan"].test()
    assert first.state == "success"
    [planned] = xcoms(first, "plan").values()
    assert planned["total"] in decl.planned_between(start, datetime.now(timezone.utc))
    inserted = {"orders": planned["total"] - 4, "products": 4}
    assert xcoms(first, "plan") == {
        -1: {
            "queue": "shops",
            "owners": 4,
            "inserted": inserted,
            "total": planned["total"],
            "pruned": 0,
            "owners_counted": 0,
        }
    }
    assert len(rows(admin, provider_schema)) == planned["total"]

    assert xcoms(first, "assets") == {-1: {}}  # nothing completed yet: no event

    # Jobs completed after the first run's announcement (by any worker: here, by hand) are the next run's events.
    execute(
        admin,
        provider_schema,
        "UPDATE {jobs} SET status = 'completed', processed_count = id,"
        " completed_at = (SELECT reached FROM {marks} WHERE purpose = 'announced') + interval '1 ms'",
    )
    again = dags["synclane_plan"].test()
    assert again.state == "success"
    assert xcoms(again, "plan")[-1]["total"] == 0
    assert len(rows(admin, provider_schema)) == planned["total"]

    # One asset event per type, its extra naming every owner's records; each completion announced once.
    [emitted] = xcoms(again, "assets").values()
    table = rows(admin, provider_schema)
    assert sorted(emitted) == ["orders", "products"]
    for type_name, extra in emitted.items():
        mine = [row for row in table if row["type"] == type_name]
        assert extra["jobs"] == len(mine) and extra["records"] == sum(row["processed_count"] for row in mine)
        assert set(extra["owners"]) == {row["owner"] for row in mine}
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        events = [e for e in session.query(AssetEvent).all() if e.source_run_id == again.run_id]
        assert sorted(e.asset.uri for e in events) == [
            f"synclane://{provider_schema}/shops/orders",
            f"synclane://{provider_schema}/shops/products",
        ]
        assert {e.extra["type"]: e.extra for e in events} == emitted
    assert xcoms(dags["synclane_plan"].test(), "assets") == {-1: {}}


def test_the_worker_dag_drains_the_lanes_with_mapped_slots_deferring_until_a_job_is_due(
    dags, provider_schema, admin, capsys
):
    with operations(decl.synclane) as ops:
        jobs = ops.plan("shops").total

    # Without lingering, so that the slots defer (the linger is tested on the operator).
    run = dags["synclane_work"].test(
        run_conf={"idle_timeout": decl.THROTTLE_SECONDS, "max_run_time": 120, "linger": 0, "settle": 0}
    )

    assert run.state == "success"
    instances = [ti for ti in task_instances(run) if ti.task_id == "work"]
    assert [(ti.map_index, ti.state) for ti in instances] == [(0, "success"), (1, "success")]
    assert [ti.rendered_map_index for ti in instances] == ["shops slot 0", "shops slot 1"]
    summaries = xcoms(run, "work")
    assert sorted(summaries) == [0, 1]
    total = {
        key: sum(s[key] for s in summaries.values())
        for key in ("jobs", "completed", "failed", "released", "lease_lost")
    }
    assert total == {
        "jobs": jobs + 1,
        "completed": jobs,
        "failed": 1,
        "released": 0,
        "lease_lost": 0,
    }
    # The slot that met the throttled job deferred, was woken when the job became due, ran it, and deferred again.
    assert max(s["deferrals"] for s in summaries.values()) >= 2
    assert all(s["ended"] == "idle_timeout" for s in summaries.values())
    assert "woken: a job of queue shops can be taken" in capsys.readouterr().out

    table = rows(admin, provider_schema)
    assert {row["status"] for row in table} == {"completed"}
    [throttled] = [row for row in table if row["owner"] == decl.THROTTLED_OWNER and row["type"] == "products"]
    assert throttled["attempt_count"] == 2 and throttled["processed_count"] == 100
    # The lane invariant: no two jobs of one lane ever had pages in flight at once.
    assert decl.PAGES and decl.overlapping_lane_pages() == []


def test_the_health_dag_fails_naming_the_job_abandoned_in_its_interval_and_passes_after(dags, provider_schema, capsys):
    from datetime import datetime, timedelta, timezone

    with operations(decl.synclane) as ops:
        ops.plan("shops")
        [job] = ops.list_jobs("shops", owner="globex", type="products")
        ops.abandon("shops", job.id, "access revoked")
    dag = dags["synclane_health"]
    every = dag.timetable.delta
    # The run whose data interval ends now holds the abandonment: it fails, and says which job and why.
    end = datetime.now(timezone.utc) + timedelta(seconds=1)
    failed = dag.test(logical_date=end)  # a run by hand: the interval that ends at its logical date
    assert (failed.data_interval_start, failed.data_interval_end) == (end - every, end)
    assert failed.state == "failed"
    [instance] = task_instances(failed)
    assert instance.state == "failed"
    assert (
        f"abandoned: owner globex, job globex/products #{job.id}, at cursor None after 0 attempt(s): "
        "Abandoned: access revoked" in capsys.readouterr().out
    )
    # The next run's interval starts where this one ended: it passes (each abandonment is reported once).
    passed = dag.test(logical_date=end + every)
    assert passed.data_interval_start == end
    assert passed.state == "success"
    assert xcoms(passed, "check") == {-1: {"queue": "shops", "healthy": True}}


def test_the_health_dag_reports_jobs_abandoned_where_no_run_checked_once_and_only_once(
    dags, provider_schema, admin, database_url, capsys, monkeypatch
):
    """A run that could not check (database down, killed by a restart) and intervals Airflow skipped
    (catchup=False after Airflow was down longer than a period) leave no gap: the next check reaches back."""
    from datetime import datetime, timedelta, timezone

    dag = dags["synclane_health"]
    every = dag.timetable.delta
    # Far ahead of the other tests' runs, so that these runs follow one another.
    end = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=30)
    assert dag.test(logical_date=end).state == "success"
    with operations(decl.synclane) as ops:
        ops.plan("shops")
        [job] = ops.list_jobs("shops", owner="globex", type="products")
        ops.abandon("shops", job.id, "access revoked")
    # Abandoned within the next run's interval; that run fails before it checks (its connection's role was
    # left without rights to the schema).
    execute(admin, provider_schema, "UPDATE {jobs} SET next_run_at = %s WHERE id = %s", [end + every / 2, job.id])
    role = DataRole(admin, database_url)
    try:
        with monkeypatch.context() as misconfigured:
            misconfigured.setenv("AIRFLOW_CONN_SYNCLANE_DEFAULT", role.uri)
            assert dag.test(logical_date=end + every).state == "failed"
    finally:
        role.drop()
    capsys.readouterr()
    # Airflow then skips an interval; the run after the gap reports the job and where it looked from.
    reporting = dag.test(logical_date=end + 3 * every)
    assert (reporting.data_interval_start, reporting.state) == (end + 2 * every, "failed")
    out = capsys.readouterr().out
    assert f"abandoned: owner globex, job globex/products #{job.id}," in out
    assert f"the last check ended at {end.isoformat()}" in out
    # It reported the job (its run failed): the next run starts where it ended, and passes.
    assert dag.test(logical_date=end + 4 * every).state == "success"


def test_the_health_dag_fails_once_when_a_handler_pauses_its_owner_and_passes_while_the_pause_lasts(
    dags, provider_schema, capsys
):
    from datetime import datetime, timedelta, timezone

    dag = dags["synclane_health"]
    every = dag.timetable.delta
    end = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=60)  # after the other tests' runs
    assert dag.test(logical_date=end).state == "success"
    with operations(decl.synclane) as ops:
        ops.plan("shops")
        ops.store.pause_owner("shops", "globex", reason="401 Unauthorized: token revoked", by="handler", now=None)
    capsys.readouterr()
    failed = dag.test(logical_date=end + every)
    assert failed.state == "failed"
    assert "paused: owner globex was paused by its handler at " in (out := capsys.readouterr().out)
    assert ": 401 Unauthorized: token revoked; last error: no error recorded; none of its jobs runs" in out
    # The pause lasts; the check alerted about it once: the runs after it pass.
    assert dag.test(logical_date=end + 2 * every).state == "success"
    assert dag.test(logical_date=end + 3 * every).state == "success"
    assert "paused: owner globex" not in capsys.readouterr().out


def test_every_operator_and_sensor_serializes_into_a_dag():
    from datetime import datetime, timezone

    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from synclane_provider.operators.health import SyncLaneHealthCheckOperator
    from synclane_provider.operators.plan import SyncLanePlanOperator
    from synclane_provider.operators.work import SyncLaneWorkOperator
    from synclane_provider.sensors.drained import SyncLaneDrainedSensor
    from synclane_provider.sensors.initial_load import SyncLaneInitialLoadSensor

    common = dict(declaration="tests.support.provider_declaration:synclane", synclane_queue="shops")
    with DAG("synclane_everything", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        plan = SyncLanePlanOperator(task_id="plan", owner_id="globex", **common)
        work = SyncLaneWorkOperator(task_id="work", slot=1, idle_timeout=5, max_run_time=60, **common)
        loaded = SyncLaneInitialLoadSensor(task_id="loaded", owner_id="globex", job_type="orders", **common)
        drained = SyncLaneDrainedSensor(task_id="drained", lane="acme", **common)
        check = SyncLaneHealthCheckOperator(task_id="check", abandoned_since="{{ data_interval_start }}", **common)
        plan >> work >> [loaded, drained] >> check
    restored = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    assert set(restored.task_dict) == {"plan", "work", "loaded", "drained", "check"}
    assert tuple(restored.task_dict["work"].template_fields) == SyncLaneWorkOperator.template_fields


def test_the_old_synclane_argument_still_works_for_one_release_with_a_warning():
    from airflow.exceptions import AirflowProviderDeprecationWarning

    from synclane_provider.core import DeclarationError
    from synclane_provider.operators.plan import SyncLanePlanOperator

    path = "tests.support.provider_declaration:synclane"
    with pytest.warns(AirflowProviderDeprecationWarning, match="use declaration="):
        old = SyncLanePlanOperator(task_id="old", synclane=path, synclane_queue="shops")
    assert old.declaration == path
    with pytest.raises(DeclarationError, match="not both"), pytest.warns(AirflowProviderDeprecationWarning):
        SyncLanePlanOperator(task_id="both", synclane=path, declaration="other.module:thing", synclane_queue="shops")


def test_without_a_declaration_argument_the_configured_one_is_used(monkeypatch):
    from synclane_provider.operators.plan import SyncLanePlanOperator

    monkeypatch.setenv("AIRFLOW__SYNCLANE__DECLARATION", "tests.support.provider_declaration:synclane")
    assert SyncLanePlanOperator(task_id="plan", synclane_queue="shops").declaration == (
        "tests.support.provider_declaration:synclane"
    )


def test_the_resync_dag_makes_one_request_from_its_params_and_the_workers_complete_it(dags, provider_schema, admin):
    from synclane_provider.core import WorkerSlot

    params = {
        "type": "orders",
        "start": "2026-03-01",
        "end": "2026-03-03",
        "owners": ["acme-us", "globex"],
        "reason": "March totals",
        "key": "march",
    }
    run = dags["synclane_resync"].test(run_conf=params)
    assert run.state == "success"
    made = xcoms(run, "resync")[-1]
    assert made["key"] == "march" and made["made"] == made["jobs"] > 0
    assert dags["synclane_resync"].test(run_conf=params).state == "success"  # the same key again: nothing new
    assert len(rows(admin, provider_schema, "request_key = 'march'")) == made["jobs"]

    with operations(decl.synclane) as ops:
        with WorkerSlot(decl.synclane, ops.session.database, "shops") as slot:
            while slot.run_one(then_continue=False) is not None:
                pass
        [progress] = ops.resyncs("shops", key="march")
    assert (progress.done, progress.total, progress.request.reason) == (made["jobs"], made["jobs"], "March totals")
    assert (progress.request.type, progress.request.requested_by[:8]) == ("orders", "dag run ")
    assert {job["type"] for job in rows(admin, provider_schema, "request_key = 'march'")} == {"orders"}


def test_the_resync_dags_form_chooses_no_type_and_needs_its_days_and_a_reason(dags):
    # What Airflow's "Trigger DAG" form is built from: no value preselected for the four a request needs.
    from airflow.sdk.exceptions import ParamValidationError

    params = dags["synclane_resync"].params
    declared = [t.name for t in decl.synclane.queue("shops").types]
    assert params.get_param("type").schema == {"type": "string", "enum": declared}
    assert (params.get_param("start").schema["format"], params.get_param("end").schema["format"]) == ("date", "date")
    assert params.get_param("reason").schema["minLength"] == 1
    for name in ("type", "start", "end", "reason"):
        with pytest.raises(ParamValidationError, match="No value passed"):
            params.get_param(name).resolve()
    assert (params["owners"], params["key"]) == (None, None)  # optional


def requests(admin, schema: str) -> list[str]:
    """The keys of the re-sync requests recorded (the table is kept across tests)."""
    query = sql.SQL("SELECT key FROM {}.resync_requests ORDER BY key").format(sql.Identifier(schema))
    return [row["key"] for row in admin.execute(query)]


RESYNC = {"type": "orders", "start": "2026-03-01", "end": "2026-03-03", "reason": "March totals"}


@pytest.mark.parametrize(
    ("conf", "refusal"),
    [
        ({}, "Invalid input for param type: No value passed"),
        ({**RESYNC, "type": None}, "Invalid input for param type: None is not of type 'string'"),
        ({k: v for k, v in RESYNC.items() if k != "type"}, "Invalid input for param type: No value passed"),
        ({"type": "orders", "reason": "March totals"}, "Invalid input for param start: No value passed"),
        ({**RESYNC, "type": "prices"}, "Invalid input for param type: 'prices' is not one of ['orders', 'products']"),
        ({**RESYNC, "start": ""}, "Invalid input for param start: '' is not a 'date'"),
        ({**RESYNC, "start": "March"}, "Invalid input for param start: 'March' is not a 'date'"),
        ({**RESYNC, "end": "2026-02-30"}, "Invalid input for param end: '2026-02-30' is not a 'date'"),
        ({**RESYNC, "end": None}, "Invalid input for param end: None is not of type 'string'"),
        ({**RESYNC, "reason": ""}, "Invalid input for param reason: '' should be non-empty"),
    ],
    ids=[
        "nothing",
        "null type",
        "days only",
        "type only",
        "unknown type",
        "empty start",
        "garbled start",
        "no such day",
        "null end",
        "no reason",
    ],
)
def test_a_resync_trigger_without_a_type_or_with_a_bad_day_is_refused_naming_the_param_and_makes_nothing(
    dags, provider_schema, admin, conf, refusal
):
    from airflow.sdk.exceptions import ParamValidationError

    before = requests(admin, provider_schema)
    with pytest.raises(ParamValidationError) as refused:
        dags["synclane_resync"].test(run_conf=conf)
    assert str(refused.value).splitlines()[0] == refusal  # then Airflow adds the schema the value failed
    assert rows(admin, provider_schema) == []
    assert requests(admin, provider_schema) == before


@pytest.mark.parametrize(
    ("params", "refusal"),
    [
        ({}, "start of a re-sync must be a day written YYYY-MM-DD (UTC), e.g. 2026-03-01; got None"),
        ({**RESYNC, "start": ""}, "start of a re-sync must be a day written YYYY-MM-DD (UTC), e.g. 2026-03-01; got ''"),
        (
            {**RESYNC, "end": "2026-02-30"},
            "end of a re-sync must be a day written YYYY-MM-DD (UTC), e.g. 2026-03-01; got '2026-02-30'",
        ),
        (
            {**RESYNC, "end": "2026-03-03T00:00"},
            "end of a re-sync must be a day written YYYY-MM-DD (UTC), e.g. 2026-03-01; got '2026-03-03T00:00'",
        ),
        ({**RESYNC, "type": None}, "queue 'shops' has no job type None (it declares 'orders', 'products')"),
        ({**RESYNC, "reason": " "}, "reason must be a non-empty string, got ' '"),
    ],
    ids=["nothing", "empty start", "no such day", "an instant", "no type", "blank reason"],
)
def test_the_resync_task_itself_refuses_a_bad_param_in_one_line_and_makes_nothing(
    dags, provider_schema, admin, params, refusal
):
    # Values Airflow let through (its checks of params off, or the task called as a function) meet the same refusal.
    from synclane_provider.core import SyncLaneError

    before = requests(admin, provider_schema)
    with pytest.raises(SyncLaneError) as refused:
        dags["synclane_resync"].get_task("resync").python_callable(params=params)
    assert str(refused.value) == refusal
    assert rows(admin, provider_schema) == []
    assert requests(admin, provider_schema) == before


def test_the_downstream_dag_rebuilds_exactly_the_days_a_re_sync_fetched_again(dags):
    from types import SimpleNamespace

    rebuild = dags["synclane_downstream"].get_task("rebuild_resynced_partitions").python_callable
    landed = rebuild.__globals__["landed"]
    window = {"window_start": "2026-03-03T00:00:00+00:00", "window_end": "2026-03-05T00:00:00+00:00", "records": 9}
    part = {"window_start": "2026-03-01T06:00:00+00:00", "window_end": "2026-03-03T00:00:00+00:00", "records": 1}
    events = [
        SimpleNamespace(extra={"owners": {"globex": {"records": 3}}}),  # fresh data only: nothing to rebuild
        SimpleNamespace(extra={"resyncs": {"march": {"acme": [window]}}}),
        SimpleNamespace(extra={"resyncs": {"march": {"acme": [part]}, "other": {"globex": [part]}}}),
    ]
    assert rebuild(triggering_asset_events={landed: events}) == {
        "march": {"acme": ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04"]},
        "other": {"globex": ["2026-03-01", "2026-03-02"]},
    }
    assert rebuild(triggering_asset_events={landed: events[:1]}) == {}
