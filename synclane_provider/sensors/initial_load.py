"""Waits for an owner's (or every owner's) first load of a queue to be complete."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from synclane_provider.core import Queue, SyncLane
from synclane_provider.core.declare.owners import owners_of
from synclane_provider.sensors.base import TableSensor
from synclane_provider.triggers.initial_load import InitialLoadTrigger, first_part

if TYPE_CHECKING:
    from airflow.sdk import Context


class SyncLaneInitialLoadSensor(TableSensor):
    """Succeeds when the initial jobs (history slices, first snapshots) of ``owner_id`` are all completed.

    Without ``owner_id``, every owner that the queue's owner source lists must be
    complete; an owner with nothing planned yet is not. Returns at once when
    that already holds; otherwise defers to an
    :class:`~synclane_provider.triggers.initial_load.InitialLoadTrigger`
    (``deferrable=True``) or pokes every ``poke_interval``. The trigger carries
    only the owners still loading, and of those at most a bounded part: when
    that part is complete the sensor looks at all of them again, and defers for
    the next part if some are still loading.

    :param owner_id: one owner, or None for every owner (``owner`` is the task's owner in Airflow).
    :param job_type: only this job type's initial jobs, or None for every type.
    :param allow_abandoned: count abandoned initial jobs as done (the load is settled, not complete).
    (The other parameters are :class:`~synclane_provider.sensors.base.TableSensor`'s.)
    """

    template_fields: Sequence[str] = (*TableSensor.queue_fields, "owner_id", "job_type")

    def __init__(
        self,
        *,
        owner_id: str | None = None,
        job_type: str | None = None,
        allow_abandoned: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.owner_id = owner_id
        self.job_type = job_type
        self.allow_abandoned = allow_abandoned
        self._still_loading: list[str] | None = None

    def waiting_for(self) -> str:
        who = f"owner {self.owner_id}" if self.owner_id else "every owner"
        return f"the initial load of queue {self.synclane_queue} for {who}"

    def _owners(self, queue: Queue) -> list[str]:
        if self.job_type:
            queue.job_type(self.job_type)  # an unknown type fails clearly instead of waiting forever
        return [self.owner_id] if self.owner_id else [owner.id for owner in owners_of(queue)]

    def poke(self, context: Context) -> bool:
        with self.operations() as (operations, queue):
            owners = self._owners(queue)
            waiting = operations.owners_still_loading(
                queue.name, owners, type=self.job_type or None, settled=self.allow_abandoned
            )
        self._still_loading = waiting
        if waiting:
            shown = ", ".join(waiting[:5]) + (", …" if len(waiting) > 5 else "")
            self.log.info(
                "initial load of queue %s not complete for %s of %s owner(s): %s",
                queue.name,
                len(waiting),
                len(owners),
                shown,
            )
            return False
        self.log.info("initial load of queue %s complete for %s owner(s)", queue.name, len(owners))
        return True

    def trigger(self, declaration: SyncLane, queue: Queue) -> InitialLoadTrigger:
        waiting = self._still_loading if self._still_loading is not None else self._owners(queue)
        part = first_part(waiting)
        return InitialLoadTrigger(
            owners=part,
            job_type=self.job_type or None,
            settled=self.allow_abandoned,
            more=len(waiting) - len(part),
            **self.watched_table(declaration, queue),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") == "success" and event.get("more"):
            # The trigger waited for the first part of the owners: look at them all again, and wait on.
            self.log.info(
                "initial load of queue %s complete for %s owner(s); %s more to look at",
                self.synclane_queue,
                event.get("owners"),
                event.get("more"),
            )
            self.execute(context)
            return
        super().execute_complete(context, event)
