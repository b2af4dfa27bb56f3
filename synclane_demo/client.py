"""Our side's client for the shop API: one call per page, and the shop's answers turned into exceptions.

The exceptions say what happened at the shop, not what SyncLane should do
about it; :mod:`synclane_demo.handlers` makes that choice. A page, and a 429,
carry the answer's headers: the shop announces its rate limits in them
(``X-RateLimit-*``), for the handlers to hand to ``job.observe``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime


class ShopError(Exception):
    """The shop did not give us a page."""


class ResponseHeaders(Mapping[str, str]):
    """An answer's headers, looked up whatever the case of the name (HTTP's names have none), read-only.

    >>> headers = ResponseHeaders([("X-RateLimit-Limit", "2")])
    >>> headers["x-ratelimit-limit"], dict(headers)
    ('2', {'X-RateLimit-Limit': '2'})
    """

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self._by_name = {name.lower(): (name, value) for name, value in pairs}

    def __getitem__(self, name: str) -> str:
        return self._by_name[name.lower()][1]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"ResponseHeaders({list(self.items())!r})"


class ShopThrottled(ShopError):
    """429: the shop asks us to slow down, for ``retry_after`` seconds when it says so; ``headers`` are the
    429's (its announced rate limits among them)."""

    def __init__(self, message: str, retry_after: float | None, headers: ResponseHeaders | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.headers = headers if headers is not None else ResponseHeaders()


class ShopUnavailable(ShopError):
    """5xx, a timeout or a refused connection: worth another try later."""


class UnreadablePage(ShopError):
    """The shop answered 200 with a body that is not the page it promised."""


class AccessRevoked(ShopError):
    """401 or 403: the shop refused the access token the engine handed us as good (it refreshes tokens before
    they expire, and a revoked grant shows at its refresh): something a person should look at."""


class AccountNotFound(ShopError):
    """404 for the account: it is gone at the shop, and asking again will not bring it back."""


@dataclass(frozen=True)
class ShopPage:
    items: list[dict]
    next_cursor: str | None
    headers: ResponseHeaders = field(default_factory=ResponseHeaders)
    """The answer's headers: what the shop announced with the page (its rate limits)."""


def _retry_after(value: str | None) -> float | None:
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None  # an HTTP date or garbage: let the queue's throttle delay decide


class ShopClient:
    """Pages through one shop's orders and products over HTTP, each call with the account's access token."""

    def __init__(self, base_url: str, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def orders(self, account: str, since: datetime, until: datetime, cursor: str | None, *, token: str) -> ShopPage:
        query = {"since": since.isoformat(), "until": until.isoformat()}
        return self._page(f"/accounts/{urllib.parse.quote(account)}/orders", query, cursor, token)

    def products(self, account: str, cursor: str | None, *, token: str) -> ShopPage:
        return self._page(f"/accounts/{urllib.parse.quote(account)}/products", {}, cursor, token)

    def _page(self, path: str, query: dict[str, str], cursor: str | None, token: str) -> ShopPage:
        if cursor is not None:
            query = {**query, "cursor": cursor}
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
                headers = ResponseHeaders(response.headers.items())
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc, path) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise ShopUnavailable(f"{path}: {getattr(exc, 'reason', exc)}") from exc
        try:
            data = json.loads(body)
            return ShopPage(list(data["items"]), data["next_cursor"], headers)
        except (ValueError, KeyError, TypeError) as exc:
            raise UnreadablePage(f"the shop returned a page that could not be read ({path}, cursor {cursor})") from exc

    @staticmethod
    def _refusal(exc: urllib.error.HTTPError, path: str) -> ShopError:
        if exc.code == 429:
            wait = _retry_after(exc.headers.get("Retry-After"))
            headers = ResponseHeaders(exc.headers.items())
            return ShopThrottled(f"the shop asked us to slow down ({path}, Retry-After {wait})", wait, headers)
        if exc.code in (401, 403):
            return AccessRevoked(f"the shop refused the account's token: {exc.code} ({path})")
        if exc.code == 404 and "/accounts/" in path:
            return AccountNotFound(f"the shop has no such account ({path})")
        if exc.code >= 500:
            return ShopUnavailable(f"the shop answered {exc.code} ({path})")
        return ShopError(f"the shop answered {exc.code} ({path})")
