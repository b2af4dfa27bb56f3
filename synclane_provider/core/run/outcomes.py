"""How an attempt's failure is written on the row: the error text, and a lost worker's attempt."""

from __future__ import annotations

import re

from synclane_provider.core.errors import WorkerLost
from synclane_provider.core.redact import redact

MAX_ERROR_LENGTH = 2000
"""Stored errors are cut to this many characters: the row is for reading, not for full tracebacks."""

CANCELLED = "Cancelled: "
"""How a cancelled job's error begins (``Cancelled: <reason>``): retention and the runner tell a cancel by it."""


def describe_error(exc: BaseException) -> str:
    """``Type: message``, safe to store: secrets redacted, bounded, valid UTF-8, no NUL characters."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the failure itself
        message = f"<unprintable {type(exc).__name__}>"
    return storable_text(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def storable_text(text: str) -> str:
    """``text`` as the error column keeps it: secrets redacted (every surface shows what is stored, so this is
    the one place they are taken out), at most ``MAX_ERROR_LENGTH`` characters, valid UTF-8, no NUL."""
    text = redact(text).encode("utf-8", errors="replace").decode("utf-8", errors="replace").replace("\x00", "\\0")
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 1] + "…"
    return text


_LOST_BEFORE = re.compile(r"^WorkerLost: .*\(lost (\d+) time\(s\) in a row\)$", re.DOTALL)


def lost_attempt(previous_error: str | None, *, worker: str, cursor: str | None) -> WorkerLost:
    """What a worker that took a job over writes down for the attempt its lost worker never finished.

    Counts the attempts lost in a row from the job's previous error, so that a page that kills its worker
    every time says so on the row.
    """
    earlier = _LOST_BEFORE.match(previous_error or "")
    times = int(earlier.group(1)) + 1 if earlier else 1
    where = f"at cursor {cursor!r}" if cursor is not None else "on its first page"
    return WorkerLost(f"worker {worker} stopped renewing its lease {where} (lost {times} time(s) in a row)")
