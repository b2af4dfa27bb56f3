"""What goes wrong at the shop, on purpose: slowness, 429s, 503s, one broken page that heals, and one
account whose grant the shop revokes.

Random faults come from one seeded generator, so a given seed and request
order give the same faults. The broken page is not random at all: the second
page (cursor 50) of the orders of one account, for any window that contains
one instant ``broken_days_ago`` days before the day the shop started, is
unreadable every time until the shop heals (told so, or ``heal_after`` passed).
With windows cut in 30-day slices from midnight, that is exactly one slice.

The revoked grant is not random either: once the shop has served ``revoke_after_pages`` pages to
``revoke_account`` (its first job, mid-way), it revokes that account's OAuth grant on its own, as when a user
disconnects the app: its access token works out its few minutes, then its refresh answers ``invalid_grant``,
until the account connects again (``/control/connect``) and its new tokens are set. It happens once.
"""

from __future__ import annotations

import random
import threading
import time as clock
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta, timezone

from synclane_demo.shop.catalogue import PAGE_SIZE


@dataclass(frozen=True)
class Fault:
    """A fault to answer with instead of the page: an HTTP status, and for 429 the wait to name."""

    status: int
    retry_after: int | None = None


UNREADABLE = Fault(200)
"""The broken page: a 200 whose body is cut off mid-way, so it cannot be read."""


@dataclass
class Faults:
    latency: float = 0.3
    """Seconds every data request takes."""
    rate_429: float = 0.03
    rate_503: float = 0.03
    retry_after: int = 3
    """Seconds named in the Retry-After header of a 429."""
    seed: int = 7
    broken_account: str | None = "globex"
    broken_days_ago: int = 45
    heal_after: float | None = 600.0
    """Seconds after start when the broken page heals by itself (None: only when told)."""
    revoke_account: str | None = "umbrella"
    """The account whose grant the shop revokes on its own (None: only ``/control/revoke`` revokes one)."""
    revoke_after_pages: int = 2
    """How many pages the shop serves ``revoke_account`` before it revokes its grant (0: it never does)."""
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def __post_init__(self) -> None:
        for name in ("rate_429", "rate_503"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.rate_429 + self.rate_503 > 1:
            raise ValueError("rate_429 + rate_503 must not exceed 1")
        if self.latency < 0 or self.retry_after < 0:
            raise ValueError("latency and retry_after must not be negative")
        if self.revoke_after_pages < 0:
            raise ValueError(f"revoke_after_pages must not be negative, got {self.revoke_after_pages}")
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._started_monotonic = clock.monotonic()
        self._healed = False
        self._pages_before_revoke = self.revoke_after_pages

    @property
    def broken_at(self) -> datetime:
        """The instant whose window has the broken page: noon, ``broken_days_ago`` days before the start day."""
        start_day = datetime.combine(self.started.astimezone(timezone.utc).date(), time(), timezone.utc)
        return start_day - timedelta(days=self.broken_days_ago) + timedelta(hours=12)

    @property
    def healed(self) -> bool:
        if self._healed or self.broken_account is None:
            return True
        return self.heal_after is not None and clock.monotonic() - self._started_monotonic >= self.heal_after

    def heal(self) -> None:
        self._healed = True

    def break_again(self) -> None:
        """Undo a heal (and the automatic one): for tests and for showing the failure twice."""
        self._healed = False
        self._pages_before_revoke = self.revoke_after_pages
        self.heal_after = None

    def draw(self) -> Fault | None:
        """A random 429 or 503 for the next data request, or None."""
        with self._lock:
            roll = self._rng.random()
        if roll < self.rate_429:
            return Fault(429, self.retry_after)
        if roll < self.rate_429 + self.rate_503:
            return Fault(503)
        return None

    def breaks(self, account: str, since: datetime, until: datetime, cursor: int) -> bool:
        """Whether this orders request is the broken page (before the heal)."""
        return (
            account == self.broken_account
            and cursor == PAGE_SIZE
            and since <= self.broken_at < until
            and not self.healed
        )

    def revokes_after(self, account: str) -> bool:
        """Count a page served to ``account``; True exactly once: after the page that was the revoked account's last."""
        if account != self.revoke_account:
            return False
        with self._lock:
            self._pages_before_revoke -= 1
            return self._pages_before_revoke == 0

    def status(self) -> dict:
        return {
            "healed": self.healed,
            "broken_account": self.broken_account,
            "broken_at": self.broken_at.isoformat(),
            "latency": self.latency,
            "rate_429": self.rate_429,
            "rate_503": self.rate_503,
            "retry_after": self.retry_after,
            "revoke_account": self.revoke_account,
            "revoke_after_pages": self.revoke_after_pages,
        }
