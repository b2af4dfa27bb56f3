"""A wait inside a job's work, asked of whoever drives the work rather than slept where it is asked for.

A job's work (:mod:`~synclane_provider.core.run.work_thread`) is a generator: it yields the pages it needs run.
It yields its waits too -- a turn in a lane's rate budget, a throttle on the lane -- so that the driver decides how
to spend them: a slot running one job sleeps on its stop flag, a slot running hundreds parks the job and runs the
others' steps meanwhile, without a thread held per waiting job. The driver answers with the seconds it slept,
which may be fewer than asked when the slot was asked to stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Wait:
    """Sleep ``seconds`` (less when the slot is asked to stop), then send back the seconds slept."""

    seconds: float


Sleeps = Generator[Wait, float, T]
"""A step that may wait: yields :class:`Wait`, is sent the seconds slept, returns its value."""


def sleep(seconds: float) -> Sleeps[float]:
    """Wait ``seconds`` (none when not positive): the seconds slept."""
    if seconds <= 0:
        return 0.0
    slept: float = yield Wait(seconds)
    return slept


def slept_on(wait: Wait, stop: threading.Event) -> float:
    """Sleep out ``wait`` on this thread, waking early when ``stop`` is set: the seconds slept."""
    started = time.monotonic()
    stop.wait(wait.seconds)
    return time.monotonic() - started


def waited_out(sleeps: Generator[Wait, float, T], stop: threading.Event) -> T:
    """Run ``sleeps`` to its end on this thread, sleeping each of its waits here (for the handler's own thread,
    where a wait holds nothing else up)."""
    try:
        wait = next(sleeps)
        while True:
            wait = sleeps.send(slept_on(wait, stop))
    except StopIteration as end:
        value: T = end.value
        return value
