"""The idle worker's trigger: wakes its task when a job of the queue can be taken, or at its deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from synclane_provider.triggers.watch import TableWatch


class JobDueTrigger(BaseTrigger):
    """Waits until a take would find a job of ``queue`` (a due job in a free lane, or an expired lease).

    Woken by LISTEN/NOTIFY when jobs are inserted, requeued or handed back, by
    the earliest ``next_run_at`` (or lease expiry) of the queue, and at least
    every ``poll_interval`` seconds as a safety net for changes made by hand.
    It writes nothing. It yields one event:

    * ``{"status": "due"}`` - a job can be taken now;
    * ``{"status": "timeout"}`` - ``until`` passed with nothing to take;
    * ``{"status": "error", "message": ...}`` - the database stayed unreachable.

    Every event carries ``carry`` back unchanged: the worker's loop state
    (totals, start time), which must survive the deferral whatever the
    runtime does with the task's own resume kwargs.

    :param synclane_conn_id: Airflow connection to the database of the jobs table.
    :param schema: schema of the jobs table.
    :param queue: queue whose jobs wake the worker.
    :param until: aware datetime at which to give up waiting (the worker's idle or run deadline).
    :param poll_interval: longest sleep between two looks at the table, in seconds.
    :param give_up_after: seconds the database may stay unreachable before the trigger reports an error.
    :param carry: JSON-serializable state handed back in the event.
    """

    def __init__(
        self,
        *,
        synclane_conn_id: str,
        schema: str,
        queue: str,
        until: datetime,
        poll_interval: float,
        give_up_after: float = 300.0,
        carry: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if until.tzinfo is None:
            raise ValueError(f"until must be timezone-aware, got {until!r}")
        self.synclane_conn_id = synclane_conn_id
        self.schema = schema
        self.queue = queue
        self.until = until
        self.poll_interval = float(poll_interval)
        self.give_up_after = float(give_up_after)
        self.carry = carry or {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "synclane_conn_id": self.synclane_conn_id,
                "schema": self.schema,
                "queue": self.queue,
                "until": self.until,
                "poll_interval": self.poll_interval,
                "give_up_after": self.give_up_after,
                "carry": self.carry,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        event = await self._wait()  # the connection is closed before the event goes out
        yield TriggerEvent({"queue": self.queue, "carry": self.carry, **event})

    async def _wait(self) -> dict[str, Any]:
        try:
            async with TableWatch(
                conn_id=self.synclane_conn_id,
                schema=self.schema,
                queue=self.queue,
                listen=True,
                give_up_after=self.give_up_after,
                log=self.log,
            ) as watch:
                while True:
                    # LISTEN is on before this look, so nothing sent after it is missed.
                    state = await watch.one("worker_wakeup", queue=self.queue, now=None)
                    assert state is not None
                    if state["takeable"]:
                        return {"status": "due"}
                    left = (self.until - datetime.now(timezone.utc)).total_seconds()
                    if left <= 0:
                        return {"status": "timeout"}
                    sleep = min(left, self.poll_interval)
                    if state["wake_at"] is not None:
                        sleep = min(sleep, (state["wake_at"] - state["now"]) / timedelta(seconds=1))
                    await watch.wait(max(sleep, 0.01))
        except Exception as exc:  # noqa: BLE001 - reported to the task, which fails with the message
            return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
