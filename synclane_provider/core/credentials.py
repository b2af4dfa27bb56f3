"""An owner's credentials: what they are, how they are sealed for the table, and the only thing ever shown of them.

Credentials are kept in the jobs database (``credentials``, migration 0021) encrypted with Fernet (AES with an
HMAC, from ``cryptography``, Airflow's own dependency). The key is the caller's: the engine never reads a
configuration, the provider hands it ``[synclane] credentials_key`` or else Airflow's ``[core] fernet_key``. A
value read from the table is remembered by :mod:`~synclane_provider.core.redact`, so that an error quoting it is
stored with ``***`` in its place.

What leaves the engine for a person (the CLI, the page) is a :class:`CredentialState`: set or not, when it
expires, when it was refreshed, whether it needs reconnecting -- never a value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from synclane_provider.core.durations import duration_text
from synclane_provider.core.errors import OwnerPaused, SyncLaneError
from synclane_provider.core.records import PAUSED_BY_CREDENTIALS
from synclane_provider.core.redact import remember_secret

DEFAULT_SKEW = timedelta(minutes=2)
"""How long before its expiry an access token is refreshed: a page started with it must not outlive it."""


class CredentialKeyError(SyncLaneError):
    """No key to seal credentials with, a key that is not a Fernet key, or a table sealed with another key."""


class CredentialsNeedReconnecting(OwnerPaused):
    """The owner has no credentials a page can use: none set, or the provider refused its grant itself
    (``invalid_grant``: revoked, or a refresh token used twice). No retry helps, only new credentials from a
    person (``airflow synclane credentials set OWNER``).

    Raised out of a handler (``job.credentials()`` raises it), it pauses the owner as :class:`OwnerPaused` does,
    ``paused_by='credentials'`` with the reason ``needs reconnecting: <why>``; setting the owner's credentials
    resumes it.
    """

    paused_by = PAUSED_BY_CREDENTIALS

    def __init__(self, why: str) -> None:
        super().__init__(f"needs reconnecting: {why}")
        self.why = why


class TokenEndpointError(SyncLaneError):
    """The token endpoint refused the app itself (a wrong client id or secret, a bad token URL): the app's
    OAuth client needs fixing, not the owner."""


class TokenEndpointUnavailable(SyncLaneError):
    """The token endpoint did not answer, or answered 5xx or 429, on every try: a passing trouble, not the
    owner's fault (nothing is marked on the owner)."""


class CredentialKind(str, Enum):
    """An API key (sent as it is, never expires by itself) or OAuth tokens (refreshed before they expire)."""

    API_KEY = "api_key"
    OAUTH = "oauth"


@dataclass(frozen=True, repr=False)
class Credentials:
    """An owner's credentials in clear, as the engine holds them in memory for a moment: never printed.

    ``api_key`` for :attr:`CredentialKind.API_KEY`; ``access_token`` and ``refresh_token`` (and the access
    token's ``expires_at``, when the provider says) for :attr:`CredentialKind.OAUTH`.
    """

    kind: CredentialKind
    api_key: str | None = None
    access_token: str | None = None
    refresh_token: str | None = None
    expires_at: datetime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, CredentialKind):
            object.__setattr__(self, "kind", _kind(self.kind))
        if self.kind is CredentialKind.API_KEY and not _given(self.api_key):
            raise ValueError("credentials of kind api_key need an api_key")
        if self.kind is CredentialKind.OAUTH and not (_given(self.access_token) or _given(self.refresh_token)):
            raise ValueError("credentials of kind oauth need an access_token or a refresh_token (or both)")
        if self.expires_at is not None and self.expires_at.tzinfo is None:
            raise ValueError(f"expires_at must have a time zone, got {self.expires_at.isoformat()}")

    def __repr__(self) -> str:  # a credential in a traceback or a log line shows no value
        return f"Credentials(kind={self.kind.value}, expires_at={self.expires_at})"

    @classmethod
    def from_text(cls, text: str, *, now: datetime) -> Credentials:
        """Credentials as a person hands them over (a file, stdin, a form): a JSON object with ``api_key``, or with
        ``access_token``, ``refresh_token`` and ``expires_at`` (ISO 8601) or ``expires_in`` (seconds from ``now``);
        or, not JSON, the text itself as an API key. Errors name the fields, never a value.
        """
        text = text.strip()
        if not text.startswith("{"):
            return cls(CredentialKind.API_KEY, api_key=text)
        try:
            given = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"credentials are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
            ) from None
        unknown = sorted(set(given) - set(_FIELDS))
        if unknown:
            raise ValueError(f"unknown credential fields {', '.join(unknown)}: the fields are {', '.join(_FIELDS)}")
        if "expires_at" in given and "expires_in" in given:
            raise ValueError("give expires_at or expires_in, not both")
        expires_at = given.get("expires_at")
        if isinstance(expires_at, str):
            try:
                expires_at = datetime.fromisoformat(expires_at)
            except ValueError:
                raise ValueError("expires_at must be an ISO 8601 time with a time zone") from None
        if "expires_in" in given:
            if not isinstance(given["expires_in"], int | float) or given["expires_in"] <= 0:
                raise ValueError("expires_in must be a positive number of seconds")
            expires_at = now + timedelta(seconds=given["expires_in"])
        kind = CredentialKind.API_KEY if "api_key" in given else CredentialKind.OAUTH
        return cls(
            kind,
            api_key=given.get("api_key"),
            access_token=given.get("access_token"),
            refresh_token=given.get("refresh_token"),
            expires_at=expires_at,
        )

    def values(self) -> list[str]:
        """The secret values it holds."""
        return [v for v in (self.api_key, self.access_token, self.refresh_token) if v]


_FIELDS = ("api_key", "access_token", "refresh_token", "expires_at", "expires_in")
"""The fields :meth:`Credentials.from_text` reads."""


def _given(value: str | None) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _kind(value: object) -> CredentialKind:
    try:
        return CredentialKind(value)
    except ValueError:
        known = ", ".join(kind.value for kind in CredentialKind)
        raise ValueError(f"unknown credential kind {value!r}: one of {known}") from None


class Sealer:
    """Seals credentials for the table and opens them again, with the caller's Fernet key(s).

    Several keys (comma-separated, the newest first, as Airflow's ``fernet_key``) let a key be rotated: the
    first seals, any opens. No key is refused when one is needed, not before (a bad one at once).
    """

    def __init__(self, key: str | None, *, named: str = "the credentials key") -> None:
        self._named = named
        self._fernet: MultiFernet | None = None
        if key and key.strip():
            try:
                self._fernet = MultiFernet([Fernet(part.strip().encode()) for part in key.split(",") if part.strip()])
            except ValueError:
                raise CredentialKeyError(
                    f"{named} is not a Fernet key (32 url-safe base64-encoded bytes); its value is not shown"
                ) from None

    def _key(self) -> MultiFernet:
        """The key, or an error naming what to set: a process that never touches credentials needs none."""
        if self._fernet is None:
            raise CredentialKeyError(
                f"no key to encrypt owners' credentials: set {self._named} to a Fernet key "
                "(python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
            )
        return self._fernet

    def seal(self, credentials: Credentials) -> str:
        """The credentials encrypted, as text for the table."""
        plain = {"api_key": credentials.api_key, "access_token": credentials.access_token}
        plain["refresh_token"] = credentials.refresh_token
        return self._key().encrypt(json.dumps(plain).encode()).decode()

    def open(self, sealed: str, *, kind: str, expires_at: datetime | None, whose: str) -> Credentials:
        """The credentials ``sealed`` holds, each value remembered for redaction; ``whose`` names them in an error."""
        try:
            plain: dict[str, Any] = json.loads(self._key().decrypt(sealed.encode()))
        except InvalidToken:
            raise CredentialKeyError(
                f"the credentials of {whose} cannot be decrypted with {self._named}: they were set with another key "
                "(set the key they were set with, or set the credentials again)"
            ) from None
        credentials = Credentials(_kind(kind), expires_at=expires_at, **plain)
        for value in credentials.values():
            remember_secret(value)
        return credentials


@dataclass(frozen=True)
class CredentialState:
    """What may be shown of an owner's credentials: whether they are set and how they stand, never a value."""

    queue: str
    owner: str
    kind: str | None = None
    expires_at: datetime | None = None
    refreshed_at: datetime | None = None
    needs_reconnecting_at: datetime | None = None
    needs_reconnecting_reason: str | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> CredentialState:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in row})

    @property
    def is_set(self) -> bool:
        return self.kind is not None

    def describe(self, now: datetime) -> str:
        """``not set``, ``needs reconnecting: …``, or ``set (api_key)`` / ``set (oauth), expires in 4 min,
        refreshed 10 min ago``: the state in words, as the CLI and the page say it."""
        if not self.is_set:
            return "not set"
        if self.needs_reconnecting_at is not None:
            return f"needs reconnecting: {self.needs_reconnecting_reason}"
        words = [f"set ({self.kind})"]
        if self.expires_at is not None:
            left = self.expires_at - now
            words.append(
                f"expires in {duration_text(left)}"
                if left.total_seconds() > 0
                else f"expired {duration_text(-left)} ago"
            )
        if self.refreshed_at is not None:
            words.append(f"refreshed {duration_text(now - self.refreshed_at)} ago")
        return ", ".join(words)
