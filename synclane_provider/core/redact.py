"""Secrets taken out of a text before it is stored or sent: ``***`` in place of each.

A handler's exception text goes into ``jobs.error``, and from there to the page, its JSON, the CLI, the
health alerts and the asset events; an HTTP client's error names the URL it called, query string and all.
So every error text is passed through :func:`redact` where it is made (``core/run/outcomes.py``), once,
and every surface shows what was stored. Three things are taken out:

* every secret value the process knows (:func:`remember_secret`: each owner's credential as it is read,
  and whatever the caller registers);
* values of sensitive-looking names, whatever the form: ``?api_key=…`` in a URL, ``token=…`` in text,
  ``"password": "…"`` in JSON or a dict's repr, ``Authorization: Bearer …`` / ``Basic …`` headers, a bare
  ``Bearer …`` and a URL's ``user:password@``;
* whatever the other redactors added by :func:`add_redactor` take out (the provider adds Airflow's own
  secrets masker, which the engine cannot import).

>>> redact("401 Unauthorized for https://api.example.com/v1/orders?api_key=sk_live_abc123&page=2")
'401 Unauthorized for https://api.example.com/v1/orders?api_key=***&page=2'
>>> redact('sent {"client_id": "app", "client_secret": "s3cr3t-value"}')
'sent {"client_id": "app", "client_secret": "***"}'
>>> redact("headers: Authorization: Bearer eyJhbGciOi.payload.sig")
'headers: Authorization: Bearer ***'
>>> redact("a monkey=banana, a primary key of 3")
'a monkey=banana, a primary key of 3'
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

MASK = "***"
"""What stands in place of a secret."""

MIN_SECRET_LENGTH = 4
"""Shorter registered values are not masked by value (they would cut up ordinary words); by name they still are."""

_NAME = (
    r"(?:[A-Za-z0-9]*[_.-])*"  # any leading words: aws_secret_access_…, x-api-…, oauth.…
    r"(?:api|access|refresh|id|client|private|secret|session|auth|bearer)?[_-]?"  # glued: apiKey, accessToken
    r"(?:key|token|secret|password|passwd|pwd|signature|credentials?|authorization|auth)"
)
"""A sensitive-looking name (case-insensitive): one that ends in key, token, secret, password, … as a word."""

_SCHEME = r"(?:(?:bearer|basic|token|digest|negotiate)\s+)?"

_NAMED_VALUE = re.compile(
    rf"(?<![A-Za-z0-9_])(?P<q>[\"']?)(?P<name>{_NAME})(?P=q)(?P<sep>\s*[=:]\s*)(?P<scheme>{_SCHEME})"
    r"(?:(?P<quote>[\"'])(?P<quoted>(?:\\.|(?!(?P=quote)).)*)(?P=quote)"
    r"|(?!\d{1,5}(?![^\s&,;\"'<>(){}\[\]]))(?P<bare>[^\s&,;\"'<>(){}\[\]]+))",
    re.IGNORECASE,
)
"""``name=value``, ``name: value``, ``"name": "value"``, ``'name': 'value'`` and ``Authorization: Bearer value``.
A bare number of up to five digits is left alone: in ``the token: 401`` it is the answer, not a secret."""

_BEARER = re.compile(r"(?<![A-Za-z0-9_])(bearer\s+)(?!\*\*\*)[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE)
"""A bearer token named on its own (``… with Bearer abc.def …``)."""

_USERINFO = re.compile(r"(://[^/\s:@]+:)[^/\s@]+(@)")
"""A password in a URL: ``https://user:password@host``."""

_lock = threading.Lock()
_secrets: set[str] = set()
_redactors: list[Callable[[str], str]] = []
_listeners: list[Callable[[str], None]] = []


def remember_secret(value: str) -> None:
    """Mask ``value`` wherever it appears in a text redacted by this process from now on, and tell each
    listener (:func:`add_secret_listener`: the provider's, which hands it to Airflow's masker for the task log)."""
    if len(value) < MIN_SECRET_LENGTH:
        return
    with _lock:
        if value in _secrets:
            return
        _secrets.add(value)
        listeners = list(_listeners)
    for listener in listeners:
        listener(value)


def add_secret_listener(listener: Callable[[str], None]) -> None:
    """Call ``listener`` with every secret value remembered from now on (once, however often it is added)."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)


def add_redactor(redactor: Callable[[str], str]) -> None:
    """Pass every redacted text through ``redactor`` too (once, however often it is added)."""
    with _lock:
        if redactor not in _redactors:
            _redactors.append(redactor)


def redact(text: str) -> str:
    """``text`` with every secret it shows replaced by ``***`` (see the module's docstring)."""
    with _lock:
        secrets, redactors = sorted(_secrets, key=len, reverse=True), list(_redactors)
    for secret in secrets:  # the longest first: a secret that holds a shorter one is masked whole
        text = text.replace(secret, MASK)
    text = _NAMED_VALUE.sub(_masked_value, text)
    text = _BEARER.sub(rf"\1{MASK}", text)
    text = _USERINFO.sub(rf"\1{MASK}\2", text)
    for redactor in redactors:
        text = redactor(text)
    return text


def _masked_value(match: re.Match[str]) -> str:
    quote = match["quote"] or ""
    q = match["q"]
    return f"{q}{match['name']}{q}{match['sep']}{match['scheme']}{quote}{MASK}{quote}"
