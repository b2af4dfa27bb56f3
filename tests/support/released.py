"""Tables as earlier releases made them, for upgrade tests."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

SCHEMA_0_1_0 = Path(__file__).with_name("schema_0_1_0.sql")
"""0.1.0's schema.sql, verbatim (git show b3fd140:synclane_provider/core/schema.sql)."""

_QUALIFIED_0_1_0 = re.compile(r"\bsynclane(?=\.jobs\b|;|\s*$)", re.MULTILINE)
"""How 0.1.0 put another schema name into its file (its render_schema)."""


def install_0_1_0(conn: psycopg.Connection, schema: str) -> None:
    """Create the jobs table in ``schema`` exactly as SyncLane 0.1.0 did at start-up."""
    quoted = psycopg.sql.Identifier(schema).as_string(conn)
    text = _QUALIFIED_0_1_0.sub(lambda _: quoted, SCHEMA_0_1_0.read_text(encoding="utf-8"))
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('synclane.create_schema'))")
        conn.execute(text.encode())
