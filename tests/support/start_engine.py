"""A process that starts SyncLane against one schema when told to, for the test of simultaneous start-ups.

    python tests/support/start_engine.py DATABASE_URL SCHEMA [MIGRATIONS_DIR ...]

Prints ``ready`` once everything is imported, waits for a line on stdin, then opens the engine's first
connection (which applies what is pending) and exits 0. Any failure is printed and exits non-zero.
"""

from __future__ import annotations

import sys
from pathlib import Path

from synclane_provider.core import Database
from synclane_provider.core.db.schema_versions import SHIPPED, load_migrations


def main() -> None:
    url, schema, *extra = sys.argv[1:]
    database = Database(url, schema=schema, migrations=load_migrations(SHIPPED, *map(Path, extra)))
    print("ready", flush=True)
    sys.stdin.readline()
    database.connect().close()


if __name__ == "__main__":
    main()
