"""The initial-load sensor's trigger: fires when the given owners' first loads are complete."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from synclane_provider.triggers.watch import TableWatch


class InitialLoadTrigger(BaseTrigger):
    """Polls until every one of ``owners`` has its initial jobs (of ``job_type``, or of every type) completed.

    An owner with nothing initial planned yet is not complete. With
    ``settled`` an abandoned initial job counts as done. Writes nothing;
    yields ``{"status": "success"}`` or ``{"status": "error", "message": ...}``.

    :param synclane_conn_id: Airflow connection to the database of the jobs table.
    :param schema: schema of the jobs table.
    :param queue: the queue.
    :param owners: owner ids to wait for.
    :param job_type: one job type, or None for every type.
    :param settled: count abandoned initial jobs as done.
    :param poll_interval: seconds between two looks at the table.
    :param give_up_after: seconds the database may stay unreachable before the trigger reports an error.
    """

    def __init__(
        self,
        *,
        synclane_conn_id: str,
        schema: str,
        queue: str,
        owners: list[str],
        job_type: str | None = None,
        settled: bool = False,
        poll_interval: float = 60.0,
        give_up_after: float = 300.0,
    ) -> None:
        super().__init__()
        self.synclane_conn_id = synclane_conn_id
        self.schema = schema
        self.queue = queue
        self.owners = list(owners)
        self.job_type = job_type
        self.settled = settled
        self.poll_interval = float(poll_interval)
        self.give_up_after = float(give_up_after)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "synclane_conn_id": self.synclane_conn_id,
                "schema": self.schema,
                "queue": self.queue,
                "owners": self.owners,
                "job_type": self.job_type,
                "settled": self.settled,
                "poll_interval": self.poll_interval,
                "give_up_after": self.give_up_after,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        event = await self._wait()
        yield TriggerEvent({"queue": self.queue, "owners": len(self.owners), **event})

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
                    waiting = await watch.all(
                        "initial_load_waiting",
                        queue=self.queue,
                        owners=self.owners,
                        type=self.job_type,
                        settled=self.settled,
                    )
                    if not waiting:
                        return {"status": "success"}
                    await watch.wait(self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - reported to the task, which fails with the message
            return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
