"""The assets operator: announces what a queue completed since its last announcement, one asset event per type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from synclane_provider.assets import alias, emit_arrivals
from synclane_provider.operators.base import QueueOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class SyncLaneAssetsOperator(QueueOperator):
    """Emits what a queue's jobs completed since the last announcement as Airflow asset events: one per job type.

    Reads the completions from the jobs table (:meth:`Operations.announce
    <synclane_provider.core.ops.operations.Operations.announce>`), whichever worker completed them, and adds one
    event per type to the outlet alias ``synclane-<queue>``, for the asset ``synclane://<schema>/<queue>/<type>``
    with ``extra`` naming the owners, their windows and record counts (see :mod:`synclane_provider.assets`).
    Types with nothing completed get no event. The example planning DAG runs it beside the planner, every plan
    interval, so that downstream DAGs hear of new data within a minute or so of the work however long a worker
    slot runs. Each completion is announced once: the queue's mark in the table moves with every run.

    :param synclane_queue: the queue whose completions to announce.
    :param worker_task_id: no longer read (the completions come from the table); kept so that DAG files that
        placed this task after the worker slots still parse.
    (The other parameters are :class:`~synclane_provider.operators.base.QueueOperator`'s.)
    """

    template_fields: Sequence[str] = QueueOperator.queue_fields
    ui_color = "#e8f4e1"

    def __init__(
        self,
        *,
        synclane_queue: str,
        worker_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")  # placed after worker slots, a failed slot holds nothing back
        outlets = kwargs.pop("outlets", None) or []
        # Declared when the DAG is parsed: Airflow records the alias then, and events only for declared outlets.
        super().__init__(
            synclane_queue=synclane_queue,
            outlets=[*(outlets if isinstance(outlets, list) else [outlets]), alias(synclane_queue)],
            **kwargs,
        )
        self.worker_task_id = worker_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        with self.operations() as (operations, queue):
            arrivals = operations.announce(queue.name)
        emitted = emit_arrivals(context, self.declaration, queue.name, arrivals, self.log)
        self.log.info("queue %s: %s asset event(s) emitted", queue.name, emitted)
        return {type_name: arrivals.extra(queue.name, type_name) for type_name in sorted(arrivals.by_type)}
