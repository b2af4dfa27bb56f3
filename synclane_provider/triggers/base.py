"""What SyncLane's triggers share: the table they watch, the waiting loop, and their one event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from synclane_provider.core.db.watch import TableWatch
from synclane_provider.hooks.synclane import SyncLaneHook


class TableTrigger(BaseTrigger):
    """Looks at the jobs table until what it waits for holds, then yields one event and ends. Writes nothing.

    A subclass says what it waits for in :meth:`look`, which returns the
    event's payload when the wait is over, or ``None`` and how long to sleep
    before the next look. With ``listens`` a NOTIFY about the queue ends the
    sleep early. A database that stays unreachable for ``give_up_after``
    seconds ends the wait with ``{"status": "error", "message": ...}``. The
    connection is closed before the event goes out.

    Subclasses name their own constructor arguments in :meth:`own_kwargs`, so
    that :meth:`serialize` gives back exactly what the constructor took.

    :param synclane_conn_id: Airflow connection to the database of the jobs table.
    :param schema: schema of the jobs table.
    :param queue: the queue.
    :param poll_interval: longest sleep between two looks at the table, in seconds.
    :param give_up_after: seconds the database may stay unreachable before the trigger reports an error.
    """

    listens = False

    def __init__(
        self,
        *,
        synclane_conn_id: str,
        schema: str,
        queue: str,
        poll_interval: float,
        give_up_after: float = 300.0,
    ) -> None:
        super().__init__()
        self.synclane_conn_id = synclane_conn_id
        self.schema = schema
        self.queue = queue
        self.poll_interval = float(poll_interval)
        self.give_up_after = float(give_up_after)

    def own_kwargs(self) -> dict[str, Any]:
        """The subclass's own constructor arguments, as given."""
        return {}

    def event_context(self) -> dict[str, Any]:
        """What every event of this trigger says besides its status."""
        return {"queue": self.queue}

    async def look(self, watch: TableWatch) -> tuple[dict[str, Any] | None, float]:
        raise NotImplementedError

    def waiter(self) -> tuple[int, int] | None:
        """The advisory key this trigger waits in turn under with others like it (see :class:`TableWatch`);
        None: it waits alone."""
        return None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "synclane_conn_id": self.synclane_conn_id,
                "schema": self.schema,
                "queue": self.queue,
                **self.own_kwargs(),
                "poll_interval": self.poll_interval,
                "give_up_after": self.give_up_after,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        outcome = await self._wait()  # the connection is closed before the event goes out
        yield TriggerEvent({**self.event_context(), **outcome})

    async def _wait(self) -> dict[str, Any]:
        try:
            async with TableWatch(
                connect=SyncLaneHook(synclane_conn_id=self.synclane_conn_id).connect_async,
                schema=self.schema,
                queue=self.queue,
                listen=self.listens,
                give_up_after=self.give_up_after,
                log=self.log,
                waiter=self.waiter(),
            ) as watch:
                while True:
                    # With LISTEN on before this look, nothing sent after it is missed.
                    outcome, sleep = await self.look(watch)
                    if outcome is not None:
                        return outcome
                    await watch.wait(max(sleep, 0.01))
        except Exception as exc:  # noqa: BLE001 - reported to the task, which fails with the message
            return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
