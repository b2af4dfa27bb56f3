"""The shop's data: five accounts, two years of orders each and a product catalogue, all deterministic.

Nothing is stored: every order is derived from ``(account, day)`` by a seeded
generator, so the shop answers the same way after a restart, in a test and in
the demo, and two years of history cost no memory until they are asked for.
Orders only exist up to "now", so as time passes new ones appear for the
recurring jobs to pick up.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

PAGE_SIZE = 50


@dataclass(frozen=True)
class Account:
    """A shop account. Accounts of one ``seller`` share that seller's rate limit (our lane)."""

    id: str
    seller: str
    currency: str


ACCOUNTS: dict[str, Account] = {
    account.id: account
    for account in (
        Account("acme-us", "acme", "USD"),
        Account("acme-eu", "acme", "EUR"),
        Account("globex", "globex", "USD"),
        Account("initech", "initech", "GBP"),
        Account("umbrella", "umbrella", "USD"),
    )
}

SELLERS: frozenset[str] = frozenset(account.seller for account in ACCOUNTS.values())
"""The sellers the accounts belong to: what a rate limit is set for."""

STATUSES = ("paid", "paid", "paid", "shipped", "shipped", "refunded")
PRODUCT_WORDS = ("anvil", "rocket", "magnet", "spring", "skates", "glue", "rope", "kite", "lamp", "stapler")


@dataclass(frozen=True)
class Catalogue:
    """Order and product generation for all accounts: how far back history goes and how busy each day is."""

    history_days: int = 730
    orders_per_day: tuple[int, int] = (2, 8)
    products_per_account: tuple[int, int] = (120, 180)

    def __post_init__(self) -> None:
        low, high = self.orders_per_day
        if not 0 <= low <= high:
            raise ValueError(f"orders_per_day must be (low, high) with 0 <= low <= high, got {self.orders_per_day}")
        if self.history_days < 1:
            raise ValueError(f"history_days must be at least 1, got {self.history_days}")

    def history_start(self, now: datetime) -> datetime:
        """Midnight UTC ``history_days`` before today: the shop's oldest order is on that day."""
        today = datetime.combine(now.astimezone(timezone.utc).date(), time(), timezone.utc)
        return today - timedelta(days=self.history_days)

    def orders(self, account: str, since: datetime, until: datetime, now: datetime) -> list[dict]:
        """Every order of ``account`` placed in ``[since, until)`` and not after ``now``, oldest first."""
        start = max(since, self.history_start(now))
        end = min(until, now)
        found: list[dict] = []
        day = start.astimezone(timezone.utc).date()
        while day <= end.astimezone(timezone.utc).date():
            found.extend(
                o for o in self._orders_on(account, day) if start <= o["placed_at"] < end and o["placed_at"] <= now
            )
            day += timedelta(days=1)
        return found

    @functools.lru_cache(maxsize=20_000)
    def _orders_on(self, account: str, day: date) -> tuple[dict, ...]:
        rng = random.Random(f"orders/{account}/{day.isoformat()}")
        count = rng.randint(*self.orders_per_day)
        seconds = sorted(rng.randrange(86_400) for _ in range(count))
        midnight = datetime.combine(day, time(), timezone.utc)
        currency = ACCOUNTS[account].currency
        return tuple(
            {
                "id": f"{account}-{day:%Y%m%d}-{number:03d}",
                "placed_at": midnight + timedelta(seconds=second),
                "updated_at": midnight + timedelta(seconds=second),
                "total_cents": rng.randint(500, 50_000),
                "currency": currency,
                "status": rng.choice(STATUSES),
            }
            for number, second in enumerate(seconds)
        )

    @functools.lru_cache(maxsize=64)
    def products(self, account: str) -> tuple[dict, ...]:
        """The account's whole catalogue, ordered by id."""
        rng = random.Random(f"products/{account}")
        count = rng.randint(*self.products_per_account)
        return tuple(
            {
                "id": f"{account}-p{number:04d}",
                "name": f"{rng.choice(PRODUCT_WORDS).title()} {rng.choice('XYZ')}{rng.randint(1, 99)}",
                "price_cents": rng.randint(199, 99_999),
            }
            for number in range(count)
        )


def page(items: list | tuple, cursor: int, size: int = PAGE_SIZE) -> tuple[list, str | None]:
    """Items from offset ``cursor``, at most ``size``, and the cursor of the next page (None on the last)."""
    chunk = list(items[cursor : cursor + size])
    following = cursor + len(chunk)
    return chunk, (str(following) if following < len(items) else None)
