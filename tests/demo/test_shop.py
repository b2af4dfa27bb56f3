"""The pretend shop: deterministic data, paging, faults on purpose, the broken page and its healing."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest

from synclane_demo.shop.catalogue import ACCOUNTS, PAGE_SIZE, Catalogue
from synclane_demo.shop.faults import Faults
from synclane_demo.shop.oauth import CLIENT_ID, CLIENT_SECRET

NOW = datetime(2026, 11, 30, 10, 20, tzinfo=timezone.utc)


CONNECTED = object()
"""``get``'s token by default: a new one of the account, from connecting it at the shop as the demo's launcher
does (each time: a shop started later on the same port knows nothing of an earlier one's)."""


def get(url: str, token: str | None | object = CONNECTED) -> tuple[int, dict, bytes]:
    """GET ``url``; a data call carries its account's access token unless ``token`` is given (None: none)."""
    if token is CONNECTED:
        token = _connected_token(url)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _connected_token(url: str) -> str | None:
    found = re.match(r"(http://[^/]+)/accounts/([^/?]+)/", url)
    if found is None or found[2] not in ACCOUNTS:
        return None
    return post(f"{found[1]}/control/connect", {"account": found[2]})["access_token"]


def access_token(shop, account: str) -> str:
    """A new access token of ``account`` at ``shop`` (a grant, as connecting the app gives it)."""
    return str(shop.shop.oauth.connect(account)["access_token"])


def refresh(shop, refresh_token: str, *, secret: str = CLIENT_SECRET) -> tuple[int, dict]:
    """The shop's token endpoint, asked as the engine asks it (a form, the client id and secret in it)."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": CLIENT_ID}
    form["client_secret"] = secret
    request = urllib.request.Request(f"{shop.url}/oauth/token", data=urllib.parse.urlencode(form).encode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def post(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def orders_url(shop, account, since, until, cursor=None) -> str:
    query = f"since={since.isoformat().replace('+', '%2B')}&until={until.isoformat().replace('+', '%2B')}"
    return f"{shop.url}/accounts/{account}/orders?{query}" + (f"&cursor={cursor}" if cursor is not None else "")


def test_orders_are_the_same_every_time_and_spread_over_two_years():
    first, second = Catalogue(), Catalogue()
    start = NOW - timedelta(days=800)
    orders = first.orders("globex", start, NOW, NOW)
    assert orders == second.orders("globex", start, NOW, NOW)
    assert orders[0]["placed_at"] >= first.history_start(NOW) == datetime(2024, 11, 30, tzinfo=timezone.utc)
    assert orders[0]["placed_at"] < first.history_start(NOW) + timedelta(days=1)
    assert NOW - timedelta(days=1) < orders[-1]["placed_at"] <= NOW
    months = {(o["placed_at"].year, o["placed_at"].month) for o in orders}
    assert len(months) == 25  # every month of the two years, both ends included
    assert [o["placed_at"] for o in orders] == sorted(o["placed_at"] for o in orders)
    assert len({o["id"] for o in orders}) == len(orders)
    assert first.orders("acme-us", start, NOW, NOW) != orders  # each account has its own


def test_orders_appear_as_time_passes():
    catalogue = Catalogue()
    since = NOW - timedelta(days=1)
    earlier = catalogue.orders("initech", since, NOW + timedelta(days=1), NOW)
    later = catalogue.orders("initech", since, NOW + timedelta(days=1), NOW + timedelta(hours=12))
    assert all(o["placed_at"] <= NOW for o in earlier)
    assert len(later) > len(earlier) and later[: len(earlier)] == earlier


def test_orders_page_by_window_and_cursor(start_shop):
    shop = start_shop()
    since, until = datetime(2026, 10, 1, tzinfo=timezone.utc), datetime(2026, 10, 31, tzinfo=timezone.utc)
    expected = shop.shop.catalogue.orders("acme-eu", since, until, datetime.now(timezone.utc))
    assert len(expected) > 2 * PAGE_SIZE
    seen, cursor, pages = [], None, 0
    while True:
        status, _, body = get(orders_url(shop, "acme-eu", since, until, cursor))
        assert status == 200
        page = json.loads(body)
        pages += 1
        assert len(page["items"]) == PAGE_SIZE or page["next_cursor"] is None
        seen.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert cursor == str(PAGE_SIZE * pages)
    assert [o["id"] for o in seen] == [o["id"] for o in expected]
    assert all(since.isoformat() <= o["placed_at"] < until.isoformat() for o in seen)


def test_products_page_by_cursor(start_shop):
    shop = start_shop()
    status, _, body = get(f"{shop.url}/accounts/initech/products")
    first = json.loads(body)
    assert status == 200 and len(first["items"]) == PAGE_SIZE and first["next_cursor"] == "50"
    catalogue = shop.shop.catalogue.products("initech")
    status, _, body = get(f"{shop.url}/accounts/initech/products?cursor={len(catalogue) - 3}")
    last = json.loads(body)
    assert [p["id"] for p in last["items"]] == [p["id"] for p in catalogue[-3:]] and last["next_cursor"] is None


@pytest.mark.parametrize(
    "path, status",
    [
        ("/accounts/hooli/products", 404),
        ("/accounts/globex/orders?since=yesterday&until=2026-01-01T00:00:00Z", 400),
        ("/accounts/globex/orders?since=2026-01-01T00:00:00&until=2026-01-02T00:00:00Z", 400),
        ("/accounts/globex/orders?until=2026-01-02T00:00:00Z", 400),
        ("/accounts/globex/products?cursor=-5", 400),
        ("/nothing", 404),
    ],
)
def test_bad_requests_get_clear_answers(start_shop, path, status):
    shop = start_shop()
    got, _, body = get(shop.url + path)
    assert got == status and json.loads(body)["error"]


def test_the_shop_answers_slowly(start_shop):
    shop = start_shop(latency=0.2)
    started = time.monotonic()
    get(f"{shop.url}/accounts/globex/products")
    assert time.monotonic() - started >= 0.2


def test_429_names_its_wait_and_503_is_plain(start_shop):
    shop = start_shop(rate_429=1.0, retry_after=7)
    status, headers, _ = get(f"{shop.url}/accounts/globex/products")
    assert (status, headers["Retry-After"]) == (429, "7")
    shop = start_shop(rate_503=1.0)
    status, headers, _ = get(f"{shop.url}/accounts/globex/products")
    assert status == 503 and "Retry-After" not in headers


def test_faults_are_seeded():
    def draws(seed):
        faults = Faults(rate_429=0.2, rate_503=0.2, seed=seed)
        return [getattr(faults.draw(), "status", None) for _ in range(200)]

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)
    assert 20 < draws(3).count(429) < 70 and 20 < draws(3).count(503) < 70


def test_invalid_fault_settings_are_refused():
    with pytest.raises(ValueError, match="rate_429"):
        Faults(rate_429=1.5)
    with pytest.raises(ValueError, match="exceed"):
        Faults(rate_429=0.6, rate_503=0.6)


def broken_window(shop) -> tuple[datetime, datetime]:
    """The 30-day slice (cut back from today's midnight) that holds the broken instant."""
    broken_at = shop.shop.faults.broken_at
    midnight = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    end = midnight
    while end - timedelta(days=30) > broken_at:
        end -= timedelta(days=30)
    return end - timedelta(days=30), end


def test_the_second_page_of_one_globex_slice_is_broken_until_healed(start_shop):
    shop = start_shop()
    since, until = broken_window(shop)
    assert get(orders_url(shop, "globex", since, until))[0] == 200  # the first page works
    for _ in range(3):  # every time
        status, _, body = get(orders_url(shop, "globex", since, until, 50))
        assert status == 200
        with pytest.raises(ValueError):
            json.loads(body)
    assert json.loads(get(orders_url(shop, "globex", since, until, 100))[2])["items"]  # the page after is fine
    assert json.loads(get(orders_url(shop, "initech", since, until, 50))[2])["items"]  # and other accounts
    older = (since - timedelta(days=30), since)
    assert json.loads(get(orders_url(shop, "globex", *older, 50))[2])["items"]  # and other slices

    assert post(f"{shop.url}/control/heal")["healed"] is True
    status, _, body = get(orders_url(shop, "globex", since, until, 50))
    assert status == 200 and len(json.loads(body)["items"]) == PAGE_SIZE

    post(f"{shop.url}/control/break")
    assert get(orders_url(shop, "globex", since, until, 50))[2].startswith(b'{"items": [{"id": "globex-')
    assert json.loads(get(f"{shop.url}/control/status")[2])["healed"] is False


def test_the_broken_page_heals_by_itself_after_a_while(start_shop):
    shop = start_shop(heal_after=0.3)
    since, until = broken_window(shop)
    with pytest.raises(ValueError):
        json.loads(get(orders_url(shop, "globex", since, until, 50))[2])
    time.sleep(0.35)
    assert len(json.loads(get(orders_url(shop, "globex", since, until, 50))[2])["items"]) == PAGE_SIZE


def test_the_request_log_and_settings_can_be_read_and_changed(start_shop):
    shop = start_shop()
    get(f"{shop.url}/accounts/acme-us/products?cursor=50")
    get(f"{shop.url}/accounts/hooli/products")
    log = json.loads(get(f"{shop.url}/control/requests")[2])["items"]
    assert [(e["account"], e["cursor"], e["status"]) for e in log] == [("acme-us", 50, 200), ("hooli", 0, 404)]
    assert json.loads(get(f"{shop.url}/control/requests?after={log[0]['seq']}")[2])["items"] == log[1:]
    assert post(f"{shop.url}/control/settings", {"latency": 0.01, "rate_503": 0.5})["rate_503"] == 0.5
    with pytest.raises(urllib.error.HTTPError):
        post(f"{shop.url}/control/settings", {"colour": 1})


def test_the_five_accounts_and_their_sellers():
    assert {a.id: a.seller for a in ACCOUNTS.values()} == {
        "acme-us": "acme",
        "acme-eu": "acme",
        "globex": "globex",
        "initech": "initech",
        "umbrella": "umbrella",
    }


def test_a_data_call_needs_a_good_access_token_of_its_own_account(start_shop):
    shop = start_shop(token_lifetime=0.3)
    products = f"{shop.url}/accounts/initech/products"
    assert get(products, token=None)[0] == 401
    status, _, body = get(products, token=access_token(shop, "globex"))  # another account's
    assert status == 401 and b"invalid_token" in body
    fresh = access_token(shop, "initech")
    assert get(products, token=fresh)[0] == 200
    time.sleep(0.4)
    assert get(products, token=fresh)[0] == 401  # expired


def test_each_refresh_rotates_the_refresh_token_and_a_spent_one_sent_again_revokes_the_grant(start_shop):
    shop = start_shop()
    granted = post(f"{shop.url}/control/connect", {"account": "initech"})
    assert sorted(granted) == ["access_token", "expires_in", "refresh_token"] and granted["expires_in"] == 300
    status, first = refresh(shop, granted["refresh_token"])
    assert status == 200 and first["refresh_token"] != granted["refresh_token"] and first["token_type"] == "Bearer"
    assert get(f"{shop.url}/accounts/initech/products", token=first["access_token"])[0] == 200
    status, second = refresh(shop, first["refresh_token"])
    assert status == 200
    status, refused = refresh(shop, first["refresh_token"])  # spent: as when two processes refresh at once
    assert (status, refused["error"]) == (400, "invalid_grant") and "reused" in refused["error_description"]
    assert refresh(shop, second["refresh_token"])[1]["error"] == "invalid_grant"  # the whole grant is gone
    assert refresh(shop, second["refresh_token"], secret="wrong")[1]["error"] == "invalid_client"
    assert json.loads(get(f"{shop.url}/control/status")[2])["revoked"] == ["initech"]
    logged = [(e["account"], e["status"], e.get("fault")) for e in shop.shop.requests_after(0)]
    assert logged == [("initech", 200, None)] * 3 + [("initech", 400, "invalid_grant")] * 2 + [
        ("initech", 401, "invalid_client")
    ]
    assert "access_token" not in json.dumps(list(shop.shop.requests_after(0)))


def test_a_revoked_grant_ends_at_its_refresh_and_connecting_again_gives_a_new_one(start_shop):
    shop = start_shop()
    granted = post(f"{shop.url}/control/connect", {"account": "initech"})
    assert post(f"{shop.url}/control/revoke", {"account": "initech"}) == {"revoked": ["initech"]}
    products = f"{shop.url}/accounts/initech/products"
    assert get(products, token=granted["access_token"])[0] == 200  # it lives out its few minutes
    assert refresh(shop, granted["refresh_token"])[1]["error"] == "invalid_grant"
    again = post(f"{shop.url}/control/connect", {"account": "initech"})
    assert refresh(shop, again["refresh_token"])[0] == 200
    assert json.loads(get(f"{shop.url}/control/status")[2])["revoked"] == []
    with pytest.raises(urllib.error.HTTPError):
        post(f"{shop.url}/control/revoke", {"account": "hooli"})


def test_the_shop_revokes_its_revoke_accounts_grant_after_its_pages_once(start_shop):
    shop = start_shop(revoke_account="umbrella", revoke_after_pages=2)
    granted = post(f"{shop.url}/control/connect", {"account": "umbrella"})
    products = f"{shop.url}/accounts/umbrella/products"
    assert get(f"{shop.url}/accounts/globex/products")[0] == 200  # another account's page counts for nothing
    assert [get(f"{products}?cursor={c}", token=granted["access_token"])[0] for c in (0, 50, 100)] == [200] * 3
    assert refresh(shop, granted["refresh_token"])[1]["error"] == "invalid_grant"
    status = json.loads(get(f"{shop.url}/control/status")[2])
    assert (status["revoked"], status["revoke_account"], status["revoke_after_pages"]) == (["umbrella"], "umbrella", 2)
    again = post(f"{shop.url}/control/connect", {"account": "umbrella"})
    assert [get(f"{products}?cursor={c}", token=again["access_token"])[0] for c in (100, 0, 50)] == [200] * 3
    assert refresh(shop, again["refresh_token"])[0] == 200  # once only


def test_a_negative_revoke_after_pages_is_named():
    with pytest.raises(ValueError, match="revoke_after_pages must not be negative, got -1"):
        Faults(revoke_after_pages=-1)
