"""The shop's HTTP API, on the standard library's threading HTTP server.

    GET  /health
    GET  /accounts
    GET  /accounts/{account}/orders?since=ISO&until=ISO[&cursor=N]   orders placed in [since, until), 50 a page
    GET  /accounts/{account}/products[?cursor=N]                     the catalogue, 50 a page
    GET  /control/status                                             fault settings, whether healed, rate limits
                                                                     and their scheduled changes, and counters (200,
                                                                     429_random, 429_over_limit, 429_ignored_wait,
                                                                     503, unreadable)
    GET  /control/requests[?after=SEQ]                               what was asked and answered (the token
                                                                     endpoint's answers too, ``resource`` token)
    POST /control/heal                                               the broken page works from now on
    POST /control/break                                              it is broken again (no automatic heal)
    POST /control/settings  {"latency": .., "rate_429": .., "rate_503": .., "retry_after": ..,
                             "rate_limits": {"acme": 1}}             change them while the shop runs (a seller's
                                                                     limit: from its next request on); a bad one
                                                                     is a 400 naming it, and nothing changes
    POST /control/connect   {"account": ..}                          the account connects the app: a new grant,
                                                                     answered with its access and refresh token
    POST /control/revoke    {"account": ..}                          its grant is revoked: its refresh answers
                                                                     invalid_grant (the shop revokes
                                                                     ``revoke_account``'s on its own after its first
                                                                     pages: see faults.py)
    POST /oauth/token       grant_type=refresh_token&refresh_token=..&client_id=..&client_secret=..
                                                                     a new access token and a rotated refresh
                                                                     token (see oauth.py)

Every data request carries ``Authorization: Bearer <access token>`` of the account it asks about; without one
that is good now the answer is 401.

Every answer to a data request of a seller with a rate limit (a 200, a 429, any other) announces the limit in
``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset``; a 429 names its wait in
``Retry-After`` besides (see limits.py).

A page is ``{"items": [...], "next_cursor": "50" | null}``; the cursor is an
offset. The request log is what lets a test prove that a retried job asked
for the page where it had stopped, not for the first page again.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import deque
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, parse_qsl, urlsplit

from synclane_demo.shop.catalogue import ACCOUNTS, SELLERS, Catalogue, page
from synclane_demo.shop.faults import UNREADABLE, Fault, Faults
from synclane_demo.shop.limits import Arrival, Limits, checked_limit
from synclane_demo.shop.oauth import OAuth

log = logging.getLogger(__name__)

REQUEST_LOG_SIZE = 100_000


class BadRequest(Exception):
    """The request cannot be answered as asked (400)."""


class Shop:
    """The shop's state, shared by every request thread: its data, its faults and its request log."""

    def __init__(
        self,
        catalogue: Catalogue | None = None,
        faults: Faults | None = None,
        limits: Limits | None = None,
        oauth: OAuth | None = None,
    ) -> None:
        self.catalogue = catalogue or Catalogue()
        self.faults = faults or Faults()
        self.limits = limits or Limits()
        self.oauth = oauth or OAuth()
        """The accounts' grants: who may call, and the token endpoint."""
        self.requests: deque[dict] = deque(maxlen=REQUEST_LOG_SIZE)
        self._sequence = 0
        self._lock = threading.Lock()

    def record(self, entry: dict) -> None:
        with self._lock:
            self._sequence += 1
            self.requests.append({"seq": self._sequence, **entry})

    def requests_after(self, seq: int) -> list[dict]:
        with self._lock:
            return [entry for entry in self.requests if entry["seq"] > seq]


def _instant(query: dict, name: str) -> datetime:
    values = query.get(name)
    if not values:
        raise BadRequest(f"{name} is required")
    try:
        value = datetime.fromisoformat(values[0])
    except ValueError:
        raise BadRequest(f"{name} must be an ISO 8601 instant, got {values[0]!r}") from None
    if value.tzinfo is None:
        raise BadRequest(f"{name} must carry a time zone, got {values[0]!r}")
    return value.astimezone(timezone.utc)


def _cursor(query: dict) -> int:
    raw = (query.get("cursor") or ["0"])[0] or "0"
    if not raw.isdigit():
        raise BadRequest(f"cursor must be a non-negative integer, got {raw!r}")
    return int(raw)


def _rate_limits(value: object) -> dict[str, int]:
    """The ``rate_limits`` of ``/control/settings``: ``{"acme": 1}``, each a seller of the shop's and its new
    requests a second."""
    if not isinstance(value, dict):
        raise BadRequest(
            f'rate_limits must be an object of sellers and their limits, like {{"acme": 1}}, got {value!r}'
        )
    unknown = set(value) - SELLERS
    if unknown:
        raise BadRequest(
            f"rate_limits names no seller of the shop's: {sorted(unknown)} (its sellers: {sorted(SELLERS)})"
        )
    try:
        return {seller: checked_limit(seller, limit) for seller, limit in value.items()}
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _encode(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime) else value


class ShopRequestHandler(BaseHTTPRequestHandler):
    server: "ShopServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    # -- plumbing ----------------------------------------------------------

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: object, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(value, default=_encode).encode(), headers)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return {}
        try:
            value = json.loads(self.rfile.read(length))
        except ValueError:
            raise BadRequest("the body must be JSON") from None
        if not isinstance(value, dict):
            raise BadRequest("the body must be a JSON object")
        return value

    def _form(self) -> dict[str, str]:
        """A form-encoded body (the token endpoint's, as OAuth sends it)."""
        length = int(self.headers.get("Content-Length") or 0)
        return dict(parse_qsl(self.rfile.read(length).decode())) if length else {}

    def _bearer(self) -> str | None:
        """The access token of ``Authorization: Bearer …``, or None."""
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return token.strip() or None if scheme.lower() == "bearer" else None

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        try:
            if method == "GET" and parts == ["health"]:
                return self._json(200, {"ok": True})
            if method == "GET" and parts == ["accounts"]:
                return self._json(200, {"items": [vars(a) for a in ACCOUNTS.values()]})
            if method == "GET" and len(parts) == 3 and parts[0] == "accounts" and parts[2] in ("orders", "products"):
                return self._data(parts[1], parts[2], query)
            if method == "POST" and parts == ["oauth", "token"]:
                return self._token()
            if parts[:1] == ["control"]:
                return self._control(method, parts[1:], query)
            self._json(404, {"error": f"no such endpoint: {method} {url.path}"})
        except BadRequest as exc:
            self._json(400, {"error": str(exc)})

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        self._route("POST")

    # -- the API -----------------------------------------------------------

    def _data(self, account: str, resource: str, query: dict) -> None:
        shop = self.server.shop
        entry: dict = {"at": datetime.now(timezone.utc).isoformat(), "account": account, "resource": resource}
        cursor = _cursor(query)
        entry["cursor"] = cursor
        if resource == "orders":
            since, until = _instant(query, "since"), _instant(query, "until")
            entry.update(since=since.isoformat(), until=until.isoformat())
        seller = ACCOUNTS[account].seller if account in ACCOUNTS else None
        arrival = shop.limits.arrive(seller) if seller is not None else Arrival()  # as it arrives, like a real API
        announced = arrival.headers()  # on every answer below, as a real API announces its limits
        time.sleep(shop.faults.latency)
        if account not in ACCOUNTS:
            shop.record({**entry, "status": 404})
            return self._json(404, {"error": f"no account {account!r}"})
        if shop.oauth.account_of(self._bearer()) != account:
            shop.record({**entry, "status": 401, "fault": "token"})
            unauthorized = {"error": "invalid_token", "error_description": f"no valid token for {account!r}"}
            return self._json(401, unauthorized, announced)
        if arrival.refusal is not None:
            shop.record({**entry, "status": 429, "fault": arrival.refusal.reason})
            refused = {**announced, "Retry-After": str(arrival.refusal.retry_after)}
            return self._json(429, {"error": "slow down"}, refused)
        fault: Fault | None = shop.faults.draw()
        if fault is None and resource == "orders" and shop.faults.breaks(account, since, until, cursor):
            fault = UNREADABLE
        if fault is UNREADABLE:
            shop.limits.count("unreadable")
            shop.record({**entry, "status": 200, "fault": "unreadable"})
            return self._send(200, b'{"items": [{"id": "' + account.encode() + b"-", announced)
        if fault is not None:
            if fault.status == 429 and fault.retry_after is not None and seller is not None:
                shop.limits.named_wait(seller, fault.retry_after)
            shop.limits.count("429_random" if fault.status == 429 else str(fault.status))
            shop.record({**entry, "status": fault.status, "fault": str(fault.status)})
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            message = "slow down" if fault.status == 429 else "the shop is busy, try again later"
            return self._json(fault.status, {"error": message}, {**announced, **headers})
        if resource == "orders":
            items = shop.catalogue.orders(account, since, until, datetime.now(timezone.utc))
        else:
            items = shop.catalogue.products(account)
        chunk, next_cursor = page(items, cursor)
        shop.limits.count("200")
        shop.record({**entry, "status": 200, "count": len(chunk), "next_cursor": next_cursor})
        if shop.faults.revokes_after(account):
            shop.oauth.revoke(account)
            log.info("the grant of account %s is revoked after %d page(s)", account, shop.faults.revoke_after_pages)
        self._json(200, {"items": chunk, "next_cursor": next_cursor}, announced)

    def _token(self) -> None:
        """The token endpoint; each answer is in the request log (``resource`` ``token``), never a token."""
        shop, form = self.server.shop, self._form()
        status, answer = shop.oauth.refresh(form)
        entry = {"at": datetime.now(timezone.utc).isoformat(), "resource": "token", "status": status}
        account = shop.oauth.account_of_refresh(form.get("refresh_token"))
        shop.record({**entry, "account": account, **({"fault": answer["error"]} if "error" in answer else {})})
        self._json(status, answer)

    def _control(self, method: str, parts: list[str], query: dict) -> None:
        faults = self.server.shop.faults
        if method == "GET" and parts == ["status"]:
            shop = self.server.shop
            return self._json(200, {**faults.status(), **shop.limits.status(), **shop.oauth.status()})
        if method == "POST" and parts in (["connect"], ["revoke"]):
            account = self._body().get("account")
            if account not in ACCOUNTS:
                raise BadRequest(f"no account {account!r} to {parts[0]}")
            oauth = self.server.shop.oauth
            if parts == ["connect"]:
                log.info("account %s connected the app: a new grant", account)
                return self._json(200, oauth.connect(account))
            oauth.revoke(account)
            log.info("the grant of account %s is revoked", account)
            return self._json(200, {"revoked": oauth.status()["revoked"]})
        if method == "GET" and parts == ["requests"]:
            after = int((query.get("after") or ["0"])[0])
            return self._json(200, {"items": self.server.shop.requests_after(after)})
        if method == "POST" and parts == ["heal"]:
            faults.heal()
            log.info("the broken page is healed")
            return self._json(200, faults.status())
        if method == "POST" and parts == ["break"]:
            faults.break_again()
            return self._json(200, faults.status())
        if method == "POST" and parts == ["settings"]:
            body = self._body()
            unknown = set(body) - {"latency", "rate_429", "rate_503", "retry_after", "rate_limits"}
            if unknown:
                raise BadRequest(f"unknown settings: {sorted(unknown)}")
            rate_limits = _rate_limits(body.pop("rate_limits", {}))
            for name, value in body.items():  # every setting checked before any is changed
                if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                    raise BadRequest(f"{name} must be a non-negative number, got {value!r}")
            for name, value in body.items():
                setattr(faults, name, value)
            limits = self.server.shop.limits
            limits.change(rate_limits)
            return self._json(200, {**faults.status(), **limits.status()})
        self._json(404, {"error": f"no such control: {method} /control/{'/'.join(parts)}"})


class ShopServer(ThreadingHTTPServer):
    """The HTTP server with its :class:`Shop`; ``start()`` serves on a thread (tests), ``serve_forever()`` in front."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], shop: Shop) -> None:
        super().__init__(address, ShopRequestHandler)
        self.shop = shop
        self._thread: threading.Thread | None = None

    def handle_error(self, request, client_address) -> None:
        """A client that gave up waiting (its timeout) is routine for a slow shop, not a crash to print."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            log.debug("client %s went away before its answer", client_address)
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "ShopServer":
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,), name="shop", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join()
