"""The planner operator: inserts the jobs a queue's owners should have, once, however often it runs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from synclane_provider.core import Operations, SyncLane
from synclane_provider.core.durations import duration_text
from synclane_provider.operators.base import QueueOperator
from synclane_provider.stats import AirflowStats

if TYPE_CHECKING:
    from airflow.sdk import Context


def retry_bound(declaration: SyncLane) -> timedelta:
    """How long a planning run waits out a database that went away: most of a plan interval, at least 10 s."""
    return max(declaration.plan_interval * 0.8, timedelta(seconds=10))


class SyncLanePlanOperator(QueueOperator):
    """Plans one queue: every owner its owner source lists, or only ``owner_id``.

    Planning compares what should exist with what exists and inserts the
    difference with ``ON CONFLICT DO NOTHING``, so a retried, doubled or late
    run inserts nothing more. Then, when the queue declares ``retention``, it
    prunes finished jobs older than that in short batches, for at most half a
    plan interval (what is left goes on in the next run), and adds what the
    queue's jobs completed since the last run to their owners' records
    (:meth:`~synclane_provider.core.ops.operations.Operations.tally_records`).
    Returns ``{"queue", "owners", "inserted": {type: count}, "total", "pruned",
    "owners_counted"}`` (pushed to XCom) and logs one line per job type.

    Then it reads the queue's gauges (jobs waiting, running, abandoned, the
    largest freshness lag), logs them and sends them to Airflow's metrics
    (``synclane.queue.*``): the planning run is the one task that runs every
    minute whatever the workers do. A failure to read them is logged, never
    fails the planning.

    :param owner_id: plan only this owner (it must be listed by the owner source); ``owner`` is the task's
        owner in Airflow.
    (The queue to plan and the other parameters are :class:`~synclane_provider.operators.base.QueueOperator`'s.)
    """

    template_fields: Sequence[str] = (*QueueOperator.queue_fields, "owner_id")
    ui_color = "#e8f4d9"

    def __init__(self, *, owner_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owner_id = owner_id

    def execute(self, context: Context) -> dict[str, Any]:
        with self.operations() as (operations, queue):
            declaration = operations.synclane
            # A passing database error is waited out, but never into the next run's time.
            summary = operations.plan(queue.name, owner=self.owner_id or None, give_up_after=retry_bound(declaration))
            pruned = (
                operations.prune(queue.name, time_budget=declaration.plan_interval / 2)
                if queue.retention is not None and not self.owner_id
                else None
            )
            counted = operations.tally_records(queue.name) if not self.owner_id else 0
            if summary.skipped:
                self.log.info("queue %s: another planning run is still running; this one planned nothing", queue.name)
            for job_type, inserted in summary.inserted.items():
                self.log.info(
                    "queue %s, type %s: %s job(s) inserted for %s owner(s)",
                    queue.name,
                    job_type,
                    inserted,
                    summary.owners,
                )
            if pruned is not None:
                self.log.info(
                    "queue %s: %s finished job(s) older than %s pruned%s",
                    queue.name,
                    pruned.deleted,
                    duration_text(queue.retention),
                    " (more left for the next run)" if pruned.more else "",
                )
            self._report_gauges(operations, queue.name)
        return {
            "queue": queue.name,
            "owners": summary.owners,
            "inserted": summary.inserted,
            "total": summary.total,
            "pruned": pruned.deleted if pruned is not None else 0,
            "owners_counted": counted,
        }

    def _report_gauges(self, operations: Operations, queue: str) -> None:
        try:
            gauges = operations.gauges(queue)
        except Exception as exc:  # noqa: BLE001 - the planning itself is done; its gauges are only a report
            self.log.warning("queue %s: could not read its gauges: %s", queue, exc)
            return
        gauges.emit(AirflowStats())
        lag = duration_text(gauges.max_freshness_lag) if gauges.max_freshness_lag is not None else "none yet"
        self.log.info(
            "queue %s: %s job(s) waiting, %s running, %s abandoned; largest freshness lag %s; %s",
            queue,
            gauges.waiting,
            gauges.running,
            gauges.abandoned,
            lag,
            gauges.describe_owners(),
        )
