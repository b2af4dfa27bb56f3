"""What SyncLane's sensors share: the declaration they look at, and returning at once or deferring."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException

from synclane_provider.core import Queue, SyncLane
from synclane_provider.operators.base import QueueOperator
from synclane_provider.triggers.base import TableTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class TableSensor(QueueOperator, BaseSensorOperator):
    """A sensor on the jobs table: :meth:`poke` looks once; with ``deferrable`` it returns at once when the
    condition already holds and otherwise defers to the trigger of :meth:`trigger` (never holding a worker
    slot while waiting), else it pokes every ``poke_interval``.

    :param deferrable: wait on the triggerer; defaults to ``[operators] default_deferrable``.
    (The other parameters are :class:`~synclane_provider.operators.base.QueueOperator`'s.)
    """

    ui_color = "#f2e6d9"

    def __init__(
        self,
        *,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deferrable = deferrable

    def waiting_for(self) -> str:
        """What the sensor waits for, for its log lines and errors."""
        raise NotImplementedError

    def trigger(self, declaration: SyncLane, queue: Queue) -> TableTrigger:
        raise NotImplementedError

    def watched_table(self, declaration: SyncLane, queue: Queue) -> dict[str, Any]:
        """The trigger arguments every sensor gives alike: which table and queue, looked at how often."""
        return {
            "synclane_conn_id": self.synclane_conn_id,
            "schema": declaration.schema,
            "queue": queue.name,
            "poll_interval": self.poke_interval,
        }

    def execute(self, context: Context) -> None:
        if not self.deferrable:
            super().execute(context=context)
        elif not self.poke(context):
            declaration, queue = self.located()
            self.defer(
                trigger=self.trigger(declaration, queue),
                method_name="execute_complete",
                timeout=timedelta(seconds=self.timeout),
            )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") != "success":
            raise AirflowException(f"waiting for {self.waiting_for()} failed: {event.get('message')}")
        self.log.info("done waiting for %s", self.waiting_for())
