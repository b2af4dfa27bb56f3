"""A process of callers of one owner's credential, for the refresh test across processes: ``THREADS`` threads on
one :class:`TokenSource`, released together when the test writes a line to stdin; prints the tokens as JSON.

    python tests/support/token_callers.py DATABASE_URL SCHEMA KEY TOKEN_URL CLIENT_ID CLIENT_SECRET THREADS
"""

from __future__ import annotations

import json
import sys
import threading

from synclane_provider.core import Database
from synclane_provider.core.credentials import Sealer
from synclane_provider.core.run.tokens import OAuthClient, TokenSource


def main() -> None:
    url, schema, key, token_url, client_id, client_secret, threads = sys.argv[1:8]
    database = Database(url, schema=schema)
    source = TokenSource(database, Sealer(key), OAuthClient(token_url, client_id, client_secret))
    go = threading.Event()
    tokens: list[str] = []
    errors: list[str] = []

    def call() -> None:
        go.wait()
        try:
            tokens.append(source.credential("shops", "acme"))
        except Exception as exc:  # noqa: BLE001 - reported to the test
            errors.append(f"{type(exc).__name__}: {exc}")

    started = [threading.Thread(target=call) for _ in range(int(threads))]
    for thread in started:
        thread.start()
    print("ready", flush=True)
    sys.stdin.readline()
    go.set()
    for thread in started:
        thread.join(60)
    source.close()
    database.close()
    print(json.dumps({"tokens": tokens, "errors": errors}), flush=True)


if __name__ == "__main__":
    main()
