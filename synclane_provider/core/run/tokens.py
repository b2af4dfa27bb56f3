"""A currently valid credential for an owner: an OAuth access token refreshed once, by one caller, everywhere.

With refresh-token rotation (Salesforce, Xero, QuickBooks, …) each refresh token works once: two processes
refreshing the same owner at once send the same refresh token twice, and the provider revokes the grant --
the account must then be reconnected by a person. So a refresh is done by one caller at a time across every
process and machine, under a PostgreSQL advisory lock per owner held by a transaction:

1. no lock while the stored access token is good for more than ``skew``: read, decrypt, return;
2. otherwise one thread per process (a lock per owner in the process, so that 64 threads of one worker hold
   one connection, not 64) takes the owner's database lock (``lock_owner_credentials``), reads the row again
   -- another process may have refreshed meanwhile, then it returns that token -- and else calls the token
   endpoint and stores (commits) the new access token *and the rotated refresh token* before returning, so a
   process killed after the commit loses nothing, and one killed before it has not used the new token;
3. ``invalid_grant`` marks the owner's credentials "needs reconnecting" (committed) and raises
   :class:`~synclane_provider.core.credentials.CredentialsNeedReconnecting`; a 5xx, a 429 or no answer is
   retried with backoff and, if it lasts, raised as
   :class:`~synclane_provider.core.credentials.TokenEndpointUnavailable`, marking nothing.

Not wired to jobs yet: ``job.credentials()`` will call :meth:`TokenSource.credential`.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from synclane_provider.core.credentials import (
    DEFAULT_SKEW,
    CredentialKind,
    Credentials,
    CredentialsNeedReconnecting,
    Sealer,
    TokenEndpointError,
    TokenEndpointUnavailable,
)
from synclane_provider.core.db.database import Database, Session
from synclane_provider.core.db.store import Store
from synclane_provider.core.redact import redact, remember_secret


@dataclass(frozen=True, repr=False)
class OAuthClient:
    """The app's own OAuth client (from an Airflow connection, in the provider): where and as whom to refresh."""

    token_url: str
    client_id: str
    client_secret: str | None = None
    scopes: str | None = None
    """Asked for with each refresh (``scope``, space-separated), when the provider wants them named again."""
    timeout: float = 10.0
    tries: int = 4
    """Tries of the token endpoint for one refresh while it answers 5xx or 429 or does not answer."""

    def __repr__(self) -> str:
        return f"OAuthClient(token_url={self.token_url!r}, client_id={self.client_id!r})"


class TokenSource:
    """Hands out each owner's current credential, refreshing OAuth tokens as the module's docstring says.

    ``client`` is None for a queue without ``oauth_conn_id``: its owners' API keys are handed out, an OAuth
    token that needs refreshing is an error naming that setting. ``clock`` gives the time expiry is compared with (the machine's; the token endpoint's ``expires_in`` is
    counted from it too). Thread-safe; one per process is enough.
    """

    def __init__(
        self,
        database: Database,
        sealer: Sealer,
        client: OAuthClient | None,
        *,
        skew: timedelta = DEFAULT_SKEW,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._database = database
        self._sealer = sealer
        self._client = client
        self._skew = skew
        self._clock = clock
        self._sleep = sleep
        self._session = Session(database)
        self._store = Store(self._session)
        self._owner_locks: dict[tuple[str, str], threading.Lock] = {}
        self._owner_locks_lock = threading.Lock()

    def close(self) -> None:
        self._session.close()

    def credential(self, queue: str, owner: str) -> str:
        """The owner's API key, or an access token good for at least ``skew`` (refreshed when it is not)."""
        current = self._read(self._store, queue, owner)
        if self._good(current):
            return self._secret(current)
        with self._owner_lock(queue, owner):
            current = self._read(self._store, queue, owner)  # another thread of this process may have refreshed
            if self._good(current):
                return self._secret(current)
            return self._refresh_under_lock(queue, owner)

    def _good(self, credentials: Credentials) -> bool:
        if credentials.kind is CredentialKind.API_KEY:
            return True
        expires_at = credentials.expires_at
        return credentials.access_token is not None and (expires_at is None or expires_at - self._skew > self._clock())

    @staticmethod
    def _secret(credentials: Credentials) -> str:
        value = credentials.api_key if credentials.kind is CredentialKind.API_KEY else credentials.access_token
        assert value is not None
        return value

    def _owner_lock(self, queue: str, owner: str) -> threading.Lock:
        with self._owner_locks_lock:
            return self._owner_locks.setdefault((queue, owner), threading.Lock())

    def _read(self, store: Store, queue: str, owner: str) -> Credentials:
        row = store.sealed_credentials(queue, owner)
        if row is None:
            raise CredentialsNeedReconnecting(f"owner {owner!r} of queue {queue!r} has no credentials set")
        if row["needs_reconnecting_at"] is not None:
            raise CredentialsNeedReconnecting(f"owner {owner!r} of queue {queue!r}: {row['needs_reconnecting_reason']}")
        return self._sealer.open(
            row["sealed"], kind=row["kind"], expires_at=row["expires_at"], whose=f"{queue}/{owner}"
        )

    def _refresh_under_lock(self, queue: str, owner: str) -> str:
        """Hold the owner's database lock in a transaction: read again, refresh if still needed, store, commit."""
        conn = self._database.connect()
        try:
            with conn.transaction():
                store = Store(Session.pinned(self._database, conn))
                store.lock_owner_credentials(queue, owner)
                current = self._read(store, queue, owner)  # what the holder before us stored, if anyone did
                if self._good(current):
                    return self._secret(current)
                if not current.refresh_token:
                    raise CredentialsNeedReconnecting(
                        f"owner {owner!r} of queue {queue!r}: its access token expired and it has no refresh token"
                    )
                try:
                    answer = self._token_request(self._oauth_client(queue), current.refresh_token)
                except CredentialsNeedReconnecting as refused:
                    store.credentials_need_reconnecting(queue, owner, reason=refused.why, now=None)
                    refreshed = None
                    error: CredentialsNeedReconnecting | None = refused
                else:
                    refreshed, error = self._refreshed(current, answer), None
                    store.store_refreshed_credentials(
                        queue, owner, sealed=self._sealer.seal(refreshed), expires_at=refreshed.expires_at, now=None
                    )
            # committed: the rotated refresh token is kept before the new access token is used
            if error is not None:
                raise CredentialsNeedReconnecting(f"owner {owner!r} of queue {queue!r}: {error.why}")
            assert refreshed is not None and refreshed.access_token is not None
            return refreshed.access_token
        finally:
            conn.close()

    def _refreshed(self, current: Credentials, answer: dict[str, Any]) -> Credentials:
        access_token = answer.get("access_token")
        if not isinstance(access_token, str) or not access_token:
            raise TokenEndpointError("the token endpoint's answer has no access_token")
        expires_in = answer.get("expires_in")
        expires_at = self._clock() + timedelta(seconds=float(expires_in)) if expires_in is not None else None
        rotated = answer.get("refresh_token") or current.refresh_token  # a provider that does not rotate keeps it
        for value in (access_token, rotated):
            if isinstance(value, str):
                remember_secret(value)
        return replace(current, access_token=access_token, refresh_token=rotated, expires_at=expires_at)

    def _oauth_client(self, queue: str) -> OAuthClient:
        if self._client is None:
            raise TokenEndpointError(
                f"queue {queue!r} has no OAuth client to refresh tokens with: set oauth_conn_id of the queue to the "
                "Airflow connection of the app's OAuth client (its host the token URL, login the client id, "
                "password the client secret)"
            )
        return self._client

    def _token_request(self, client: OAuthClient, refresh_token: str) -> dict[str, Any]:
        """POST the refresh grant; transient answers retried with backoff, ``invalid_grant`` raised as such."""
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client.client_id}
        if client.client_secret:
            form["client_secret"] = client.client_secret
        if client.scopes:
            form["scope"] = client.scopes
        body = urllib.parse.urlencode(form).encode()
        wait, last = 0.2, "no try made"
        for attempt in range(1, client.tries + 1):
            request = urllib.request.Request(
                client.token_url,
                data=body,
                headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=client.timeout) as response:  # noqa: S310
                    answer: dict[str, Any] = json.loads(response.read())
                    return answer
            except urllib.error.HTTPError as refused:
                status, error = refused.code, _oauth_error(refused)
                if status == 400 and error.startswith("invalid_grant"):
                    raise CredentialsNeedReconnecting(f"the token endpoint answered {error}") from None
                if status < 500 and status != 429:
                    raise TokenEndpointError(f"the token endpoint answered {status} {error}") from None
                last = f"{status} {error}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as lost:
                last = redact(f"{type(lost).__name__}: {getattr(lost, 'reason', lost)}")
            if attempt < client.tries:
                self._sleep(wait)
                wait *= 2
        raise TokenEndpointUnavailable(f"the token endpoint failed {client.tries} tries, the last: {last}")


def _oauth_error(refused: urllib.error.HTTPError) -> str:
    """``error: description`` from an OAuth error answer (RFC 6749 5.2), redacted; the status text otherwise."""
    try:
        answer = json.loads(refused.read() or b"{}")
    except (ValueError, OSError):
        answer = {}
    if not isinstance(answer, dict) or "error" not in answer:
        return redact(str(refused.reason))
    described = answer.get("error_description")
    return redact(f"{answer['error']}: {described}" if described else str(answer["error"]))
