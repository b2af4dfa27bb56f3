"""Refreshing many owners' rotating tokens from two processes at once: how many token requests, how many
revoked grants (there must be none), how long.

A real token endpoint (``tests/support/oauth_server.py``) issues access tokens that expire at once, rotates
the refresh token on every refresh and revokes a grant whose spent refresh token is sent again. Two processes
(``tests/support/token_callers.py``, a TokenSource each, nothing shared but the database) make ``--refreshes``
calls between them, each owner asked for by both: every call must refresh, one at a time per owner, each with
the refresh token the one before it stored. A refresh token sent twice would show as an ``invalid_grant``.

    .venv/bin/python bench/token_refresh.py
    .venv/bin/python bench/token_refresh.py --refreshes 2000 --owners 20 --threads 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

from cryptography.fernet import Fernet
from harness import ROOT, database_url, drop_schema, schema_name

from synclane_provider.core import Operations, SyncLane
from synclane_provider.core.credentials import Credentials, Sealer
from tests.support.helpers import declare, owners, products
from tests.support.oauth_server import OAuthServer

PROCESSES = 2


def connect_owners(url: str, schema: str, key: str, server: OAuthServer, count: int) -> None:
    """Each owner connected once, its access token already expired."""
    declaration: SyncLane = declare(schema, products(), owner_source=owners(*[f"shop-{n}" for n in range(count)]))
    expired = datetime.now(timezone.utc) - timedelta(minutes=1)
    with Operations(declaration, declaration.database(url), sealer=Sealer(key)) as ops:
        for n in range(count):
            access, refresh = server.grant()
            ops.set_credentials(
                "shops",
                f"shop-{n}",
                Credentials("oauth", access_token=access, refresh_token=refresh, expires_at=expired),
            )


def run(url: str, schema: str, *, refreshes: int, owner_count: int, threads: int) -> dict[str, float]:
    key = Fernet.generate_key().decode()
    with OAuthServer(lifetime=0) as server:
        connect_owners(url, schema, key, server, owner_count)
        program = ROOT / "tests" / "support" / "token_callers.py"
        share = refreshes // PROCESSES
        arguments = [url, schema, key, server.token_url, server.client_id, server.client_secret, str(threads)]
        callers = [
            subprocess.Popen(
                [sys.executable, str(program), *arguments, str(owner_count), str(share)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            for _ in range(PROCESSES)
        ]
        for caller in callers:
            assert caller.stdout is not None and caller.stdout.readline().strip() == "ready"
        started = time.monotonic()
        answers = [caller.communicate("go\n", timeout=3600)[0] for caller in callers]
        seconds = time.monotonic() - started
        results = [json.loads(answer) for answer in answers]
        tokens = [token for result in results for token in result["tokens"]]
        errors = [error for result in results for error in result["errors"]]
        return {
            "calls": PROCESSES * share,
            "tokens": len(tokens),
            "distinct_tokens": len(set(tokens)),
            "errors": len(errors),
            "token_requests": server.token_requests,
            "invalid_grants": server.invalid_grants,
            "seconds": seconds,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--refreshes", type=int, default=10_000, help="calls between the two processes")
    parser.add_argument("--owners", type=int, default=50)
    parser.add_argument("--threads", type=int, default=16, help="threads in each process")
    args = parser.parse_args()
    url = database_url()
    schema = schema_name("token_refresh")
    try:
        result = run(url, schema, refreshes=args.refreshes, owner_count=args.owners, threads=args.threads)
    finally:
        drop_schema(url, schema)
    print(
        f"{result['calls']} refreshes of {args.owners} owners from {PROCESSES} processes x {args.threads} threads: "
        f"{result['token_requests']} token requests, {result['invalid_grants']} invalid_grants, "
        f"{result['errors']} errors, {result['distinct_tokens']} distinct access tokens handed out, "
        f"in {result['seconds']:.1f} s ({result['calls'] / result['seconds']:.0f} refreshes/s)"
    )


if __name__ == "__main__":
    main()
