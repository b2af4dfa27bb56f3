"""The shop's rate limits: per seller, a named wait, the limits announced in every answer, and changed while the
shop runs (over the control endpoint, or on a schedule given at start)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from synclane_demo.shop.__main__ import DEMO_LIMIT_CHANGES, build, parse
from synclane_demo.shop.limits import Arrival, LimitChange, Limits, Quota, Refusal, parse_limit_changes, parse_limits
from tests.demo.test_shop import get

ANNOUNCED = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def announced(headers: dict) -> tuple[str, str] | None:
    """The answer's ``X-RateLimit-Limit`` and ``-Remaining``, its ``-Reset`` checked to be a wait of at most the
    one-second window (on a real clock; the exact resets are :class:`Limits`' to show on a pinned one); None when
    it announced none of them."""
    if not any(name in headers for name in ANNOUNCED):
        return None
    assert 0 < float(headers["X-RateLimit-Reset"]) <= 1, headers
    return headers["X-RateLimit-Limit"], headers["X-RateLimit-Remaining"]


def settings(shop, body: dict) -> tuple[int, dict]:
    """``POST /control/settings`` with ``body``: the status and the answer, a refusal's too."""
    request = urllib.request.Request(f"{shop.url}/control/settings", data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_seller_over_its_rate_limit_gets_429_counted_as_such(start_shop):
    shop = start_shop(rate_limits={"acme": 2})
    answers = [get(f"{shop.url}/accounts/{account}/products")[:2] for account in ("acme-us", "acme-eu", "acme-us")]
    assert [status for status, _ in answers] == [200, 200, 429]  # acme-us and acme-eu share acme's limit
    assert answers[2][1]["Retry-After"] == "1"
    assert get(f"{shop.url}/accounts/globex/products")[0] == 200  # globex has no limit
    status = json.loads(get(f"{shop.url}/control/status")[2])
    assert status["rate_limits"] == {"acme": 2}
    assert status["counters"] == {"200": 3, "429_over_limit": 1}


def test_every_answer_to_a_seller_with_a_limit_announces_it(start_shop):
    shop = start_shop(rate_limits={"acme": 2})
    answers = [get(f"{shop.url}/accounts/{account}/products")[:2] for account in ("acme-us", "acme-eu", "acme-us")]
    assert [(status, announced(headers)) for status, headers in answers] == [
        (200, ("2", "1")),
        (200, ("2", "0")),  # acme-eu's answer counts acme-us's request: one seller, one limit
        (429, ("2", "0")),  # the 429 too, beside its Retry-After
    ]
    status, headers, _ = get(f"{shop.url}/accounts/globex/products")
    assert status == 200 and announced(headers) is None  # globex has no limit to announce


def test_the_announced_quota_follows_the_arrivals_in_the_window():
    limits = Limits({"acme": 2})
    answered = [(now, limits.arrive("acme", now=now)) for now in (10.0, 10.3, 10.6, 11.05, 11.7, 12.8)]
    assert answered == [
        (10.0, Arrival(None, Quota(2, 1, 1.0))),
        (10.3, Arrival(None, Quota(2, 0, 0.7))),  # none left: the next fits when 10.0 leaves the window
        (10.6, Arrival(Refusal("429_over_limit", 1), Quota(2, 0, 0.7))),  # refused, yet counted: 10.3 must leave
        (11.05, Arrival(Refusal("429_over_limit", 1), Quota(2, 0, 0.55))),  # then 10.6
        (11.7, Arrival(None, Quota(2, 0, 0.35))),  # 11.05 and 11.7 in the last second
        (12.8, Arrival(None, Quota(2, 1, 1.0))),  # alone in it again
    ]
    assert limits.arrive("globex", now=12.8) == Arrival(None, None)
    assert Quota(2, 0, 0.35).headers() == {
        "X-RateLimit-Limit": "2",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "0.35",
        "RateLimit-Policy": "2;w=1",
    }
    assert Quota(2, 1, 1.0).headers()["X-RateLimit-Reset"] == "1"
    assert limits.arrive("acme", now=13.0001).quota == Quota(2, 0, 0.8)  # thousandths, rounded up: 0.7999 is 0.8


def test_a_named_wait_holds_the_whole_seller_and_requests_during_it_are_counted():
    limits = Limits({"acme": 100})
    assert limits.arrive("acme", now=10.0).refusal is None
    limits.named_wait("acme", 3, now=10.0)
    assert limits.arrive("acme", now=11.5) == Arrival(Refusal("429_ignored_wait", 2), Quota(100, 99, 1))
    assert limits.arrive("globex", now=11.5).refusal is None
    assert limits.arrive("acme", now=13.0).refusal is None
    assert limits.status()["counters"] == {"429_ignored_wait": 1}


def test_a_random_429_starts_a_named_wait_for_the_seller(start_shop):
    shop = start_shop(rate_429=1.0, retry_after=7, rate_limits={"acme": 2})
    status, headers, _ = get(f"{shop.url}/accounts/acme-us/products")
    assert (status, headers["Retry-After"], announced(headers)) == (429, "7", ("2", "1"))
    shop.shop.faults.rate_429 = 0.0
    status, headers, _ = get(f"{shop.url}/accounts/acme-eu/products")
    assert status == 429 and int(headers["Retry-After"]) in (6, 7)  # the wait names itself, not the window
    assert announced(headers) == ("2", "0")
    counters = json.loads(get(f"{shop.url}/control/status")[2])["counters"]
    assert counters == {"429_random": 1, "429_ignored_wait": 1}


@pytest.mark.parametrize("text", ["acme", "acme=0", "=2", "acme=two"])
def test_a_bad_rate_limit_is_named(text):
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        parse_limits(text)


def test_a_sellers_limit_changes_over_the_control_endpoint_from_its_next_request(start_shop):
    shop = start_shop(rate_limits={"acme": 2})
    assert announced(get(f"{shop.url}/accounts/acme-us/products")[1]) == ("2", "1")
    status, answer = settings(shop, {"rate_limits": {"acme": 1, "globex": 5}})
    assert status == 200 and answer["rate_limits"] == {"acme": 1, "globex": 5}
    status, headers, _ = get(f"{shop.url}/accounts/acme-eu/products")
    assert (status, announced(headers)) == (429, ("1", "0"))  # two in the second: one too many now
    assert announced(get(f"{shop.url}/accounts/globex/products")[1]) == ("5", "4")
    assert json.loads(get(f"{shop.url}/control/status")[2])["rate_limits"] == {"acme": 1, "globex": 5}


@pytest.mark.parametrize(
    "body, named",
    [
        ({"rate_limits": {"acme": 0}}, "the rate limit of 'acme' must be a positive integer, got 0"),
        ({"rate_limits": {"acme": "1"}}, "the rate limit of 'acme' must be a positive integer, got '1'"),
        ({"rate_limits": {"acme": True}}, "the rate limit of 'acme' must be a positive integer, got True"),
        ({"rate_limits": {"acme": 1.5}}, "the rate limit of 'acme' must be a positive integer, got 1.5"),
        ({"rate_limits": {"acme-us": 1}}, "rate_limits names no seller of the shop's: ['acme-us']"),
        ({"rate_limits": 1}, "rate_limits must be an object of sellers and their limits"),
        ({"rate_limits": {"acme": 1}, "latency": -1}, "latency must be a non-negative number, got -1"),
        ({"latency": 0.5, "rate_503": -1}, "rate_503 must be a non-negative number, got -1"),
    ],
)
def test_a_bad_limit_change_is_refused_by_name_and_changes_nothing(start_shop, body, named):
    shop = start_shop(rate_limits={"acme": 2})
    status, answer = settings(shop, body)
    assert status == 400 and answer["error"].startswith(named)
    status = json.loads(get(f"{shop.url}/control/status")[2])
    assert (status["rate_limits"], status["latency"]) == ({"acme": 2}, 0.0)


def test_scheduled_changes_apply_as_their_moment_passes():
    limits = Limits({"acme": 2}, changes=parse_limit_changes("acme=1@5m,acme=2@10m"), started=1000.0)
    assert limits.arrive("acme", now=1299.5).quota == Quota(2, 1, 1)
    assert limits.status(now=1299.5)["limit_changes"] == ["acme=1@5m", "acme=2@10m"]
    assert limits.arrive("acme", now=1300.0) == Arrival(Refusal("429_over_limit", 1), Quota(1, 0, 1))
    assert limits.arrive("acme", now=1301.5) == Arrival(None, Quota(1, 0, 1))
    assert limits.status(now=1301.5)["limit_changes"] == ["acme=2@10m"]
    limits.change({"acme": 3})  # a change over the control endpoint does not cancel the ones to come
    assert limits.arrive("acme", now=1450.0).quota == Quota(3, 2, 1)
    assert limits.arrive("acme", now=1600.0).quota == Quota(2, 1, 1)
    assert limits.status(now=1600.0) == {
        "rate_limits": {"acme": 2},
        "limit_changes": [],
        "counters": {"429_over_limit": 1},
    }


def test_a_change_due_at_start_holds_from_the_shops_first_answer(start_shop):
    shop = start_shop(rate_limits={"acme": 2}, limit_changes="acme=1@0s,globex=3@1h")
    assert announced(get(f"{shop.url}/accounts/acme-us/products")[1]) == ("1", "0")
    status = json.loads(get(f"{shop.url}/control/status")[2])
    assert (status["rate_limits"], status["limit_changes"]) == ({"acme": 1}, ["globex=3@1h"])


def test_limit_changes_are_written_seller_equals_limit_at_moment():
    assert parse_limit_changes(" acme=1@5m, acme=2@10m ,globex=5@90s, initech=3@1.5h,") == (
        LimitChange("globex", 5, 90.0),
        LimitChange("acme", 1, 300.0),
        LimitChange("acme", 2, 600.0),
        LimitChange("initech", 3, 5400.0),
    )
    assert parse_limit_changes("") == parse_limit_changes("none") == ()
    for change in parse_limit_changes("acme=1@5m,globex=5@90s,initech=3@1.5h,umbrella=1@0s,acme=4@2h"):
        assert parse_limit_changes(str(change)) == (change,)  # written back as it is read


@pytest.mark.parametrize(
    "text, entry",
    [
        ("acme=1", "acme=1"),  # no moment
        ("acme=1@5", "acme=1@5"),  # a moment without its unit
        ("acme=1@5d", "acme=1@5d"),
        ("acme=1@-5m", "acme=1@-5m"),
        ("acme=0@5m", "acme=0@5m"),
        ("acme=one@5m", "acme=one@5m"),
        ("=1@5m", "=1@5m"),
        ("acme=1@5m;acme=2@10m", "acme=1@5m;acme=2@10m"),
        ("acme=1@5m,acme@10m", "acme@10m"),  # the bad one of several
    ],
)
def test_a_bad_limit_change_is_named(text, entry):
    with pytest.raises(ValueError, match=r"written seller=N@T .*" + re.escape(f"got {entry!r}")):
        parse_limit_changes(text)


def test_two_changes_of_one_seller_at_one_moment_are_named():
    with pytest.raises(
        ValueError, match=re.escape("two limit changes of 'acme' at one moment: 'acme=1@5m' and 'acme=3@300s'")
    ):
        parse_limit_changes("acme=1@5m,globex=1@5m,acme=3@300s")


def test_the_demo_shop_changes_acmes_limit_at_5_and_10_minutes_unless_told_otherwise(monkeypatch, capsys):
    monkeypatch.delenv("SHOP_LIMIT_CHANGES", raising=False)
    assert (
        parse([]).limit_changes
        == parse_limit_changes(DEMO_LIMIT_CHANGES)
        == (
            LimitChange("acme", 1, 300.0),
            LimitChange("acme", 2, 600.0),
        )
    )
    assert parse(["--limit-changes", "none"]).limit_changes == ()
    monkeypatch.setenv("SHOP_LIMIT_CHANGES", "globex=1@30s")
    server = build(parse(["--port", "0"]))
    try:
        assert server.shop.limits.changes == (LimitChange("globex", 1, 30.0),)
    finally:
        server.server_close()
    for argv, named in [
        (["--limit-changes", "acme=1@5"], "argument --limit-changes: a limit change is written seller=N@T"),
        (["--limit-changes", "hooli=1@5m"], "--limit-changes names no seller of the shop's: ['hooli']"),
    ]:
        with pytest.raises(SystemExit):
            parse(argv)
        assert named in capsys.readouterr().err
    monkeypatch.setenv("SHOP_LIMIT_CHANGES", "acme=1@soon")
    with pytest.raises(SystemExit):
        parse([])
    assert "got 'acme=1@soon'" in capsys.readouterr().err
