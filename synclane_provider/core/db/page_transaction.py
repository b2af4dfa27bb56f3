"""A worker slot's page transaction: a page's rows, landed in the jobs database, commit with its cursor or not at all.

:meth:`~synclane_provider.core.land.destination.Destination.land` writes a page's rows on this transaction's connection
when its table is in the jobs database; the worker (``core/run/runner.py``, ``core/run/slot.py``) then saves the
job's cursor in the same transaction, fenced on its lease, and commits, or rolls back when the page failed or the
lease was lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from synclane_provider.core.db.connections import Connections
from synclane_provider.core.db.database import Database, Session
from synclane_provider.core.db.store import Finish, SavedPage, Store

T = TypeVar("T")


class PageTransaction:
    """A worker slot's connection to the jobs database for landing pages, and the transaction of the page in flight.

    The first :meth:`Destination.land` of a page opens the transaction (and, the first time, the connection); the
    worker then saves the job's cursor in it and commits (:meth:`save_page`, :meth:`finish`), or rolls it back
    when the page failed or the lease was lost. The rows and the cursor commit together, or neither does.
    """

    def __init__(self, database: Database, connections: Connections | None = None) -> None:
        """``connections``: a slot of many jobs' shared ones, from which each page's transaction borrows a session
        (given back as it commits or rolls back); without them (or with only one), the transaction has a
        connection of its own, kept from page to page."""
        self._database = database
        self._lender = connections if connections is not None and connections.lends_for_pages else None
        self._lent: Session | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self.open = False
        """Whether a page wrote in the transaction, which is still to commit or roll back."""

    def connection(self) -> psycopg.Connection[Any]:
        """The connection, in the page's transaction (opened by its first statement)."""
        if self._conn is None or self._conn.closed:
            self._conn = self._open()
            self._conn.autocommit = False
        self.open = True
        return self._conn

    def _open(self) -> psycopg.Connection[Any]:
        if self._lender is None:
            return self._database.connect()
        if self._lent is None:
            self._lent = self._lender.borrow_for_page()
        try:
            return self._lent.connection()
        except BaseException:
            self._give_back()
            raise

    def _give_back(self) -> None:
        """Return a borrowed session, its connection back in autocommit (or closed, when it broke)."""
        lent, self._lent = self._lent, None
        if lent is None or self._lender is None:
            return
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                conn.autocommit = True
            except psycopg.Error:
                conn.close()
        self._lender.give_back_from_page(lent)

    def store(self) -> Store:
        """The jobs table inside the page's transaction: a statement that fails is never sent again on another
        connection (the rows it should commit with would be lost), it fails the page."""
        assert self._conn is not None
        return Store(Session.pinned(self._database, self._conn))

    def save_page(self, job_id: int, **values: Any) -> SavedPage | None:
        """Save the cursor in the page's transaction and commit it; None (nothing committed) when the lease is lost."""
        with self._undone_on_error():
            return self._committed(self.store().save_page(job_id, **values))

    def finish(self, finish: Finish, **values: Any) -> Finish | None:
        """Write how the job ended in the page's transaction and commit it; None (nothing committed) when the lease
        is lost. Takes no next job: a lost race for a lane slot would undo the page."""
        with self._undone_on_error():
            return self._committed(self.store().finish_and_take(finish=finish, take=False, **values).written)

    @contextmanager
    def _undone_on_error(self) -> Iterator[None]:
        """A write that raised leaves nothing of the page: its rows are rolled back with it."""
        try:
            yield
        except BaseException:
            self.rollback()
            raise

    def _committed(self, written: T | None) -> T | None:
        """Commit the page with what was written, which found the lease still this worker's; roll it back when the
        write found the lease lost (None)."""
        assert self._conn is not None
        if written is None:
            self.rollback()
        else:
            self._conn.commit()
            self.open = False
            self._give_back()
        return written

    def rollback(self) -> None:
        """Undo the page's writes (a failed page, a lost lease); a broken connection is dropped."""
        self.open = False
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.rollback()
            except psycopg.Error:
                self._conn.close()
        self._give_back()

    def abandon(self) -> None:
        """Leave the connection to a page left behind, still running on it: it is never committed, and the next
        page opens a connection of its own. A borrowed one is closed under it (the page's next statement fails)
        and its session given back, to connect afresh."""
        self.open = False
        if self._lent is not None and self._conn is not None:
            self._conn.close()
            self._give_back()
        self._conn = None

    def close(self) -> None:
        if self._lent is not None:
            self.rollback()
        conn, self._conn, self.open = self._conn, None, False
        if conn is not None:
            conn.close()
