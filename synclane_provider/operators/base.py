"""What every SyncLane operator and sensor is given: a declaration, one of its queues, and a connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.sdk import BaseOperator

from synclane_provider.configured import declaration_argument
from synclane_provider.core import Operations, Queue, SyncLane
from synclane_provider.hooks.synclane import SyncLaneHook
from synclane_provider.locate import locate_queue


class QueueOperator(BaseOperator):
    """The base of SyncLane's operators and sensors: the arguments naming what they work on.

    The declaration is only imported, and the database only opened, when the task runs (:meth:`located`,
    :meth:`operations`), never when the DAG is parsed.

    :param declaration: import path of the declaration, ``"package.module:attribute"``; when omitted,
        ``[synclane] declaration`` of Airflow's configuration.
    :param synclane_queue: the queue (``queue`` is the executor's queue in Airflow).
    :param synclane_conn_id: Airflow connection to the database of the jobs table.
    :param synclane: the former name of ``declaration``, kept for one release with a deprecation warning.
    """

    queue_fields: tuple[str, ...] = ("declaration", "synclane_queue", "synclane_conn_id")
    """The templated fields every subclass has; a subclass's ``template_fields`` adds its own."""

    def __init__(
        self,
        *,
        declaration: str | None = None,
        synclane_queue: str,
        synclane_conn_id: str = SyncLaneHook.default_conn_name,
        synclane: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.declaration = declaration_argument(declaration, synclane)
        self.synclane_queue = synclane_queue
        self.synclane_conn_id = synclane_conn_id

    def located(self) -> tuple[SyncLane, Queue]:
        """The declaration and the queue, imported now."""
        return locate_queue(self.declaration, self.synclane_queue)

    @contextmanager
    def operations(self) -> Iterator[tuple[Operations, Queue]]:
        """The engine's operations on the table, and the queue, opened when a task runs."""
        declaration, queue = self.located()
        database = SyncLaneHook(synclane_conn_id=self.synclane_conn_id).get_database(declaration)
        with Operations(declaration, database) as operations:
            yield operations, queue
