"""What a response's headers say about the API's rate limit, in each dialect servers write it, read as one news.

The lane steers its budget by this news, so a misreading costs either 429s (read too generous) or idle
workers (read too tight); and it is read from every response, so a server's odd header must never raise.
"""

from __future__ import annotations

import email
import http.client
import io
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict

from synclane_provider.core.rate_headers import EPOCH_AFTER, RateNews, read_rate_headers

NOW = datetime(2026, 12, 6, 3, 0, tzinfo=timezone.utc)
EPOCH_NOW = int(NOW.timestamp())


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def read(headers, now=NOW):
    return read_rate_headers(headers, now=now)


# The dialects


def test_x_ratelimit_headers_give_limit_remaining_and_a_reset_in_seconds():
    news = read({"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "39", "X-RateLimit-Reset": "20"})
    assert news == RateNews(limit=100, remaining=39, reset=seconds(20))
    assert news.pace == seconds(0.5)  # 39 requests spread evenly over 20 s, and the reset brings the 40th


def test_a_reset_past_a_billion_seconds_is_an_instant_as_github_sends_it():
    news = read(
        {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999", "X-RateLimit-Reset": str(EPOCH_NOW + 3600)}
    )
    assert news.reset == timedelta(hours=1)
    assert EPOCH_AFTER < EPOCH_NOW


def test_an_instant_already_passed_is_a_reset_now():
    assert read({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(EPOCH_NOW - 5)}).reset == timedelta(0)


def test_the_dashed_spelling_is_read_alike():
    news = read({"X-Rate-Limit-Limit": "15", "X-Rate-Limit-Remaining": "3", "X-Rate-Limit-Reset": "60"})
    assert news == RateNews(limit=15, remaining=3, reset=seconds(60))


def test_a_reset_after_is_always_seconds_and_read_before_the_reset():
    news = read(
        {"X-RateLimit-Remaining": "3", "X-RateLimit-Reset-After": "1.5", "X-RateLimit-Reset": str(EPOCH_NOW + 2)}
    )
    assert news == RateNews(remaining=3, reset=seconds(1.5))


def test_the_older_ietf_fields_give_a_reset_in_seconds_and_a_window_from_the_policy():
    news = read(
        {"RateLimit-Limit": "10", "RateLimit-Remaining": "4", "RateLimit-Reset": "2", "RateLimit-Policy": "10;w=1"}
    )
    assert news == RateNews(limit=10, remaining=4, reset=seconds(2), window=seconds(1))


def test_the_earliest_drafts_list_the_policies_after_the_current_limit():
    news = read({"RateLimit-Limit": "10, 10;w=1, 50;w=60", "RateLimit-Remaining": "4", "RateLimit-Reset": "1"})
    assert news == RateNews(limit=10, remaining=4, reset=seconds(1), window=seconds(1))


def test_the_draft_07_ratelimit_dictionary_goes_with_the_policy_of_its_limit():
    news = read({"RateLimit": "limit=100, remaining=50, reset=5", "RateLimit-Policy": "100;w=60, 1000;w=3600"})
    assert news == RateNews(limit=100, remaining=50, reset=seconds(5), window=seconds(60))


def test_the_newer_ietf_fields_match_a_policy_and_its_state_by_name():
    news = read({"RateLimit-Policy": '"default";q=100;w=60', "RateLimit": '"default";r=50;t=30'})
    assert news == RateNews(limit=100, remaining=50, reset=seconds(30), window=seconds(60))


def test_of_several_named_policies_the_tightest_state_is_the_news():
    news = read(
        {
            "RateLimit-Policy": '"burst";q=100;w=60, "daily";q=1000;w=86400',
            "RateLimit": '"burst";r=90;t=30, "daily";r=10;t=3600',
        }
    )
    assert news == RateNews(limit=1000, remaining=10, reset=seconds(3600), window=seconds(86400))


def test_a_policy_without_a_state_still_tells_its_limit_and_window():
    assert read({"RateLimit-Policy": '"hourly";q=500;w=3600'}) == RateNews(limit=500, window=seconds(3600))


def test_retry_after_in_seconds():
    assert read({"Retry-After": "120"}) == RateNews(retry_after=seconds(120))


def test_retry_after_as_an_http_date_is_the_wait_until_it():
    assert read({"Retry-After": format_datetime(NOW + seconds(90), usegmt=True)}).retry_after == seconds(90)


def test_retry_after_a_date_already_passed_is_no_wait():
    assert read({"Retry-After": "Sun, 06 Dec 2026 02:00:00 GMT"}).retry_after == timedelta(0)


def test_retry_after_comes_with_whatever_else_the_response_said():
    news = read({"Retry-After": "30", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "30"})
    assert news == RateNews(remaining=0, reset=seconds(30), retry_after=seconds(30))
    assert news.exhausted and news.pace is None


def test_shopifys_call_limit_is_used_of_limit_with_no_reset():
    news = read({"X-Shopify-Shop-Api-Call-Limit": "32/40"})
    assert news == RateNews(limit=40, remaining=8)
    assert news.pace is None


# Several limits at once


def test_of_several_x_ratelimit_windows_the_slowest_pace_wins():
    news = read({"X-RateLimit-Limit": "100, 1000", "X-RateLimit-Remaining": "50, 100", "X-RateLimit-Reset": "10, 600"})
    assert news == RateNews(limit=1000, remaining=100, reset=seconds(600))  # 6 s a request against 0.2 s


def test_an_exhausted_window_wins_over_any_pace():
    news = read({"X-RateLimit-Limit": "10, 1000", "X-RateLimit-Remaining": "0, 1", "X-RateLimit-Reset": "1, 3600"})
    assert news == RateNews(limit=10, remaining=0, reset=seconds(1))


def test_of_several_dialects_in_one_response_the_tightest_wins():
    news = read(
        {"X-RateLimit-Remaining": "50", "X-RateLimit-Reset": "10", "RateLimit": "limit=5, remaining=1, reset=10"}
    )
    assert news == RateNews(limit=5, remaining=1, reset=seconds(10))


# What cannot be read


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Content-Type": "application/json"},
        {"X-RateLimit-Limit": "lots", "X-RateLimit-Remaining": "-3", "X-RateLimit-Reset": "soon"},
        {"RateLimit": '"default";r=-1;t=x', "RateLimit-Policy": '"default";q=;w=1e3'},
        {"Retry-After": "1.5"},
        {"Retry-After": "tomorrow"},
        {"X-Shopify-Shop-Api-Call-Limit": "32 of 40"},
        {"X-RateLimit-Remaining": "nan", "X-RateLimit-Reset": "inf"},
        {"X-RateLimit-Remaining": "١٢"},
    ],
)
def test_headers_that_say_nothing_readable_about_rate_limits_are_no_news(headers):
    assert read(headers) is None


def test_an_unreadable_value_is_left_out_and_the_rest_still_read():
    news = read({"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "-1", "X-RateLimit-Reset": "10;garbage"})
    assert news == RateNews(limit=100, reset=seconds(10))


def test_a_wait_longer_than_a_year_is_a_misread_header_and_left_out():
    assert read({"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": str(EPOCH_NOW + 400 * 86400)}) == RateNews(
        remaining=5
    )
    assert read({"Retry-After": "99999999999999999999"}) is None


def test_decimal_numbers_are_read_and_counts_rounded_down():
    assert read({"X-RateLimit-Limit": "10.0", "X-RateLimit-Remaining": "2.5", "X-RateLimit-Reset": "0.5"}) == RateNews(
        limit=10, remaining=2, reset=seconds(0.5)
    )


# The shapes headers come in


def test_names_are_case_insensitive():
    assert read({"x-ratelimit-remaining": "7"}) == read({"X-RATELIMIT-REMAINING": "7"}) == RateNews(remaining=7)


def test_requests_case_insensitive_dict():
    assert read(CaseInsensitiveDict({"x-ratelimit-remaining": "7"})) == RateNews(remaining=7)


def test_httpx_headers():
    httpx = pytest.importorskip("httpx")
    assert read(httpx.Headers({"X-RateLimit-Remaining": "7"})) == RateNews(remaining=7)


def test_an_email_message_as_urllib_gives_it():
    message = email.message_from_string("X-RateLimit-Remaining: 7\r\nRetry-After: 3\r\n\r\n")
    assert read(message) == RateNews(remaining=7, retry_after=seconds(3))


def test_a_real_http_client_message():
    message = http.client.parse_headers(io.BytesIO(b"x-RateLimit-Remaining: 7\r\nx-ratelimit-reset: 14\r\n\r\n"))
    assert isinstance(message, http.client.HTTPMessage)
    assert read(message) == RateNews(remaining=7, reset=seconds(14))


def test_a_field_sent_twice_is_one_list_as_http_combines_them():
    message = http.client.parse_headers(
        io.BytesIO(b"X-RateLimit-Remaining: 50\r\nX-RateLimit-Remaining: 1\r\nX-RateLimit-Reset: 10, 10\r\n\r\n")
    )
    assert read(message) == RateNews(remaining=1, reset=seconds(10))


def test_name_value_pairs_including_bytes():
    assert read([(b"X-RateLimit-Remaining", b"7"), ("Retry-After", "3")]) == RateNews(
        remaining=7, retry_after=seconds(3)
    )


def test_a_response_with_headers_is_read_by_its_headers():
    class Response:
        """Like requests' and httpx's: iterating it would read the body, so only ``.headers`` may be touched."""

        headers = CaseInsensitiveDict({"X-RateLimit-Remaining": "7"})

        def __iter__(self):
            raise AssertionError("the body was read")

    assert read(Response()) == RateNews(remaining=7)


def test_text_is_not_headers():
    with pytest.raises(TypeError):
        read("X-RateLimit-Remaining: 7")


def test_without_now_the_current_time_is_used():
    news = read_rate_headers({"X-RateLimit-Reset": str(int(datetime.now(timezone.utc).timestamp()) + 60)})
    assert seconds(55) <= news.reset <= seconds(60)


# Whatever is written in a dialect is read back


COUNT = st.integers(min_value=0, max_value=10**12)
WAIT = st.integers(min_value=0, max_value=365 * 86400)
WINDOW = st.integers(min_value=1, max_value=365 * 86400)


def _written(dialect: str, limit: int, remaining: int, reset: int, window: int) -> dict[str, str]:
    if dialect == "x-ratelimit, seconds":
        return {
            "X-RateLimit-Limit": f"{limit}",
            "X-RateLimit-Remaining": f"{remaining}",
            "X-RateLimit-Reset": f"{reset}",
        }
    if dialect == "x-ratelimit, epoch":
        return {
            "x-ratelimit-limit": f"{limit}",
            "x-ratelimit-remaining": f"{remaining}",
            "x-ratelimit-reset": f"{EPOCH_NOW + reset}",
        }
    if dialect == "x-rate-limit, reset-after":
        return {
            "X-Rate-Limit-Limit": f"{limit}",
            "X-Rate-Limit-Remaining": f"{remaining}",
            "X-Rate-Limit-Reset-After": f"{reset}",
        }
    if dialect == "ietf fields":
        return {
            "RateLimit-Limit": f"{limit};w={window}",
            "RateLimit-Remaining": f"{remaining}",
            "RateLimit-Reset": f"{reset}",
        }
    if dialect == "ietf draft 07":
        return {
            "RateLimit-Policy": f"{limit};w={window}",
            "RateLimit": f"limit={limit}, remaining={remaining}, reset={reset}",
        }
    assert dialect == "ietf structured"
    return {"RateLimit-Policy": f'"p";q={limit};w={window}', "RateLimit": f'"p";r={remaining};t={reset}'}


DIALECTS = [
    "x-ratelimit, seconds",
    "x-ratelimit, epoch",
    "x-rate-limit, reset-after",
    "ietf fields",
    "ietf draft 07",
    "ietf structured",
]


@given(st.sampled_from(DIALECTS), COUNT, COUNT, WAIT, WINDOW)
def test_what_is_written_in_any_dialect_is_read_back(dialect, limit, remaining, reset, window):
    news = read(_written(dialect, limit, remaining, reset, window))
    windowed = dialect.startswith("ietf")
    assert news == RateNews(
        limit=limit, remaining=remaining, reset=seconds(reset), window=seconds(window) if windowed else None
    )
