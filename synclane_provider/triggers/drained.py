"""The drained sensor's trigger: fires when a queue (or one lane of it) has nothing due and nothing running."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from synclane_provider.triggers.watch import TableWatch


class DrainedTrigger(BaseTrigger):
    """Polls until no job of ``queue`` (of ``lane``, if given) is running or due.

    Jobs waiting for a later ``next_run_at`` (a retry in an hour, the next
    recurring window) do not keep a queue from being drained. Writes nothing;
    yields ``{"status": "success"}`` or ``{"status": "error", "message": ...}``.

    :param synclane_conn_id: Airflow connection to the database of the jobs table.
    :param schema: schema of the jobs table.
    :param queue: the queue.
    :param lane: one lane of the queue, or None for the whole queue.
    :param poll_interval: seconds between two looks at the table.
    :param give_up_after: seconds the database may stay unreachable before the trigger reports an error.
    """

    def __init__(
        self,
        *,
        synclane_conn_id: str,
        schema: str,
        queue: str,
        lane: str | None = None,
        poll_interval: float = 60.0,
        give_up_after: float = 300.0,
    ) -> None:
        super().__init__()
        self.synclane_conn_id = synclane_conn_id
        self.schema = schema
        self.queue = queue
        self.lane = lane
        self.poll_interval = float(poll_interval)
        self.give_up_after = float(give_up_after)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "synclane_conn_id": self.synclane_conn_id,
                "schema": self.schema,
                "queue": self.queue,
                "lane": self.lane,
                "poll_interval": self.poll_interval,
                "give_up_after": self.give_up_after,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        event = await self._wait()
        yield TriggerEvent({"queue": self.queue, "lane": self.lane, **event})

    async def _wait(self) -> dict[str, Any]:
        try:
            async with TableWatch(
                conn_id=self.synclane_conn_id,
                schema=self.schema,
                queue=self.queue,
                listen=False,
                give_up_after=self.give_up_after,
                log=self.log,
            ) as watch:
                while True:
                    activity = await watch.one("queue_activity", queue=self.queue, lane=self.lane, now=None)
                    assert activity is not None
                    if not (activity["running"] or activity["due"]):
                        return {"status": "success"}
                    await watch.wait(self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - reported to the task, which fails with the message
            return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
