"""Our client against the real shop: pages, and each kind of refusal as its own exception."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone

import pytest

from synclane_demo.client import (
    AccessRevoked,
    AccountNotFound,
    ShopClient,
    ShopThrottled,
    ShopUnavailable,
    UnreadablePage,
)
from tests.demo.test_shop import access_token, broken_window


def test_pages_of_orders_and_products(start_shop):
    shop = start_shop()
    client, token = ShopClient(shop.url), access_token(shop, "globex")
    until = datetime.now(timezone.utc)
    first = client.orders("globex", until - timedelta(days=30), until, None, token=token)
    second = client.orders("globex", until - timedelta(days=30), until, first.next_cursor, token=token)
    assert first.next_cursor == "50" and len(first.items) == 50
    assert second.items[0]["id"] != first.items[-1]["id"]
    assert client.products("globex", "50", token=token).items[0]["id"] == "globex-p0050"


def test_a_429_carries_the_wait_the_shop_named(start_shop):
    shop = start_shop(rate_429=1.0, retry_after=9)
    with pytest.raises(ShopThrottled) as caught:
        ShopClient(shop.url).products("globex", None, token=access_token(shop, "globex"))
    assert caught.value.retry_after == 9.0


def test_refusals_become_their_own_exceptions(start_shop):
    assert_raises = pytest.raises
    busy = start_shop(rate_503=1.0)
    with assert_raises(ShopUnavailable, match="503"):
        ShopClient(busy.url).products("globex", None, token=access_token(busy, "globex"))
    shop = start_shop()
    with assert_raises(AccountNotFound):
        ShopClient(shop.url).products("hooli", None, token=access_token(shop, "globex"))
    since, until = broken_window(shop)
    with assert_raises(UnreadablePage, match="could not be read"):
        ShopClient(shop.url).orders("globex", since, until, "50", token=access_token(shop, "globex"))


def test_a_shop_that_is_not_there_or_too_slow_is_unavailable(start_shop):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    with pytest.raises(ShopUnavailable):
        ShopClient(f"http://127.0.0.1:{free_port}").products("globex", None, token="at_nowhere")
    slow = start_shop(latency=0.5)
    with pytest.raises(ShopUnavailable):
        ShopClient(slow.url, timeout=0.1).products("globex", None, token=access_token(slow, "globex"))


def test_a_token_the_shop_refuses_is_access_revoked(start_shop):
    shop = start_shop()
    with pytest.raises(AccessRevoked, match="401"):
        ShopClient(shop.url).products("initech", None, token=access_token(shop, "globex"))  # another account's
    with pytest.raises(AccessRevoked, match="401"):
        ShopClient(shop.url).products("initech", None, token="at_never_issued")
