"""The shop's OAuth 2.0: access tokens that expire in a few minutes, refresh tokens that rotate, grants it revokes.

An account connects the app once (``connect``: what a person's "Connect your shop" click gives, here a control
call), and the app gets a *grant*: an access token good for ``lifetime`` seconds and a refresh token. The app
refreshes at the token endpoint (``POST /oauth/token``, the refresh grant of RFC 6749 section 6, client id and
secret in the form) and each refresh answers a new access token and a *new* refresh token; the one it was
sent is spent. A spent refresh token sent again revokes the whole grant (reuse detection, as Salesforce, Auth0
and Okta do): two processes refreshing at once would lose the account.

A revoked grant (``revoke``: the user disconnected the app, or the reuse above) answers ``invalid_grant`` to
its refresh; an access token already issued works out its few minutes, as self-contained tokens do. Only a
new ``connect`` (and its tokens set for the owner) brings the account back.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

DEFAULT_LIFETIME = 300.0
"""Seconds an access token is good for: a few minutes, so the demo refreshes often."""
CLIENT_ID = "synclane-demo"
"""The app's OAuth client id at the shop (the demo's Airflow connection ``synclane_demo_shop_oauth``)."""
CLIENT_SECRET = "shop-demo-client-secret-4711"
"""Its client secret: a pretend shop's pretend secret, the same in every demo."""


@dataclass
class Grant:
    """One account's connection of the app: its current refresh token, and the access tokens it issued."""

    account: str
    refresh_token: str
    revoked: bool = False
    access_tokens: dict[str, float] = field(default_factory=dict)
    """Each access token issued, with when it expires (``time.time()``)."""


class OAuth:
    """The grants of every account; thread-safe (the shop answers on many threads)."""

    def __init__(
        self, *, lifetime: float = DEFAULT_LIFETIME, client_id: str = CLIENT_ID, client_secret: str = CLIENT_SECRET
    ) -> None:
        if lifetime <= 0:
            raise ValueError(f"the token lifetime must be a positive number of seconds, got {lifetime}")
        self.lifetime = lifetime
        self.client_id, self.client_secret = client_id, client_secret
        self.counters = {"refreshed": 0, "invalid_grant": 0}
        self._grants: dict[str, Grant] = {}  # by every refresh token a grant has had, current or spent
        self._lock = threading.Lock()

    def connect(self, account: str) -> dict[str, object]:
        """A new grant for ``account`` (a reconnect: any earlier one of it is revoked): its ``access_token``,
        ``refresh_token`` and ``expires_in``, as ``airflow synclane credentials set`` reads them from stdin."""
        with self._lock:
            for grant in self._grants.values():
                if grant.account == account:
                    grant.revoked = True
            grant = Grant(account, "rt_" + secrets.token_urlsafe(16))
            self._grants[grant.refresh_token] = grant
            issued = self._issue(grant)
            del issued["token_type"]
            return issued

    def revoke(self, account: str) -> bool:
        """Revoke the account's grants (the user disconnected the app); False when it had none in force."""
        with self._lock:
            live = [grant for grant in self._grants.values() if grant.account == account and not grant.revoked]
            for grant in live:
                grant.revoked = True
            return bool(live)

    def account_of(self, access_token: str | None) -> str | None:
        """The account ``access_token`` is good for now, or None (unknown or expired)."""
        if not access_token:
            return None
        now = time.time()
        with self._lock:
            for grant in self._grants.values():
                expires = grant.access_tokens.get(access_token)
                if expires is not None:
                    return grant.account if expires > now else None
        return None

    def account_of_refresh(self, refresh_token: str | None) -> str | None:
        """The account whose grant ``refresh_token`` is (or was) of, or None: for the shop's request log."""
        with self._lock:
            grant = self._grants.get(refresh_token or "")
            return grant.account if grant is not None else None

    def refresh(self, form: dict[str, str]) -> tuple[int, dict[str, object]]:
        """The token endpoint's answer to ``form``: (status, JSON body) as RFC 6749 section 5 says."""
        if form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
            return 401, {"error": "invalid_client", "error_description": "unknown client id or wrong secret"}
        if form.get("grant_type") != "refresh_token":
            return 400, {"error": "unsupported_grant_type"}
        with self._lock:
            grant = self._grants.get(form.get("refresh_token") or "")
            if grant is None or grant.revoked:
                self.counters["invalid_grant"] += 1
                return 400, {"error": "invalid_grant", "error_description": "the grant was revoked or never existed"}
            if form["refresh_token"] != grant.refresh_token:  # spent: someone refreshed with it already
                grant.revoked = True
                self.counters["invalid_grant"] += 1
                return 400, {"error": "invalid_grant", "error_description": "refresh token reused: grant revoked"}
            grant.refresh_token = "rt_" + secrets.token_urlsafe(16)
            self._grants[grant.refresh_token] = grant
            self.counters["refreshed"] += 1
            return 200, self._issue(grant)

    def status(self) -> dict[str, object]:
        """What a person checking the shop may see: the lifetime, the counters, which accounts are revoked."""
        with self._lock:
            accounts = {grant.account for grant in self._grants.values()}
            live = {grant.account for grant in self._grants.values() if not grant.revoked}
        return {"token_lifetime": self.lifetime, "oauth": dict(self.counters), "revoked": sorted(accounts - live)}

    def _issue(self, grant: Grant) -> dict[str, object]:
        access = "at_" + secrets.token_urlsafe(16)
        grant.access_tokens[access] = time.time() + self.lifetime
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.lifetime,
            "refresh_token": grant.refresh_token,
        }
