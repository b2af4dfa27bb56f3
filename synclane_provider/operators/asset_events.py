"""The assets operator: after a queue's mapped worker slots, one asset event per type that landed in the run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from synclane_provider.assets import alias, emit_landed
from synclane_provider.configured import declaration_argument
from synclane_provider.core.run.landed import Landed

if TYPE_CHECKING:
    from airflow.sdk import Context


class SyncLaneAssetsOperator(BaseOperator):
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

    :param declaration: import path of the declaration, ``"package.module:attribute"``.
    :param synclane_queue: the queue the slots worked.
    :param worker_task_id: the task id of the (mapped) worker operator.
    """

    template_fields: Sequence[str] = ("declaration", "synclane_queue")
    ui_color = "#e8f4e1"

    def __init__(
        self,
        *,
        declaration: str | None = None,
        synclane_queue: str,
        worker_task_id: str = "work",
        synclane: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        outlets = kwargs.pop("outlets", None) or []
        # Declared when the DAG is parsed: Airflow records the alias then, and events only for declared outlets.
        super().__init__(
            outlets=[*(outlets if isinstance(outlets, list) else [outlets]), alias(synclane_queue)], **kwargs
        )
        self.declaration = declaration_argument(declaration, synclane)
        self.synclane_queue = synclane_queue
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
