"""The jobs table as an operator finds it, written by the tests the way an operator's UPDATE would.

After planning the operator tests' declaration (``operate_declaration.py``): ``acme-us``'s first load is
done; ``acme-eu`` runs its two slices side by side, one in each slot of the two-wide lane ``acme``;
``globex`` has a slice abandoned at cursor 50 with the shop's error (its pages landed 40 rows, updated 8 and
found 2 stale) and another running at cursor 75 on
``worker-host-1``, its heartbeat 12 seconds old; ``initech``'s products failed once.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from synclane_provider.core import Operations, SyncLane
from tests.support.operate_declaration import synclane as declared

BROKEN = "ShopError: page 50 of globex orders answers 500 (broken on purpose)"


def declaration(schema: str) -> SyncLane:
    return dataclasses.replace(declared, schema=schema)


def set_scene(database_url: str, schema: str) -> dict[str, int]:
    """Empty the table, plan, and put the jobs in the states above; returns the ids the tests look for."""
    synclane = declaration(schema)
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        exists = conn.execute("SELECT to_regclass(%s) AS t", [f'"{schema}".jobs']).fetchone()["t"]
        if exists:
            # the planner's coverage goes with the jobs, or it would not plan them again
            conn.execute(
                sql.SQL(
                    "TRUNCATE {0}.jobs, {0}.coverage, {0}.owners, {0}.resync_requests, {0}.credentials RESTART IDENTITY"
                ).format(sql.Identifier(schema))
            )
        with Operations(synclane, synclane.database(database_url)) as operations:
            operations.plan("shops")
        jobs = sql.SQL("{}.jobs").format(sql.Identifier(schema))

        def run(statement: str, params: list) -> list[dict]:
            return conn.execute(sql.SQL(statement).format(jobs=jobs), params).fetchall()

        now = conn.execute("SELECT now() AS now").fetchone()["now"]
        run(
            "UPDATE {jobs} SET status = 'completed', processed_count = 120, completed_at = %s "
            "WHERE owner = 'acme-us' RETURNING id",
            [now - timedelta(minutes=7)],
        )
        globex = [
            r["id"]
            for r in run(
                "SELECT id FROM {jobs} WHERE owner = 'globex' AND type = 'orders' AND mode = 'initial' ORDER BY id", []
            )
        ]
        run(
            "UPDATE {jobs} SET status = 'abandoned', cursor = '50', processed_count = 50, attempt_count = 5, "
            "inserted_count = 40, updated_count = 8, stale_count = 2, error = %s WHERE id = %s RETURNING id",
            [BROKEN, globex[0]],
        )
        run(
            "UPDATE {jobs} SET status = 'running', cursor = '75', processed_count = 75, attempt_count = 1, "
            "leased_by = 'worker-host-1:slot-0', lease_expires_at = %s, heartbeat_at = %s, started_at = %s "
            "WHERE id = %s RETURNING id",
            [now + timedelta(minutes=5), now - timedelta(seconds=12), now - timedelta(minutes=1), globex[1]],
        )
        acme_eu = [
            r["id"]
            for r in run(
                "SELECT id FROM {jobs} WHERE owner = 'acme-eu' AND type = 'orders' AND mode = 'initial' ORDER BY id",
                [],
            )
        ]
        for slot, job_id in enumerate(acme_eu):
            run(
                "UPDATE {jobs} SET status = 'running', cursor = %s, processed_count = 20, attempt_count = 1, "
                "lane_slot = %s, leased_by = %s, lease_expires_at = %s, heartbeat_at = %s, started_at = %s "
                "WHERE id = %s RETURNING id",
                [
                    "20",
                    slot,
                    f"worker-host-2:slot-{slot}",
                    now + timedelta(minutes=5),
                    now - timedelta(seconds=3),
                    now - timedelta(seconds=40),
                    job_id,
                ],
            )
        failed = run(
            "UPDATE {jobs} SET status = 'failed', attempt_count = 1, "
            "error = 'TimeoutError: the shop did not answer in 10s', next_run_at = %s "
            "WHERE owner = 'initech' AND type = 'products' RETURNING id",
            [now + timedelta(minutes=2)],
        )
        return {"abandoned": globex[0], "running": globex[1], "failed": failed[0]["id"], "acme_eu": acme_eu}


def job(database_url: str, schema: str, job_id: int) -> dict:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute(
            sql.SQL("SELECT * FROM {}.jobs WHERE id = %s").format(sql.Identifier(schema)), [job_id]
        ).fetchone()
