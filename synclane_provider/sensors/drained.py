"""Waits for a queue, or one lane of it, to have nothing due and nothing running."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException

from synclane_provider.core import Operations
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.locate import locate_queue
from synclane_provider.triggers.drained import DrainedTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class SyncLaneDrainedSensor(BaseSensorOperator):
    """Succeeds when no job of the queue (or of ``lane``) is running or due.

    Jobs waiting for a later time (a retry, the next recurring window) do not
    count. Returns at once when the queue is already drained; otherwise defers
    to a :class:`~synclane_provider.triggers.drained.DrainedTrigger`
    (``deferrable=True``) or pokes every ``poke_interval``.

    :param synclane: import path of the declaration, ``"package.module:attribute"``.
    :param synclane_queue: the queue (``queue`` is the executor's queue in Airflow).
    :param lane: one lane, or None for the whole queue.
    :param synclane_conn_id: Airflow connection to the database of the jobs table.
    :param deferrable: wait on the triggerer; defaults to ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = ("synclane", "synclane_queue", "lane", "synclane_conn_id")
    ui_color = "#f2e6d9"

    def __init__(
        self,
        *,
        synclane: str,
        synclane_queue: str,
        lane: str | None = None,
        synclane_conn_id: str = SyncLaneHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.synclane = synclane
        self.synclane_queue = synclane_queue
        self.lane = lane
        self.synclane_conn_id = synclane_conn_id
        self.deferrable = deferrable

    def _where(self) -> str:
        return f"queue {self.synclane_queue}" + (f" lane {self.lane}" if self.lane else "")

    def poke(self, context: Context) -> bool:
        declaration, queue = locate_queue(self.synclane, self.synclane_queue)
        database = SyncLaneHook(synclane_conn_id=self.synclane_conn_id).get_database(declaration)
        with Operations(declaration, database) as operations:
            activity = operations.activity(queue.name, lane=self.lane or None)
        if activity["running"] or activity["due"]:
            self.log.info("%s not drained: running=%s due=%s", self._where(), activity["running"], activity["due"])
            return False
        self.log.info("%s drained: nothing running or due", self._where())
        return True

    def execute(self, context: Context) -> None:
        if not self.deferrable:
            super().execute(context=context)
        elif not self.poke(context):
            declaration, queue = locate_queue(self.synclane, self.synclane_queue)
            self.defer(
                trigger=DrainedTrigger(
                    synclane_conn_id=self.synclane_conn_id,
                    schema=declaration.schema,
                    queue=queue.name,
                    lane=self.lane or None,
                    poll_interval=self.poke_interval,
                ),
                method_name="execute_complete",
                timeout=timedelta(seconds=self.timeout),
            )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") != "success":
            raise AirflowException(f"waiting for {self._where()} to drain failed: {event.get('message')}")
        self.log.info("%s drained: nothing running or due", self._where())
