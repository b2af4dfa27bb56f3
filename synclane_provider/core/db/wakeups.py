"""LISTEN/NOTIFY: telling idle workers of a queue that there may be work.

Notifications are a shortcut, never the only way work is found: a worker or
trigger also wakes for the earliest ``next_run_at``, so a lost notification
(or a fix made by hand with SQL) delays work by at most one poll.
"""

from __future__ import annotations

import functools
import hashlib

MAX_PAYLOAD_BYTES = 7000  # PostgreSQL refuses payloads of 8000 bytes or more
MAX_CHANNEL_BYTES = 63  # PostgreSQL refuses longer channel names in pg_notify (and cuts them in LISTEN)


@functools.cache  # asked for by every finish of a worker
def channel(schema: str) -> str:
    """The channel of one jobs table; it is passed as a value to pg_notify, and quoted for LISTEN.

    ``synclane.<schema>``; for a schema name too long for that, its start and a digest of the whole name,
    so that two schemas never share a channel.
    """
    name = f"synclane.{schema}"
    if len(name.encode("utf-8")) <= MAX_CHANNEL_BYTES:
        return name
    digest = hashlib.sha256(schema.encode("utf-8")).hexdigest()[:16]
    return f"synclane.{schema[:36]}.{digest}"


@functools.cache
def payload(queue: str) -> str:
    """The queue name, or empty (meaning "any queue") when the name is too long to send."""
    return queue if len(queue.encode("utf-8")) < MAX_PAYLOAD_BYTES else ""


def concerns(received: str, queue: str) -> bool:
    """Whether a notification's payload may be about ``queue``."""
    return received in ("", queue)


def waiter_key(schema: str, queue: str) -> tuple[int, int]:
    """The advisory lock key the idle workers of one queue hold (shared) while they wait, so that they can
    take turns.

    Every waiter of a queue holds this key with ``pg_advisory_lock_shared`` on its connection (shared holds
    never block one another, and go with the connection); each ranks itself by backend pid among the holders
    and wakes only for the jobs there are (see ``worker_wakeup`` in queries.sql): one NOTIFY no longer wakes
    them all. Two non-negative 31-bit halves of a digest of the schema and queue names.
    """
    return _advisory_key(schema, queue)


def planning_key(schema: str, queue: str) -> int:
    """The advisory lock key a whole-queue planning run holds while it runs: a second run finds it held and
    does nothing (see planner.plan). One 63-bit key, so that it never equals a waiter key's pair."""
    high, low = _advisory_key(schema, queue, "plan")
    return (high << 32) | low


def credentials_key(schema: str, queue: str, owner: str) -> int:
    """The advisory lock key one owner's credential refresh holds until its transaction ends, so that one
    process on one machine refreshes an owner's token at a time (see lock_owner_credentials). One 63-bit key,
    as planning_key."""
    high, low = _advisory_key(schema, queue, owner, "credentials")
    return (high << 32) | low


def _advisory_key(*names: str) -> tuple[int, int]:
    """Two non-negative 31-bit halves of a digest of ``names``."""
    digest = hashlib.sha256("\x00".join(names).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF, int.from_bytes(digest[4:8], "big") & 0x7FFFFFFF
