"""The demo's settings, read from the environment so that one declaration serves the demo and the tests.

The defaults are the demo as a user meets it (two years of history, delays of
seconds so that retries are visible in a few minutes). The end-to-end test
sets a compressed scale through the same variables: a shorter horizon, short
delays and lease.

    SYNCLANE_DEMO_DATABASE_URL   the demo's own tables (accounts, orders, products)
    SYNCLANE_DEMO_SHOP_URL       the pretend shop                     (http://127.0.0.1:8081)
    SYNCLANE_DEMO_SCHEMA         schema of SyncLane's jobs table      (synclane)
    SYNCLANE_DEMO_DATA_SCHEMA    schema of the demo's tables          (demo)
    SYNCLANE_DEMO_QUEUE          the queue's name                     (shops)
    SYNCLANE_DEMO_HORIZON, _SLICE, _ORDERS_EVERY, _OVERLAP, _PRODUCTS_EVERY, _MAX_LAG
    SYNCLANE_DEMO_CONCURRENCY, _MAX_ATTEMPTS, _LEASE, _RETRY_DELAY, _RETRY_MAX_DELAY,
    SYNCLANE_DEMO_THROTTLE_DELAY, _THROTTLE_MAX_DELAY, _POLL_INTERVAL, _SHOP_TIMEOUT, _CREDENTIALS_SKEW
    SYNCLANE_DEMO_RATES          the rate budget per lane, requests a second  (acme=2: the shop's limit for acme)

Durations are written ``90s``, ``5m``, ``2h`` or ``730d`` (a bare number is seconds).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import timedelta

from synclane_provider.core import Rate
from synclane_provider.core.durations import parse_duration

PREFIX = "SYNCLANE_DEMO_"


def duration(text: str) -> timedelta:
    """A duration written ``90s``, ``5m``, ``2h``, ``730d`` or a bare number of seconds (zero allowed)."""
    return parse_duration("duration", text, positive=False)


@dataclass(frozen=True)
class DemoSettings:
    database_url: str | None = None
    shop_url: str = "http://127.0.0.1:8081"
    schema: str = "synclane"
    data_schema: str = "demo"
    queue: str = "shops"
    horizon: timedelta = timedelta(days=730)
    slice: timedelta = timedelta(days=30)
    orders_every: timedelta = timedelta(minutes=5)
    overlap: timedelta = timedelta(minutes=1)
    products_every: timedelta = timedelta(hours=1)
    max_lag: timedelta = timedelta(minutes=30)
    """How far behind an account's orders may fall before the health check fails (longer than orders_every)."""
    concurrency: int = 3
    max_attempts: int | None = None
    """None: the engine's own default (five)."""
    lease: timedelta = timedelta(minutes=1)
    retry_delay: timedelta = timedelta(seconds=10)
    retry_max_delay: timedelta = timedelta(minutes=2)
    throttle_delay: timedelta = timedelta(seconds=10)
    throttle_max_delay: timedelta = timedelta(minutes=1)
    poll_interval: timedelta = timedelta(seconds=5)
    shop_timeout: timedelta = timedelta(seconds=30)
    credentials_skew: timedelta = timedelta(minutes=2)
    """How long before an account's access token expires it is refreshed (the shop's last 5 minutes)."""
    rates: str = "acme=2"
    """The rate budget of each lane that has one, in requests a second: ``lane=N[,lane=N]`` (see :func:`lane_rates`)."""

    def lane_rates(self) -> dict[str, Rate]:
        """``rates`` as a :class:`Rate` per lane; a bad entry names the variable.

        >>> DemoSettings(rates="acme=2, globex=10").lane_rates()["acme"].requests
        2
        """
        rates: dict[str, Rate] = {}
        for entry in filter(None, (part.strip() for part in self.rates.split(","))):
            lane, _, number = entry.partition("=")
            if not lane.strip() or not number.strip().isdigit() or int(number) < 1:
                raise ValueError(f"{PREFIX}RATES: a rate is written lane=N (N requests a second), got {entry!r}")
            rates[lane.strip()] = Rate(int(number), per=timedelta(seconds=1))
        return rates

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "DemoSettings":
        """Defaults, overridden by every ``SYNCLANE_DEMO_<FIELD>`` that is set; a bad value names its variable."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in fields(cls):
            raw = environ.get(PREFIX + field.name.upper())
            if raw is None or raw == "":
                continue
            try:
                if field.type == "timedelta":
                    values[field.name] = duration(raw)
                elif field.type in ("int", "int | None"):
                    values[field.name] = int(raw)
                else:
                    values[field.name] = raw
            except ValueError as exc:
                raise ValueError(f"{PREFIX}{field.name.upper()}: {exc}") from None
        return cls(**values)
