"""Watching the jobs table from an event loop: the async counterpart of :class:`~synclane_provider.core.db.store.Store`.

Triggers run in the triggerer's event loop, so everything here awaits: statements run on a
``psycopg.AsyncConnection`` that the caller's ``connect`` opens (the Airflow hook builds it from a
connection; nothing here knows Airflow), and waiting for a notification is a timed ``notifies()``. Errors
are judged and waited out exactly as a worker's session does (:mod:`~synclane_provider.core.db.transient`):
a broken connection is reopened (and LISTEN issued again), a passing server error (a cancelled statement,
a lock timeout, a deadlock) is retried on the same connection, anything else is raised. The caller looks
at the table again after every wake-up, so a notification lost while reconnecting costs nothing. A schema
without its jobs table (dropped to start afresh, not made yet, or between two of its migrations) is waited
for the same way, until whoever plans next has made it whole.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from synclane_provider.core.db.queries import statement
from synclane_provider.core.db.schema_versions import VERSION_TABLE, shipped_migrations
from synclane_provider.core.db.transient import CONNECTION_ERRORS, Backoff, passes
from synclane_provider.core.db.wakeups import channel, concerns
from synclane_provider.core.errors import DatabaseUnavailableError
from synclane_provider.core.records import Activity, Wakeup

SCHEMA_NOT_READY = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)
"""What a look at a schema that is not there (yet, or any more) raises: waited for like a database that is away."""

SCHEMA_BEING_MADE = psycopg.errors.UndefinedColumn
"""What a look between two migrations raises (each commits on its own, so the jobs table lacks the later ones'
columns): waited for only while the schema records fewer migrations than this release ships; on a whole schema
a missing column is a statement refused for what it is, and fails at once."""

AsyncConnect = Callable[[], Awaitable["psycopg.AsyncConnection[Any]"]]
"""Opens a new autocommit async connection to the database of the jobs table."""


class TableWatch:
    """An async connection to one schema's jobs table, optionally listening for wake-ups of one queue.

    Use as ``async with TableWatch(...) as watch``; the connection is closed on exit. Raises
    :class:`DatabaseUnavailableError` when the database stays unreachable (or keeps failing) for
    ``give_up_after`` seconds.
    """

    def __init__(
        self,
        *,
        connect: AsyncConnect,
        schema: str,
        queue: str,
        listen: bool,
        give_up_after: float,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        waiter: tuple[int, int] | None = None,
    ) -> None:
        """``waiter``: wait in turn with the other waiters holding this advisory key (see :meth:`wakeup`)."""
        self._connect = connect
        self._waiter = waiter
        self._schema = schema
        self._queue = queue
        self._listen = listen
        self._give_up_after = give_up_after
        self._log = log or logging.getLogger(__name__)
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def __aenter__(self) -> "TableWatch":
        await self._open(Backoff(give_up_after=self._give_up_after))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def activity(self, *, lane: str | None = None) -> Activity:
        """What :meth:`Store.activity <synclane_provider.core.db.store.Store.activity>` says, by the database's clock."""
        [row] = await self._rows("queue_activity", queue=self._queue, lane=lane, now=None)
        return Activity(**row)

    async def wakeup(self) -> Wakeup:
        """What :meth:`Store.wakeup <synclane_provider.core.db.store.Store.wakeup>` says, by the database's clock;
        with a ``waiter`` key, ``takeable`` only when it is this connection's turn among its holders."""
        key = self._waiter or (None, None)
        [row] = await self._rows(
            "worker_wakeup", queue=self._queue, now=None, waiter_class=key[0], waiter_object=key[1]
        )
        return Wakeup(**row)

    async def owners_still_loading(self, owners: Sequence[str], *, type: str | None, settled: bool) -> list[str]:
        rows = await self._rows(
            "initial_load_waiting", queue=self._queue, owners=list(owners), type=type, settled=settled
        )
        return [row["owner"] for row in rows]

    async def initial_loads_complete(self, *, type: str | None) -> list[str]:
        """The owners whose initial load (of ``type``, or of every type) is complete."""
        rows = await self._rows("initial_loads_complete", queue=self._queue, type=type)
        return [row["owner"] for row in rows]

    async def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """Run a named statement, waiting out passing errors and reconnecting while the database is away."""
        query = statement(name, self._schema)
        arguments = query.arguments(params)
        backoff = Backoff(give_up_after=self._give_up_after)
        while True:
            conn = self._conn
            assert conn is not None
            try:
                cur = await conn.execute(query.text, arguments)
                return cast(list[dict[str, Any]], await cur.fetchall())
            except psycopg.Error as exc:
                if not conn.closed and (
                    isinstance(exc, SCHEMA_NOT_READY)
                    or (isinstance(exc, SCHEMA_BEING_MADE) and await self._being_migrated(conn))
                ):
                    # Dropped to start afresh, or not made yet (or not whole yet): whoever plans next makes it.
                    await self._pause(backoff, exc, f"{name} (schema {self._schema!r} has no whole jobs table yet)")
                    continue
                if not passes(exc, connection_closed=conn.closed):
                    raise
                await self._pause(backoff, exc, name)
                if conn.closed:
                    await self._open(backoff)

    async def _being_migrated(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Whether the schema records fewer migrations than this release ships (or no version table yet)."""
        try:
            cur = await conn.execute(
                sql.SQL("SELECT count(*) AS applied FROM {}.{}").format(
                    sql.Identifier(self._schema), sql.Identifier(VERSION_TABLE)
                )
            )
            row = await cur.fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return True
        return row is not None and int(row["applied"]) < len(shipped_migrations())

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a notification about this queue. True if one came (or the connection was renewed).

        Notifications about other queues of the same table are skipped. A renewed connection counts as a
        wake-up: whatever was sent while it was down is found by the caller's next look at the table.
        """
        if not self._listen:
            await asyncio.sleep(max(seconds, 0))
            return False
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            conn = self._conn
            assert conn is not None
            try:
                async for note in conn.notifies(timeout=remaining, stop_after=1):
                    if concerns(note.payload, self._queue):
                        return True
            except CONNECTION_ERRORS as exc:
                backoff = Backoff(give_up_after=self._give_up_after)
                await self._pause(backoff, exc, "waiting for a notification")
                await self._open(backoff)
                return True
        return False

    async def _pause(self, backoff: Backoff, error: BaseException, what: str) -> None:
        wait = backoff.next()
        if wait is None:
            raise DatabaseUnavailableError(
                f"database unreachable for {self._give_up_after:.0f}s while watching queue {self._queue!r}: {error}"
            ) from error
        self._log.warning("database error during %s (%s); retrying in %.1fs", what, error, wait)
        await asyncio.sleep(wait)

    async def _open(self, backoff: Backoff) -> None:
        """A new connection (LISTENing if asked), retried with ``backoff`` while the database is away."""
        await self._close()
        while True:
            try:
                conn = await self._connect()
            except CONNECTION_ERRORS as exc:
                await self._pause(backoff, exc, "connecting")
                continue
            try:
                conn.row_factory = dict_row
                conn.cursor_factory = psycopg.AsyncRawCursor  # statements come with $n placeholders
                await conn.execute("SET TIME ZONE 'UTC'")  # times come back as timezone.utc
                if self._waiter is not None:  # held until the connection closes: in line while it waits
                    await conn.execute("SELECT pg_advisory_lock_shared($1::int, $2::int)", list(self._waiter))
                if self._listen:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(self._schema))))
            except CONNECTION_ERRORS as exc:
                await conn.close()
                await self._pause(backoff, exc, "listening")
                continue
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
            return

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection is a courtesy
                pass
