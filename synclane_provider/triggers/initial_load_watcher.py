"""The event-driven option for downstream DAGs: an asset watcher's trigger that fires as owners finish their first load.

Used through :func:`synclane_provider.assets.initial_load_asset`: a DAG scheduled on that asset runs once per
batch of owners whose initial load (history slices, or a snapshot's first load) has just completed, with the
owners in the event, without any task of its own waiting. Workers send a NOTIFY when they complete an
initial job, so the trigger looks at once; ``poll_interval`` bounds the wait when a notification is lost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from synclane_provider.core.db.watch import TableWatch
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.triggers.base import TableTrigger


class InitialLoadsTrigger(TableTrigger, BaseEventTrigger):
    """Yields ``{"status": "success", "queue", "type", "owners": [...]}`` each time owners' initial loads complete.

    Unlike the sensors' triggers it runs on: the owners complete when it starts are its baseline, and every
    look (on a NOTIFY, or after ``poll_interval``) yields the owners that joined since. Owners that complete
    while no trigger runs (the triggerer restarting) are in the next baseline and get no event: an asset event
    is a wake-up for downstream work, which should read what it needs (``initial_progress``) rather than count
    on one event per owner. A database that stays away for ``give_up_after`` yields
    ``{"status": "error", "message": ...}`` and ends. Writes nothing.

    :param job_type: one job type, or None for every type.
    (The other parameters are :class:`TableTrigger`'s.)
    """

    listens = True

    def __init__(self, *, job_type: str | None = None, poll_interval: float = 60.0, **table: Any) -> None:
        super().__init__(poll_interval=poll_interval, **table)
        self.job_type = job_type

    def own_kwargs(self) -> dict[str, Any]:
        return {"job_type": self.job_type}

    def event_context(self) -> dict[str, Any]:
        return {"queue": self.queue, "type": self.job_type}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            async with TableWatch(
                connect=SyncLaneHook(synclane_conn_id=self.synclane_conn_id).connect_async,
                schema=self.schema,
                queue=self.queue,
                listen=True,
                give_up_after=self.give_up_after,
                log=self.log,
            ) as watch:
                # LISTEN is on before the baseline is read: a load completing after it is never missed.
                known = set(await watch.initial_loads_complete(type=self.job_type))
                while True:
                    await watch.wait(self.poll_interval)
                    complete = set(await watch.initial_loads_complete(type=self.job_type))
                    new, known = sorted(complete - known), complete
                    if new:
                        self.log.info("initial load complete in queue %s: %s", self.queue, ", ".join(new))
                        yield TriggerEvent({**self.event_context(), "status": "success", "owners": new})
        except Exception as exc:  # noqa: BLE001 - reported as the trigger's last event
            yield TriggerEvent({**self.event_context(), "status": "error", "message": f"{type(exc).__name__}: {exc}"})
