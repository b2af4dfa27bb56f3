"""What a schema holds, read from PostgreSQL's catalog, in a form two schemas can be compared by.

Everything a migration can create is read (tables with their columns, constraints, indexes with their
predicates, sequences, triggers, functions, views), so a later migration is covered without touching this
file. The schema's own name is replaced by ``<schema>`` wherever the catalog spells it out.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.rows import dict_row

CATALOG_QUERIES = {
    "tables": """
        SELECT c.relname AS name, c.relkind::text AS kind, c.relpersistence::text AS persistence,
               coalesce(c.reloptions, '{}') AS options
        FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        ORDER BY 1""",
    "columns": """
        SELECT c.relname AS table, a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type,
               a.attnotnull AS not_null, pg_get_expr(d.adbin, d.adrelid) AS default,
               a.attidentity::text AS identity, a.attgenerated::text AS generated,
               coalesce(co.collname, '') AS collation
        FROM pg_attribute AS a
        JOIN pg_class AS c ON c.oid = a.attrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation AS co ON co.oid = a.attcollation AND a.attcollation <> 100
        WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum""",
    "constraints": """
        SELECT c.relname AS table, con.conname AS name, con.contype::text AS type,
               pg_get_constraintdef(con.oid) AS definition
        FROM pg_constraint AS con
        JOIN pg_class AS c ON c.oid = con.conrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2""",
    "indexes": """
        SELECT i.tablename AS table, i.indexname AS name, i.indexdef AS definition, x.indisvalid AS valid
        FROM pg_indexes AS i
        JOIN pg_class AS c ON c.relname = i.indexname
        JOIN pg_namespace AS n ON n.oid = c.relnamespace AND n.nspname = i.schemaname
        JOIN pg_index AS x ON x.indexrelid = c.oid
        WHERE i.schemaname = %(schema)s
        ORDER BY 1, 2""",
    "sequences": """
        SELECT sequencename AS name, data_type::text AS type, start_value, min_value, max_value, increment_by,
               cycle, cache_size
        FROM pg_sequences WHERE schemaname = %(schema)s
        ORDER BY 1""",
    "triggers": """
        SELECT c.relname AS table, t.tgname AS name, pg_get_triggerdef(t.oid) AS definition
        FROM pg_trigger AS t
        JOIN pg_class AS c ON c.oid = t.tgrelid
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
        ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname AS name, pg_get_function_identity_arguments(p.oid) AS arguments,
               CASE WHEN p.prokind IN ('f', 'p') THEN pg_get_functiondef(p.oid) END AS definition
        FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2""",
    "views": """
        SELECT c.relname AS name, pg_get_viewdef(c.oid) AS definition
        FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND c.relkind IN ('v', 'm')
        ORDER BY 1""",
}


def snapshot(conn: psycopg.Connection, schema: str) -> dict[str, list[dict[str, Any]]]:
    """Every object of ``schema`` by kind, as rows of plain values, with the schema's name as ``<schema>``."""
    own_name = re.compile(
        r'(?<![\w"])(?:"' + re.escape(schema.replace('"', '""')) + r'"|' + re.escape(schema) + r")(?=\.)"
    )
    with conn.cursor(row_factory=dict_row) as cursor:
        found = {}
        for kind, query in CATALOG_QUERIES.items():
            rows = cursor.execute(query, {"schema": schema}).fetchall()
            found[kind] = [
                {
                    key: own_name.sub("<schema>", value) if isinstance(value, str) else value
                    for key, value in row.items()
                }
                for row in rows
            ]
    return found


def differences(left: dict[str, list[dict[str, Any]]], right: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What one snapshot has that the other lacks, one line each (empty: the same)."""
    lines = []
    for kind in CATALOG_QUERIES:
        ours = [repr(row) for row in left[kind]]
        theirs = [repr(row) for row in right[kind]]
        only_left = [f"{kind} only left:  {row}" for row in ours if row not in theirs]
        only_right = [f"{kind} only right: {row}" for row in theirs if row not in ours]
        lines += only_left + only_right
        if not (only_left or only_right) and ours != theirs:
            lines.append(f"{kind} in another order: {ours} != {theirs}")
    return lines
