"""Waits for an owner's (or every owner's) first load of a queue to be complete."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException

from synclane_provider.core import Operations, Queue
from synclane_provider.core.planner import owners_of
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.locate import locate_queue
from synclane_provider.triggers.initial_load import InitialLoadTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class SyncLaneInitialLoadSensor(BaseSensorOperator):
    """Succeeds when the initial jobs (history slices, first snapshots) of ``owner_id`` are all completed.

    Without ``owner_id``, every owner that the queue's owner source lists must be
    complete; an owner with nothing planned yet is not. Returns at once when
    that already holds; otherwise defers to an
    :class:`~synclane_provider.triggers.initial_load.InitialLoadTrigger`
    (``deferrable=True``) or pokes every ``poke_interval``.

    :param synclane: import path of the declaration, ``"package.module:attribute"``.
    :param synclane_queue: the queue (``queue`` is the executor's queue in Airflow).
    :param owner_id: one owner, or None for every owner (``owner`` is the task's owner in Airflow).
    :param job_type: only this job type's initial jobs, or None for every type.
    :param allow_abandoned: count abandoned initial jobs as done (the load is settled, not complete).
    :param synclane_conn_id: Airflow connection to the database of the jobs table.
    :param deferrable: wait on the triggerer; defaults to ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = ("synclane", "synclane_queue", "owner_id", "job_type", "synclane_conn_id")
    ui_color = "#f2e6d9"

    def __init__(
        self,
        *,
        synclane: str,
        synclane_queue: str,
        owner_id: str | None = None,
        job_type: str | None = None,
        allow_abandoned: bool = False,
        synclane_conn_id: str = SyncLaneHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.synclane = synclane
        self.synclane_queue = synclane_queue
        self.owner_id = owner_id
        self.job_type = job_type
        self.allow_abandoned = allow_abandoned
        self.synclane_conn_id = synclane_conn_id
        self.deferrable = deferrable

    def _owners(self, queue: Queue) -> list[str]:
        if self.job_type:
            queue.job_type(self.job_type)  # an unknown type fails clearly instead of waiting forever
        return [self.owner_id] if self.owner_id else [owner.id for owner in owners_of(queue)]

    def poke(self, context: Context) -> bool:
        declaration, queue = locate_queue(self.synclane, self.synclane_queue)
        owners = self._owners(queue)
        database = SyncLaneHook(synclane_conn_id=self.synclane_conn_id).get_database(declaration)
        with Operations(declaration, database) as operations:
            rows = operations.session.run(
                "initial_load_waiting",
                queue=queue.name,
                owners=owners,
                type=self.job_type or None,
                settled=self.allow_abandoned,
            )
        waiting = [row["owner"] for row in rows]
        if waiting:
            shown = ", ".join(waiting[:5]) + (", …" if len(waiting) > 5 else "")
            self.log.info("initial load of queue %s not complete for %s of %s owner(s): %s", queue.name, len(waiting), len(owners), shown)
            return False
        self.log.info("initial load of queue %s complete for %s owner(s)", queue.name, len(owners))
        return True

    def execute(self, context: Context) -> None:
        if not self.deferrable:
            super().execute(context=context)
        elif not self.poke(context):
            declaration, queue = locate_queue(self.synclane, self.synclane_queue)
            self.defer(
                trigger=InitialLoadTrigger(
                    synclane_conn_id=self.synclane_conn_id,
                    schema=declaration.schema,
                    queue=queue.name,
                    owners=self._owners(queue),
                    job_type=self.job_type or None,
                    settled=self.allow_abandoned,
                    poll_interval=self.poke_interval,
                ),
                method_name="execute_complete",
                timeout=timedelta(seconds=self.timeout),
            )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") != "success":
            raise AirflowException(f"waiting for the initial load of queue {self.synclane_queue!r} failed: {event.get('message')}")
        self.log.info("initial load of queue %s complete for %s owner(s)", self.synclane_queue, event.get("owners"))
