"""The assets operator: after a queue's mapped worker slots, one asset event per type that landed in the run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from synclane_provider.assets import alias, emit_landed
from synclane_provider.core.run.landed import Landed
from synclane_provider.operators.base import QueueOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class SyncLaneAssetsOperator(QueueOperator):
    """Emits what a worker DAG run's slots completed as Airflow asset events: one per job type, for all slots.

    Reads the slots' returned summaries (their ``landed``) from XCom, merges them per type and owner, and adds
    one event per type to the outlet alias ``synclane-<queue>``, for the asset
    ``synclane://<schema>/<queue>/<type>`` with ``extra`` naming the owners, their windows and record counts
    (see :mod:`synclane_provider.assets`). Types with nothing completed get no event. One task emitting for
    every slot is what makes this safe: slots emitting themselves end together (they run out of work at
    the same moment) and Airflow 3.3 fails one of two tasks creating an alias or asset row at once. Run it
    with ``trigger_rule="all_done"`` so that a failed slot does not hold back what the others landed.

    What a slot's failed try completed is not announced (the table has it; the retry starts afresh): the
    events are a wake-up with a summary, and a downstream DAG that must see every record reads the data.

    :param synclane_queue: the queue the slots worked.
    :param worker_task_id: the task id of the (mapped) worker operator.
    (The other parameters are :class:`~synclane_provider.operators.base.QueueOperator`'s; it reads XCom and
    opens no connection of its own.)
    """

    template_fields: Sequence[str] = QueueOperator.queue_fields
    ui_color = "#e8f4e1"

    def __init__(
        self,
        *,
        synclane_queue: str,
        worker_task_id: str = "work",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        outlets = kwargs.pop("outlets", None) or []
        # Declared when the DAG is parsed: Airflow records the alias then, and events only for declared outlets.
        super().__init__(
            synclane_queue=synclane_queue,
            outlets=[*(outlets if isinstance(outlets, list) else [outlets]), alias(synclane_queue)],
            **kwargs,
        )
        self.worker_task_id = worker_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        returned = context["ti"].xcom_pull(task_ids=self.worker_task_id, key="return_value")
        summaries = [returned] if isinstance(returned, dict) else list(returned or [])
        landed = Landed()
        for summary in summaries:
            if isinstance(summary, dict) and summary.get("landed"):
                landed.merge(Landed.from_dict(summary["landed"]))
        emitted = emit_landed(context, self.declaration, self.synclane_queue, landed, self.log)
        self.log.info(
            "queue %s: %s slot summary(ies) read, %s asset event(s) emitted",
            self.synclane_queue,
            len(summaries),
            emitted,
        )
        return {type_name: landed.extra(self.synclane_queue, type_name) for type_name in sorted(landed.by_type)}
