"""The health check operator: a task that fails when a queue needs a person, so Airflow's alerting acts on it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from synclane_provider.core import DeclarationError
from synclane_provider.operators.base import QueueOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

CHECKED_UNTIL = "checked_until"  # the XCom key under which a check records where its range ended


def _instant(name: str, value: object) -> datetime | None:
    """A rendered template or a datetime as an aware datetime; empty (or ``None`` rendered) means no bound."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        return None
    if isinstance(value, datetime):
        instant = value
    elif isinstance(value, str):
        try:
            instant = datetime.fromisoformat(value.strip())
        except ValueError:
            raise DeclarationError(f"{name} must be an ISO 8601 time, got {value!r}") from None
    else:
        raise DeclarationError(f"{name} must be a datetime or an ISO 8601 time, got {value!r}")
    if instant.utcoffset() is None:
        raise DeclarationError(f"{name} must name its time zone, got {value!r}")
    return instant


class SyncLaneHealthCheckOperator(QueueOperator):
    """Fails when a queue needs a person, with a message naming each owner, job and error; else succeeds.

    It fails on: a job abandoned since the last check; a running job whose
    heartbeat is older than the queue's lease (a stuck or lost worker); an owner
    listed by the owner source whose freshness lag (now minus the end of its
    newest completed window of a windowed type) exceeds the queue's ``max_lag``.
    Airflow's alerting then acts as on any failed task: ``email_on_failure``,
    notifiers, ``on_failure_callback``.

    "Since the last check" is the run's data interval: a job abandoned within
    ``[data_interval_start, data_interval_end)`` is reported by that run only,
    so a DAG scheduled with data intervals (``DeltaDataIntervalTimetable``,
    ``CronDataIntervalTimetable``) reports each abandonment once. Each run that
    checks records where its range ended (XCom ``checked_until``, pushed whether
    it passes or fails), and the next run's range starts there when that is
    earlier than its interval: intervals ``catchup=False`` skipped (Airflow was
    down longer than a period, or a run started late) and those of runs that
    never got to check (killed by a restart, database unreachable) are covered
    by the next check, so no abandonment goes unreported.
    ``abandoned_since`` / ``abandoned_until`` override the bounds; a run with no
    or an empty data interval (a trigger timetable; a bare ``timedelta``
    schedule is one in Airflow 3) reports every abandoned job, every run. Stuck workers
    and lagging owners are conditions, reported by every run while they last. An owner
    paused by its handler or turned failing is reported by one run, and again by a
    second try of that run's task: Airflow may run a try again after a restart that
    came before it recorded the first one's failure, and the alert must not be lost.

    Returns ``{"queue", "healthy": True}`` (pushed to XCom) when it passes.

    :param abandoned_since: start of the range of abandonments to report (default: the data interval's start).
    :param abandoned_until: its end, excluded (default: the data interval's end).
    (The queue to check and the other parameters are :class:`~synclane_provider.operators.base.QueueOperator`'s.)
    """

    template_fields: Sequence[str] = (*QueueOperator.queue_fields, "abandoned_since", "abandoned_until")
    ui_color = "#f7e1d9"

    def __init__(
        self,
        *,
        abandoned_since: datetime | str | None = None,
        abandoned_until: datetime | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.abandoned_since = abandoned_since
        self.abandoned_until = abandoned_until

    def execute(self, context: Context) -> dict[str, Any]:
        since = _instant("abandoned_since", self.abandoned_since or context.get("data_interval_start"))
        until = _instant("abandoned_until", self.abandoned_until or context.get("data_interval_end"))
        if not self.abandoned_since and since is not None:
            since = self._since_last_check(context, since)
        if since is not None and until is not None and since >= until:
            # An empty interval (a trigger timetable, such as a bare timedelta schedule, or a manual run of one)
            # cannot say what "since the last check" is: report every abandoned job rather than none.
            self.log.warning(
                "the run's range of abandonments [%s, %s) is empty: reporting every abandoned job; schedule the "
                "check with a data interval timetable (DeltaDataIntervalTimetable) to report each one once",
                since.isoformat(),
                until.isoformat(),
            )
            since = until = None
        with self.operations() as (operations, queue):
            report = operations.check_health(
                queue.name, abandoned_since=since, abandoned_until=until, claimant=_claimant(context)
            )
        self.log.info(
            "queue %s checked (abandoned from %s to %s): %s problem(s)",
            queue.name,
            since.isoformat() if since else "ever",
            until.isoformat() if until else "now",
            len(report.findings),
        )
        if until is not None and "ti" in context:
            context["ti"].xcom_push(key=CHECKED_UNTIL, value=until.isoformat())
        if not report.healthy:
            raise AirflowException(report.describe())
        return {"queue": queue.name, "healthy": True}

    def _since_last_check(self, context: Context, start: datetime) -> datetime:
        """Where the last check ended, when that is before ``start``; else ``start``."""
        if "ti" not in context:
            return start
        ti = context["ti"]
        # One map index: the newest value of the runs up to this one (without it, every run's value, as a list).
        last = ti.xcom_pull(
            task_ids=self.task_id, key=CHECKED_UNTIL, map_indexes=ti.map_index, include_prior_dates=True
        )
        if last is None:
            return start
        checked_until = datetime.fromisoformat(last)
        if checked_until >= start:
            return start
        self.log.info(
            "the last check ended at %s, before this run's interval starts (%s): reporting abandonments from "
            "there, so that none falls between two checks",
            checked_until.isoformat(),
            start.isoformat(),
        )
        return checked_until


def _claimant(context: Context) -> str | None:
    """The check's name for the owner alerts it claims: its task instance's, the same for every try of it."""
    if "ti" not in context:
        return None
    ti = context["ti"]
    index = getattr(ti, "map_index", -1)
    mapped = f"[{index}]" if index is not None and index >= 0 else ""
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}{mapped}"
