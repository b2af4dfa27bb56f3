"""A real OAuth 2.0 token endpoint on a local port, for the tests: not a mock of our code, an HTTP server that
speaks the refresh grant (RFC 6749 section 6) the way the strict providers do.

* access tokens live ``lifetime`` seconds (``expires_in``);
* refresh tokens rotate: each refresh answers a new one, and the one it was sent is spent;
* a spent refresh token sent again revokes the whole grant (the reuse detection of Salesforce, Auth0, Okta):
  that request and every later one for the grant answer 400 ``invalid_grant``;
* ``fail_next(n, status)`` makes the next n requests answer ``status`` (a 503 the caller should retry);
* a wrong client id or secret answers 401 ``invalid_client``;
* with ``stall`` set, an answer is sent but its last byte, ``issued`` is set, and the rest waits for
  ``stall`` to be cleared: a test kills the caller after the provider issued its tokens and before the caller
  could store them.

It counts what it was asked (``token_requests``) and how often it answered ``invalid_grant``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Grant:
    refresh_token: str
    spent: set[str] = field(default_factory=set)
    revoked: bool = False
    access_tokens: dict[str, float] = field(default_factory=dict)


class OAuthServer:
    """Start with ``with OAuthServer() as server``; ``server.token_url`` is its token endpoint."""

    def __init__(
        self, *, lifetime: float = 60.0, client_id: str = "synclane-app", client_secret: str = "app-secret-5150"
    ):
        self.lifetime = lifetime
        self.client_id, self.client_secret = client_id, client_secret
        self.token_requests = 0
        self.invalid_grants = 0
        self.answer_delay = 0.0
        self.stall = False
        self.issued = threading.Event()
        self.released = threading.Event()
        self._grants: dict[str, Grant] = {}  # by the grant's current or spent refresh tokens
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="oauth-server", daemon=True)

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/token"

    def __enter__(self) -> OAuthServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(10)

    def grant(self) -> tuple[str, str]:
        """A new grant, as an owner's connecting gives it: (access token, refresh token)."""
        with self._lock:
            refresh = "rt_" + secrets.token_urlsafe(12)
            grant = self._grants[refresh] = Grant(refresh)
            access = "at_" + secrets.token_urlsafe(12)
            grant.access_tokens[access] = time.time() + self.lifetime
            return access, refresh

    def current_refresh_token(self, refresh_token: str) -> str:
        """The refresh token now valid for the grant ``refresh_token`` (any of its tokens) belongs to."""
        with self._lock:
            return self._grants[refresh_token].refresh_token

    def revoked(self, refresh_token: str) -> bool:
        with self._lock:
            return self._grants[refresh_token].revoked

    def revoke(self, refresh_token: str) -> None:
        """The user disconnects the app at the provider."""
        with self._lock:
            self._grants[refresh_token].revoked = True

    def valid(self, access_token: str) -> bool:
        """Whether an API call with ``access_token`` would be accepted now."""
        with self._lock:
            for grant in self._grants.values():
                if access_token in grant.access_tokens:
                    return not grant.revoked and grant.access_tokens[access_token] > time.time()
            return False

    def fail_next(self, times: int, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * times)

    def _refresh(self, form: dict[str, str]) -> tuple[int, dict[str, object]]:
        with self._lock:
            self.token_requests += 1
            if self._failures:
                return self._failures.pop(0), {"error": "temporarily_unavailable"}
            if form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
                return 401, {"error": "invalid_client"}
            if form.get("grant_type") != "refresh_token":
                return 400, {"error": "unsupported_grant_type"}
            grant = self._grants.get(form.get("refresh_token", ""))
            if grant is None or grant.revoked:
                self.invalid_grants += 1
                return 400, {"error": "invalid_grant", "error_description": "unknown or revoked refresh token"}
            if form["refresh_token"] != grant.refresh_token:  # a spent one: someone else refreshed with it before
                grant.revoked = True
                self.invalid_grants += 1
                return 400, {"error": "invalid_grant", "error_description": "refresh token reused: grant revoked"}
            grant.spent.add(grant.refresh_token)
            grant.refresh_token = "rt_" + secrets.token_urlsafe(12)
            self._grants[grant.refresh_token] = grant
            access = "at_" + secrets.token_urlsafe(12)
            grant.access_tokens[access] = time.time() + self.lifetime
            answer = {
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": self.lifetime,
                "refresh_token": grant.refresh_token,
            }
            return 200, answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                if server.answer_delay:
                    time.sleep(server.answer_delay)
                status, answer = server._refresh(form) if self.path == "/token" else (404, {"error": "not_found"})
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if server.stall and status == 200:
                    self.wfile.write(body[:-1])
                    self.wfile.flush()
                    server.issued.set()
                    server.released.wait(30)
                    body = body[-1:]
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

        return Handler
