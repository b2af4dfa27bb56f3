"""A process of callers of owners' credentials, for the refresh test across processes: ``THREADS`` threads on
one :class:`TokenSource`, released together when the test writes a line to stdin; prints the tokens as JSON.

    python tests/support/token_callers.py DATABASE_URL SCHEMA KEY TOKEN_URL CLIENT_ID CLIENT_SECRET THREADS [OWNERS CALLS]

Each thread asks once for acme's credential; with ``OWNERS`` and ``CALLS`` (the refresh bench), the threads
make ``CALLS`` calls between them, call ``i`` for owner ``shop-<i % OWNERS>``.
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
    owners, calls = (int(sys.argv[8]), int(sys.argv[9])) if len(sys.argv) > 9 else (0, int(threads))
    database = Database(url, schema=schema)
    source = TokenSource(database, Sealer(key), OAuthClient(token_url, client_id, client_secret))
    go = threading.Event()
    tokens: list[str] = []
    errors: list[str] = []

    def call(first: int) -> None:
        go.wait()
        for i in range(first, calls, int(threads)):
            try:
                tokens.append(source.credential("shops", f"shop-{i % owners}" if owners else "acme"))
            except Exception as exc:  # noqa: BLE001 - reported to the test
                errors.append(f"{type(exc).__name__}: {exc}")

    started = [threading.Thread(target=call, args=(n,)) for n in range(int(threads))]
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
