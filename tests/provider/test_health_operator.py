"""The health check operator fails, naming owner, job and error, on each condition, and passes when all is well."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk.exceptions import AirflowException

from synclane_provider.core import DeclarationError, WorkerSlot
from synclane_provider.core.records import OwnerState
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.operators.health import SyncLaneHealthCheckOperator
from tests.provider.conftest import DECLARATION
from tests.support import provider_declaration as decl
from tests.support.helpers import execute
from tests.support.provider_helpers import operations

pytestmark = pytest.mark.airflow


def checker(**kwargs) -> SyncLaneHealthCheckOperator:
    return SyncLaneHealthCheckOperator(
        **{"task_id": "check", "synclane": DECLARATION, "synclane_queue": "shops", **kwargs}
    )


def interval(minutes: int = 5) -> dict:
    """A scheduled run's context: the data interval that ends now."""
    now = datetime.now(timezone.utc)
    return {"data_interval_start": now - timedelta(minutes=minutes), "data_interval_end": now + timedelta(seconds=1)}


def complete_everything(admin, schema) -> None:
    execute(admin, schema, "UPDATE {jobs} SET status = 'completed', completed_at = now()")


def test_it_passes_when_all_is_well(provider_schema, admin):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    complete_everything(admin, provider_schema)
    assert checker().execute(interval()) == {"queue": "shops", "healthy": True}


def test_it_fails_on_a_job_abandoned_within_its_data_interval_naming_owner_job_and_error(provider_schema, admin):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
        [job] = ops.list_jobs("shops", owner="globex", type="products")
        execute(admin, provider_schema, "UPDATE {jobs} SET cursor = '50', attempt_count = 6 WHERE id = %s", [job.id])
        ops.abandon("shops", job.id, "UnreadablePage: the shop returned a page that could not be read")
    with pytest.raises(AirflowException) as failed:
        checker().execute(interval())
    assert str(failed.value).splitlines() == [
        "queue shops: 1 problem(s)",
        f"- abandoned: owner globex, job globex/products #{job.id}, at cursor '50' after 6 attempt(s): "
        "Abandoned: UnreadablePage: the shop returned a page that could not be read",
    ]
    # The next run's interval starts where this one ended: it does not report the job again.
    later = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert checker().execute({"data_interval_start": later, "data_interval_end": later + timedelta(minutes=5)})[
        "healthy"
    ]
    # A run with no data interval (triggered by hand without one) reports every abandoned job.
    with pytest.raises(AirflowException, match=f"#{job.id}"):
        checker().execute({})


def test_it_fails_on_a_running_job_whose_heartbeat_is_older_than_its_lease(provider_schema, admin):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    with WorkerSlot(decl.synclane, SyncLaneHook().get_database(decl.synclane), "shops") as slot:
        job = slot.take()
        # The worker hangs: no heartbeat for longer than the lease.
        execute(
            admin,
            provider_schema,
            "UPDATE {jobs} SET heartbeat_at = now() - interval '6 minutes' WHERE id = %s",
            [job.id],
        )
        with pytest.raises(AirflowException) as failed:
            checker().execute(interval())
    [line] = str(failed.value).splitlines()[1:]
    assert line.startswith(
        f"- stuck: owner {job.owner}, job {job.describe()}, running on {slot.worker_id} at cursor None"
    )
    assert line.endswith("longer ago than its lease (5 min): the worker hangs or is gone")


def test_it_fails_on_an_owner_lagging_more_than_the_queues_max_lag(provider_schema, admin):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
    complete_everything(admin, provider_schema)
    execute(
        admin,
        provider_schema,
        "UPDATE {jobs} SET window_start = window_start - interval '2 days', "
        "window_end = window_end - interval '2 days' WHERE owner = 'initech'",
    )
    with pytest.raises(AirflowException) as failed:
        checker().execute(interval())
    [line] = str(failed.value).splitlines()[1:]
    assert line.startswith("- lagging: owner initech is 2 days ") and " behind in orders " in line
    assert line.endswith("more than max_lag (1 h)")


class TaskTry:
    """What the operator reads of Airflow's task instance: its names, and XCom (kept across tries, as Airflow's)."""

    def __init__(self, run_id: str, xcoms: dict) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index = "synclane_health", run_id, "check", -1
        self.xcoms = xcoms

    def xcom_push(self, key: str, value: object) -> None:
        self.xcoms[key] = value

    def xcom_pull(self, **_: object) -> object:
        return None  # no earlier run's range: this run's data interval is the range


def test_a_paused_owner_fails_each_try_of_the_run_that_claimed_it_and_no_later_run(provider_schema):
    """Airflow may run a check's task a second time after a try whose failure it never recorded (the scheduler
    restarted first): the second try must fail too, or the run ends green and the alert is lost."""
    with operations(decl.synclane) as ops:
        ops.plan("shops")
        ops.store.upsert_owner(
            OwnerState(
                "shops", "globex", paused_at=datetime.now(timezone.utc), paused_by="handler", paused_reason="401"
            )
        )
    run = interval()
    xcoms: dict = {}
    for _ in range(2):  # the first try, then Airflow's second try of the same task instance
        with pytest.raises(AirflowException, match="paused: owner globex was paused by its handler"):
            checker().execute({**run, "ti": TaskTry("scheduled__1", xcoms)})
    later = interval()
    assert "paused: owner globex" not in _failure_or_nothing({**later, "ti": TaskTry("scheduled__2", {})})


def _failure_or_nothing(context: dict) -> str:
    try:
        checker().execute(context)
    except AirflowException as failed:
        return str(failed)
    return ""


def test_bounds_given_as_templates_are_read_as_times(provider_schema):
    now = datetime.now(timezone.utc)
    assert checker(abandoned_since=now.isoformat(), abandoned_until="None").execute({})["healthy"]
    with pytest.raises(DeclarationError, match="abandoned_since must be an ISO 8601 time, got 'yesterday'"):
        checker(abandoned_since="yesterday").execute({})
    with pytest.raises(DeclarationError, match="abandoned_since must name its time zone"):
        checker(abandoned_since="2026-11-30T10:00:00").execute({})


def test_an_empty_data_interval_reports_every_abandoned_job_rather_than_none(provider_schema, caplog, capsys):
    with operations(decl.synclane) as ops:
        ops.plan("shops")
        [job] = ops.list_jobs("shops", owner="acme-eu", type="products")
        ops.abandon("shops", job.id, "access revoked")
    later = datetime.now(timezone.utc) + timedelta(hours=1)  # a trigger timetable's run: start == end
    with pytest.raises(AirflowException, match=f"owner acme-eu, job acme-eu/products #{job.id},"):
        checker().execute({"data_interval_start": later, "data_interval_end": later})
    assert (
        "reporting every abandoned job" in caplog.text + capsys.readouterr().out
    )  # (where Airflow's logging sends it)
