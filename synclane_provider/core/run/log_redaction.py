"""Secrets taken out of the worker's log: a handler's ``log.info(f"calling with {token}")`` shows ``***``.

A handler gets its owner's credential in clear (``job.credentials()``) and may log it by mistake, with any
logger of its own. Those records reach the task log through the handlers of the loggers above theirs (the
root logger's, in the end), and a filter on a *handler* sees every record it writes, whichever logger made it
(one on a logger sees only that logger's own). So the worker puts :class:`RedactingFilter` on its logger, on
the loggers above it and on all their handlers: each record's message, arguments and traceback are passed
through :func:`~synclane_provider.core.redact.redact` before any handler writes them.
"""

from __future__ import annotations

import logging

from synclane_provider.core.redact import redact


class RedactingFilter(logging.Filter):
    """Replaces a record's message (with its arguments) and its traceback text by their redacted versions;
    never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


REDACTING_FILTER = RedactingFilter()
"""The one filter installed everywhere (so that installing it again adds nothing)."""


def redact_logs(logger: object) -> None:
    """Redact every record written through ``logger``, the loggers it propagates to, and their handlers: the
    records of any logger below them included (idempotent).

    A logger that is not the standard library's (Airflow 3 gives a task a structlog logger, whose output its own
    secrets masker redacts) is left alone, and the root logger is redacted instead: a handler's own loggers
    write through it."""
    given = logger.logger if isinstance(logger, logging.LoggerAdapter) else logger
    current: logging.Logger | None = given if isinstance(given, logging.Logger) else logging.getLogger()
    while current is not None:
        for filtered in (current, *current.handlers):
            if REDACTING_FILTER not in filtered.filters:
                filtered.addFilter(REDACTING_FILTER)
        if not current.propagate:
            break
        current = current.parent
