"""One async connection to the jobs table for a trigger: named statements, LISTEN, and surviving a lost connection.

Triggers run in the triggerer's event loop, so everything here awaits: the
connection details come from ``aget_connection``, the statements run on a
``psycopg.AsyncConnection``, and waiting for a notification is a timed
``notifies()``. A dropped connection is reopened with backoff (and LISTEN
issued again); the caller re-checks the table after every wake-up, so a
notification lost while reconnecting costs nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from synclane_provider.core.database import CONNECTION_ERRORS
from synclane_provider.core.errors import DatabaseUnavailableError
from synclane_provider.core.queries import statement
from synclane_provider.core.wakeups import channel, concerns
from synclane_provider.hooks.synclane import SyncLaneHook

FIRST_BACKOFF = 0.1
MAX_BACKOFF = 5.0


class TableWatch:
    """An async connection to one schema's jobs table, optionally listening for wake-ups of one queue.

    Use as ``async with TableWatch(...) as watch``; the connection is closed on
    exit. Raises :class:`DatabaseUnavailableError` when the database stays
    unreachable for ``give_up_after`` seconds.
    """

    def __init__(
        self,
        *,
        conn_id: str,
        schema: str,
        queue: str,
        listen: bool,
        give_up_after: float,
        log: logging.Logger | None = None,
    ) -> None:
        self._hook = SyncLaneHook(synclane_conn_id=conn_id)
        self._schema = schema
        self._queue = queue
        self._listen = listen
        self._give_up_after = give_up_after
        self._log = log or logging.getLogger(__name__)
        self._conn: psycopg.AsyncConnection | None = None

    async def __aenter__(self) -> "TableWatch":
        await self._reconnect(None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def one(self, name: str, **params: Any) -> dict[str, Any] | None:
        rows = await self.all(name, **params)
        return rows[0] if rows else None

    async def all(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """Run a named statement of ``queries.sql``, reconnecting while the database is away."""
        query = statement(name, self._schema)
        arguments = query.arguments(params)
        while True:
            try:
                assert self._conn is not None
                cur = await self._conn.execute(query.text, arguments)
                return await cur.fetchall()
            except CONNECTION_ERRORS as exc:
                await self._reconnect(exc)

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a notification about this queue. True if one came (or the connection was renewed).

        Notifications about other queues of the same table are skipped. A
        renewed connection counts as a wake-up: whatever was sent while it was
        down is found by the caller's next look at the table.
        """
        if not self._listen:
            await asyncio.sleep(max(seconds, 0))
            return False
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                assert self._conn is not None
                async for note in self._conn.notifies(timeout=remaining, stop_after=1):
                    if concerns(note.payload, self._queue):
                        return True
            except CONNECTION_ERRORS as exc:
                await self._reconnect(exc)
                return True
        return False

    async def _reconnect(self, error: BaseException | None) -> None:
        await self._close()
        started = time.monotonic()
        delay = FIRST_BACKOFF
        while True:
            if error is not None:
                if time.monotonic() - started + delay > self._give_up_after:
                    raise DatabaseUnavailableError(
                        f"database unreachable for {self._give_up_after:.0f}s while watching queue {self._queue!r}: {error}"
                    ) from error
                self._log.warning("database connection lost (%s); retrying in %.1fs", error, delay)
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, MAX_BACKOFF)
            try:
                conn = await self._hook.connect_async()
                conn.row_factory = dict_row
                conn.cursor_factory = psycopg.AsyncRawCursor  # statements come with $n placeholders
                if self._listen:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(self._schema))))
                self._conn = conn
                return
            except CONNECTION_ERRORS as exc:
                error = exc

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection is a courtesy
                pass
