"""One LISTEN connection per worker process, waking its slots of many jobs when work may have come.

A slot of many jobs whose last take found nothing waits for its running jobs to end; meanwhile a job may be
inserted, requeued or handed back, and its idle seats should take it at once rather than at their next poll. The
table says so on its channel (``NOTIFY``, see :mod:`~synclane_provider.core.db.wakeups`). One connection per
process and jobs table listens for every slot of the process: a slot registers a wake-up for its queue, and each
notification for that queue calls it. A notification is a shortcut, never the only way work is found: the
slot also looks again at its poll interval, so a notification lost while the connection was being renewed costs
at most one poll (a renewed connection wakes every slot for good measure).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable

from psycopg import sql

from synclane_provider.core.db.database import Database
from synclane_provider.core.db.transient import CONNECTION_ERRORS, Backoff, describe
from synclane_provider.core.db.wakeups import channel, concerns

log = logging.getLogger(__name__)

LOOK_EVERY = 0.5
"""Longest wait for a notification before the listener looks whether it should close, in seconds."""

_lock = threading.Lock()
_listeners: weakref.WeakKeyDictionary[Database, Listener] = weakref.WeakKeyDictionary()


def listener(database: Database) -> Listener:
    """This process's listener on ``database``'s jobs table (made with its first slot)."""
    with _lock:
        found = _listeners.get(database)
        if found is None:
            found = _listeners[database] = Listener(database)
        return found


class Listener:
    """A thread LISTENing on one jobs table's channel, calling the wake-ups slots registered for a queue."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._lock = threading.Lock()
        self._events: defaultdict[str, set[Callable[[], None]]] = defaultdict(set)
        self._thread: threading.Thread | None = None
        self.connections = 0
        """Connections opened so far (one, unless the database went away meanwhile)."""

    def register(self, queue: str, event: Callable[[], None]) -> None:
        """Call ``event`` whenever a notification may concern ``queue``, until :meth:`unregister` (on the
        listener's thread: it must return at once)."""
        with self._lock:
            self._events[queue].add(event)
            if self._thread is None:
                self._thread = threading.Thread(target=self._listen, name="synclane-listener", daemon=True)
                self._thread.start()

    def unregister(self, queue: str, event: Callable[[], None]) -> None:
        """Stop waking ``event``; the connection closes once no slot is registered."""
        with self._lock:
            self._events[queue].discard(event)
            if not self._events[queue]:
                del self._events[queue]

    def _registered(self) -> bool:
        with self._lock:
            if self._events:
                return True
            self._thread = None  # the next registration starts a new thread
            return False

    def _wake(self, payload: str | None) -> None:
        """Set the events of every queue the payload may concern (every queue's, for None)."""
        with self._lock:
            for queue, events in self._events.items():
                if payload is None or concerns(payload, queue):
                    for event in events:
                        event()

    def _listen(self) -> None:
        backoff = Backoff()
        while self._registered():
            try:
                with self._database.connect() as conn:
                    self.connections += 1
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(self._database.schema))))
                    self._wake(None)  # whatever was sent before this connection listened
                    backoff = Backoff()
                    while self._registered():
                        for note in conn.notifies(timeout=LOOK_EVERY):
                            self._wake(note.payload)
            except Exception as exc:  # noqa: BLE001 - the slots poll meanwhile; a listener that gave up would not
                wait = backoff.next() or Backoff.cap
                what = describe(exc) if isinstance(exc, CONNECTION_ERRORS) else repr(exc)
                log.warning("listening for wake-ups failed (%s); listening again in %.1fs", what, wait)
                time.sleep(wait)
