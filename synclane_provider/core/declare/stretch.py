"""When an owner whose attempts keep failing is asked less often: its health, and the stretch of its period.

An account whose access is gone fails every window of every type, every period. Retrying each job (the
:class:`~synclane_provider.core.declare.retry.RetryPolicy`) stops one job; this stops the owner from being
asked as often as a healthy one. The rule, kept on the owner's row of ``<schema>.owners`` by the statement
that writes how each attempt ended (``finish_and_take``; no statement of its own):

* an attempt that raised (anything but a throttle, which is the server saying "not now", and a cancel) adds
  one to the owner's ``consecutive_failures``, whichever of its types and jobs it was;
* with ``degraded_after`` consecutive failures the owner is ``degraded``, with ``failing_after`` it is
  ``failing``;
* a completed job resets it: ``healthy``, ``consecutive_failures`` 0, ``last_clean_at`` now.

While degraded or failing, the planner plans the owner's recurring jobs at a stretched period: ×2 at
``degraded_after`` failures, doubling with each further one, capped at ``max_stretch`` (a failing owner is
always at the cap). The stretched periods are anchored to the clock like any period, and a recurring window
starts where coverage ends, so what the stretch put off is never lost: it is in the next window planned, and
once the owner completes a job again the next plan covers the rest up to the current period at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from synclane_provider.core.errors import DeclarationError
from synclane_provider.core.numbers import whole
from synclane_provider.core.states import OwnerHealth

MAX_STRETCH = 1024
"""The longest stretch a queue may declare: beyond it an owner in trouble is as good as never asked again."""


@dataclass(frozen=True)
class OwnerStretch:
    """How a queue asks an owner in trouble less often: ``Queue(owner_stretch=OwnerStretch(...))``.

    :param degraded_after: consecutive failed attempts that make an owner ``degraded`` (its period doubles).
    :param failing_after: consecutive failed attempts that make it ``failing`` (its period at the cap).
    :param max_stretch: the cap of the stretch; 1 keeps every owner at its period (health is still kept).

    >>> stretch = OwnerStretch(degraded_after=3, failing_after=10, max_stretch=16)
    >>> [stretch.stretch(stretch.health(failures), failures) for failures in range(9)]
    [1, 1, 1, 2, 4, 8, 16, 16, 16]
    >>> stretch.health(2), stretch.health(3), stretch.health(10)
    (<OwnerHealth.HEALTHY: 'healthy'>, <OwnerHealth.DEGRADED: 'degraded'>, <OwnerHealth.FAILING: 'failing'>)
    >>> OwnerStretch(max_stretch=0)
    Traceback (most recent call last):
    ...
    synclane_provider.core.errors.DeclarationError: max_stretch of owner_stretch must be a whole number from 1 (no stretch) to 1024, got 0
    """

    degraded_after: int = 3
    failing_after: int = 10
    max_stretch: int = 16

    def __post_init__(self) -> None:
        if not whole(self.degraded_after, 1):
            raise DeclarationError(
                f"degraded_after of owner_stretch must be a whole number of at least 1, got {self.degraded_after!r}"
            )
        if not whole(self.failing_after, 1) or self.failing_after < self.degraded_after:
            raise DeclarationError(
                f"failing_after of owner_stretch must be a whole number of at least degraded_after "
                f"({self.degraded_after!r}), got {self.failing_after!r}"
            )
        if not whole(self.max_stretch, 1) or self.max_stretch > MAX_STRETCH:
            raise DeclarationError(
                f"max_stretch of owner_stretch must be a whole number from 1 (no stretch) to {MAX_STRETCH}, "
                f"got {self.max_stretch!r}"
            )

    @property
    def health_after(self) -> tuple[int, int]:
        """(degraded after, failing after): what the statement that writes an attempt's end is given."""
        return (self.degraded_after, self.failing_after)

    def health(self, consecutive_failures: int) -> OwnerHealth:
        """The health ``consecutive_failures`` failed attempts in a row give an owner (the finish writes the same)."""
        if consecutive_failures >= self.failing_after:
            return OwnerHealth.FAILING
        if consecutive_failures >= self.degraded_after:
            return OwnerHealth.DEGRADED
        return OwnerHealth.HEALTHY

    def stretch(self, health: OwnerHealth, consecutive_failures: int) -> int:
        """How many times its period an owner's recurring jobs are planned at: 1 when healthy, ×2 at
        ``degraded_after`` failures doubling with each further one, ``max_stretch`` at most and when failing."""
        if health is OwnerHealth.HEALTHY:
            return 1
        if health is OwnerHealth.FAILING:
            return self.max_stretch
        doublings = max(consecutive_failures - self.degraded_after + 1, 1)
        return min(self.max_stretch, 1 << min(doublings, MAX_STRETCH.bit_length()))


NO_STRETCH = OwnerStretch(max_stretch=1)
"""``Queue(owner_stretch=None)``: every owner at its period whatever its health (health is still kept)."""

OwnerBackoff = OwnerStretch
"""The earlier name of :class:`OwnerStretch`, still importable: "backoff" now means only the growing wait
between tries (of a job, a connection, a token request); an owner in trouble has its period stretched."""
