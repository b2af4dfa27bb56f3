"""Airflow's secrets masker and the engine's redaction, joined both ways.

The engine cannot import Airflow, so the provider hands it Airflow's ``redact`` (every connection password and
variable Airflow masks is then taken out of what the engine stores too) and hands Airflow every credential the
engine remembers (the task log then masks it as well). Called where the provider builds the engine's database
(the hook), so every operator, the CLI and the page are joined before they store or show anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from synclane_provider.core.redact import add_redactor, add_secret_listener


def join_airflow_masker() -> None:
    """Redact with Airflow's masker too, and mask in Airflow's logs what the engine remembers (idempotent)."""
    redact, mask = _airflow_masker()
    add_redactor(_as_text(redact))
    add_secret_listener(mask)


def _airflow_masker() -> tuple[Callable[..., Any], Callable[..., None]]:
    """Airflow's ``redact`` and ``mask_secret``: the task SDK's (3.x), else the older core module's."""
    try:
        from airflow.sdk._shared.secrets_masker import mask_secret, redact
    except ImportError:  # pragma: no cover - Airflow before the shared masker
        from airflow.utils.log.secrets_masker import mask_secret, redact  # type: ignore[no-redef]
    return redact, mask_secret


_joined: dict[Callable[..., Any], Callable[[str], str]] = {}


def _as_text(redact: Callable[..., Any]) -> Callable[[str], str]:
    """``redact`` as a text-to-text function (the same object each time, so adding it twice adds it once)."""
    if redact not in _joined:

        def redacted(text: str) -> str:
            result = redact(text)
            return result if isinstance(result, str) else text

        _joined[redact] = redacted
    return _joined[redact]
