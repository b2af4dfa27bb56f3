"""A worker process's few connections, lent statement by statement to the many jobs it runs.

A slot that runs hundreds of jobs at once spends about a millisecond of database time per page against the
hundreds its API takes: one connection per job would hold hundreds of the server's hundred-odd for nothing. So
the slot's jobs share a few :class:`~synclane_provider.core.db.database.Session` objects: each statement borrows
one, runs (reconnecting as a session does), and gives it back. The most recently returned session is lent first,
so a slot that needs one connection at a time opens only one; a session opens its connection when first lent.
A page whose rows land in the jobs database borrows one for its transaction (see
:class:`~synclane_provider.core.db.page_transaction.PageTransaction`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import Any

from synclane_provider.core.db.database import Database, Session


class Connections:
    """Sessions of one database, lent one statement at a time: what a :class:`~synclane_provider.core.db.store.Store`
    runs its statements through, as through one session."""

    def __init__(self, database: Database, *, size: int = 4, **options: Any) -> None:
        """``options`` are each :class:`Session`'s (its settings, stop flag, backoff)."""
        if size < 1:
            raise ValueError(f"connections must be at least 1, got {size}")
        self.database = database
        self.size = size
        self._sessions = [Session(database, **options) for _ in range(size)]
        self._idle: queue.LifoQueue[Session] = queue.LifoQueue()
        self._pages = threading.BoundedSemaphore(max(size - 1, 1))
        for session in reversed(self._sessions):
            self._idle.put(session)

    @property
    def lends_for_pages(self) -> bool:
        """Whether pages' transactions may borrow a session (see :meth:`borrow_for_page`): not when there is only one,
        which every statement needs."""
        return self.size > 1

    def borrow_for_page(self) -> Session:
        """A session of one's own for a page's transaction, until :meth:`give_back_from_page`.

        At most ``size - 1`` are lent so at once: a page holds its session from its first landed row until its
        cursor is saved in a step of the slot's, and that step, like every other, must always find one free.
        """
        self._pages.acquire()
        try:
            return self._idle.get()
        except BaseException:
            self._pages.release()
            raise

    def give_back_from_page(self, session: Session) -> None:
        self._idle.put(session)
        self._pages.release()

    @contextmanager
    def lent(self) -> Iterator[Session]:
        """A session of one's own until the block ends (waiting for one while all are lent)."""
        session = self._idle.get()
        try:
            yield session
        finally:
            self._idle.put(session)

    def run(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """Run the named statement on a lent session (see :meth:`Session.run`)."""
        with self.lent() as session:
            return session.run(name, **params)

    def one(self, name: str, **params: Any) -> dict[str, Any] | None:
        rows = self.run(name, **params)
        return rows[0] if rows else None

    @property
    def resent(self) -> int:
        """Statements any of the sessions sent again after a broken connection (see :attr:`Session.resent`)."""
        return sum(session.resent for session in self._sessions)

    @property
    def give_up_after(self) -> timedelta:
        return self._sessions[0].give_up_after

    @contextmanager
    def giving_up_after(self, limit: timedelta) -> Iterator[None]:
        """Within the block, every session gives up on an unreachable database after ``limit`` at most."""
        with ExitStack() as stack:
            for session in self._sessions:
                stack.enter_context(session.giving_up_after(limit))
            yield

    def close(self) -> None:
        """Close every session's connection (one in use closes once its statement is done); usable again after."""
        for session in self._sessions:
            session.close()
