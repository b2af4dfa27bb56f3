"""Fixtures for the demo: a real shop on a free local port, and the demo's declaration in schemas of a test's own."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from synclane_demo.settings import DemoSettings
from synclane_demo.shop.catalogue import Catalogue
from synclane_demo.shop.faults import Faults
from synclane_demo.shop.limits import Limits, parse_limit_changes
from synclane_demo.shop.oauth import DEFAULT_LIFETIME, OAuth
from synclane_demo.shop.server import Shop, ShopServer
from tests.support.database import drop_schemas


@pytest.fixture
def start_shop() -> Iterator:
    """Start a shop with the given faults (no grant revoked on its own unless given), rate limits and their
    scheduled changes (none unless given), access token lifetime and catalogue on a free port; stopped after the
    test."""
    started: list[ShopServer] = []

    def start(
        *,
        catalogue: Catalogue | None = None,
        rate_limits: dict[str, int] | None = None,
        limit_changes: str = "",
        token_lifetime: float = DEFAULT_LIFETIME,
        **faults,
    ) -> ShopServer:
        settings = {"latency": 0.0, "rate_429": 0.0, "rate_503": 0.0, "heal_after": None, "revoke_account": None}
        settings.update(faults)
        shop = Shop(
            catalogue or Catalogue(history_days=120),
            Faults(**settings),
            Limits(rate_limits or {}, changes=parse_limit_changes(limit_changes)),
            OAuth(lifetime=token_lifetime),
        )
        server = ShopServer(("127.0.0.1", 0), shop)
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def demo_schemas(database_url: str) -> Iterator[tuple[str, str]]:
    """A jobs schema and a data schema for one test, dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    names = (f"synclane_demo_jobs_{suffix}", f"synclane_demo_data_{suffix}")
    yield names
    drop_schemas(database_url, *names)


@pytest.fixture
def demo_settings(database_url: str, demo_schemas: tuple[str, str]):
    """The demo at test scale: 90 days of history in 30-day slices, delays of a tenth of a second, no rate budget
    (the shops these tests start have no rate limit unless a test gives both)."""

    def make(shop: ShopServer, **overrides) -> DemoSettings:
        jobs, data = demo_schemas
        base = DemoSettings(
            database_url=database_url,
            shop_url=shop.url,
            schema=jobs,
            data_schema=data,
            horizon=timedelta(days=90),
            lease=timedelta(seconds=10),
            retry_delay=timedelta(seconds=0.05),
            retry_max_delay=timedelta(seconds=0.2),
            throttle_delay=timedelta(seconds=0.05),
            throttle_max_delay=timedelta(seconds=0.2),
            poll_interval=timedelta(seconds=0.1),
            shop_timeout=timedelta(seconds=5),
            rates="",
        )
        return dataclasses.replace(base, **overrides)

    return make
