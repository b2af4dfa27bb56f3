"""Waits for a queue, or one lane of it, to have nothing due and nothing running."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from synclane_provider.core import Queue, SyncLane
from synclane_provider.sensors.base import TableSensor
from synclane_provider.triggers.drained import DrainedTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class SyncLaneDrainedSensor(TableSensor):
    """Succeeds when no job of the queue (or of ``lane``) is running or due.

    Jobs waiting for a later time (a retry, the next recurring window) do not
    count. Returns at once when the queue is already drained; otherwise defers
    to a :class:`~synclane_provider.triggers.drained.DrainedTrigger`
    (``deferrable=True``) or pokes every ``poke_interval``.

    :param lane: one lane, or None for the whole queue.
    (The other parameters are :class:`~synclane_provider.sensors.base.TableSensor`'s.)
    """

    template_fields: Sequence[str] = (*TableSensor.queue_fields, "lane")

    def __init__(self, *, lane: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lane = lane

    def waiting_for(self) -> str:
        return f"queue {self.synclane_queue}" + (f" lane {self.lane}" if self.lane else "") + " to drain"

    def poke(self, context: Context) -> bool:
        with self.operations() as (operations, queue):
            activity = operations.activity(queue.name, lane=self.lane or None)
        if not activity.drained:
            self.log.info(
                "not drained yet: %s (running=%s, due=%s)", self.waiting_for(), activity.running, activity.due
            )
            return False
        self.log.info("drained: %s", self.waiting_for())
        return True

    def trigger(self, declaration: SyncLane, queue: Queue) -> DrainedTrigger:
        return DrainedTrigger(lane=self.lane or None, **self.watched_table(declaration, queue))
