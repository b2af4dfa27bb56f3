"""The end of an attempt, asked of whoever drives the job's work rather than written where it is asked for.

A job's work (:mod:`~synclane_provider.core.run.work_thread`) yields its pages and its waits; it yields the write
that ends its attempt too, so that the driver decides how to send it: a slot running one job writes it at once
with the take of its next job (``finish_and_take``), a slot running hundreds writes the ends of every page that
returned meanwhile in one statement (``finish_many``). The driver sends back what was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from synclane_provider.core.db.store import Finish
    from synclane_provider.core.run.attempt import EndOfAttempt
    from synclane_provider.core.run.taking import Taking


@dataclass(frozen=True, slots=True)
class WriteEnd:
    """Write how an attempt ended (``end``, under the worker of ``ends``), then send back the :class:`Finish` as
    written, or None when the write found the lease lost."""

    end: EndOfAttempt
    ends: Taking

    def write(self) -> Finish | None:
        """Write it alone, with the next take as the slot's :class:`Taking` does (a one-job slot's way)."""
        return self.ends.write_end(self.end)
