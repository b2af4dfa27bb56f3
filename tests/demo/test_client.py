"""Our client against the real shop: pages, and each kind of refusal as its own exception."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

import pytest

from synclane_demo.client import (
    AccessRevoked,
    AccountNotFound,
    ResponseHeaders,
    ShopClient,
    ShopThrottled,
    ShopUnavailable,
    UnreadablePage,
)
from synclane_provider.core.rate_headers import read_rate_headers
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


def test_a_page_and_a_429_carry_the_answers_headers_with_the_announced_limit(start_shop):
    shop = start_shop(rate_limits={"acme": 1})
    client, token = ShopClient(shop.url), access_token(shop, "acme-us")
    page = client.products("acme-us", None, token=token)
    assert (page.headers["X-RateLimit-Limit"], page.headers["x-ratelimit-remaining"]) == ("1", "0")  # any case
    with pytest.raises(ShopThrottled) as caught:
        client.products("acme-us", "50", token=token)
    assert caught.value.headers["X-RateLimit-Limit"] == "1" and caught.value.headers["Retry-After"] == "1"
    assert "X-RateLimit-Limit" not in client.products("globex", None, token=access_token(shop, "globex")).headers


def test_the_engine_reads_the_limit_the_shop_announces_from_the_headers_handed_back(start_shop):
    shop = start_shop(rate_limits={"acme": 2})
    client, token = ShopClient(shop.url), access_token(shop, "acme-eu")
    first = read_rate_headers(client.products("acme-eu", None, token=token).headers)
    second = read_rate_headers(client.products("acme-eu", "50", token=token).headers)
    assert (first.limit, first.remaining, second.limit, second.remaining) == (2, 1, 2, 0)
    assert second.exhausted and timedelta(0) < second.reset <= timedelta(seconds=1)  # a wait, not a Unix instant
    with pytest.raises(ShopThrottled) as caught:
        client.products("acme-eu", "100", token=token)
    refused = read_rate_headers(caught.value.headers)
    assert (refused.limit, refused.remaining, refused.retry_after) == (2, 0, timedelta(seconds=1))


def test_response_headers_are_a_read_only_mapping_whatever_the_case():
    headers = ResponseHeaders([("Retry-After", "3"), ("X-RateLimit-Limit", "2")])
    assert (
        isinstance(headers, Mapping)
        and len(headers) == 2
        and dict(headers)
        == {
            "Retry-After": "3",
            "X-RateLimit-Limit": "2",
        }
    )
    assert headers["RETRY-AFTER"] == headers.get("retry-after") == "3" and "x-ratelimit-limit" in headers
    assert headers.get("X-RateLimit-Reset") is None
    with pytest.raises(TypeError):
        headers["Retry-After"] = "4"  # type: ignore[index]
    assert ShopThrottled("slow down", None).headers == {}


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
