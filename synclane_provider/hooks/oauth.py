"""The app's OAuth client, from the Airflow connection a queue names (``Queue(oauth_conn_id=...)``).

The connection holds what the provider's developer console gave the app: its host (a whole URL, or a host
name with the scheme in ``schema``) is the token URL, its login the client id, its password the client secret,
and its extra may name the scopes to ask for (``{"scopes": "read write"}``). The engine refreshes owners'
tokens with it and never reads Airflow itself.
"""

from __future__ import annotations

from airflow.sdk import BaseHook

from synclane_provider.core.declare.declarations import Queue
from synclane_provider.core.errors import DeclarationError
from synclane_provider.core.run.tokens import OAuthClient


def oauth_client(queue: Queue) -> OAuthClient | None:
    """The OAuth client of ``queue``'s ``oauth_conn_id``; None when it names none (its owners use API keys)."""
    conn_id = queue.oauth_conn_id
    if conn_id is None:
        return None
    conn = BaseHook.get_connection(conn_id)
    named = f"the connection {conn_id!r} (oauth_conn_id of queue {queue.name!r})"
    if not conn.host:
        raise DeclarationError(f"{named} has no host: set it to the token URL, e.g. https://example.com/oauth/token")
    if not conn.login:
        raise DeclarationError(f"{named} has no login: set it to the app's OAuth client id")
    token_url = conn.host
    if "://" not in token_url:
        port = f":{conn.port}" if conn.port else ""
        token_url = f"{conn.schema or 'https'}://{conn.host}{port}"
    scopes = conn.extra_dejson.get("scopes")
    if scopes is not None and not isinstance(scopes, str):
        raise DeclarationError(f"{named}: extra scopes must be a space-separated string, got {scopes!r}")
    return OAuthClient(token_url, conn.login, conn.password or None, scopes=scopes or None)
