"""For tests that run Airflow's real processes: its REST API, the jobs table sampled several times a
second, bounded waits, free ports, and an environment without the test session's own Airflow settings.

Used by the end-to-end demo test, the Celery scale-out test and ``bench/scaleout.py``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from synclane_demo.local import admin_password


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition, timeout: float, what: str, *, every: float = 0.5, explain=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{explain()}", pytrace=False)


class AirflowApi:
    """Airflow's REST API v2 with a bearer token from the simple auth manager's generated password."""

    def __init__(self, base: str, home: Path) -> None:
        self.base = base
        password = admin_password(home)
        token = self._call("POST", "/auth/token", {"username": "admin", "password": password}, auth=False)
        self.token = token["access_token"]

    def _call(self, method: str, path: str, body: dict | None = None, auth: bool = True) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def get(self, path: str, **query) -> dict:
        return self._call("GET", path + ("?" + urllib.parse.urlencode(query) if query else ""))

    def post(self, path: str, body: dict) -> dict:
        return self._call("POST", path, body)

    def patch(self, path: str, body: dict) -> dict:
        return self._call("PATCH", path, body)

    def runs(self, dag_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns", limit=100, order_by="-start_date")["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances")[
            "task_instances"
        ]

    def tries(self, dag_id: str, task_id: str) -> list[dict]:
        """Every try of every task instance of ``task_id`` (each mapped index) in every run of the DAG."""
        found = []
        for run in self.runs(dag_id):
            run_id = urllib.parse.quote(run["dag_run_id"], safe="")
            for ti in self.task_instances(dag_id, run["dag_run_id"]):
                if ti["task_id"] == task_id:
                    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{ti['map_index']}/tries"
                    found.extend(self.get(path)["task_instances"])
        return found


class Sampler(threading.Thread):
    """Reads every job row several times a second, so that short-lived states are observed.

    What made it stop early is raised by :meth:`stop`: a sampler that died quietly would make every
    check of its samples pass on too few of them.
    """

    def __init__(self, url: str, schema: str) -> None:
        super().__init__(name="sampler", daemon=True)
        self.url, self.schema = url, schema
        self.samples: list[list[dict]] = []
        self.error: BaseException | None = None
        self._done = threading.Event()

    def run(self) -> None:
        query = sql.SQL("SELECT * FROM {}.jobs ORDER BY id").format(sql.Identifier(self.schema))
        try:
            # Never prepared: the planner's migrations add columns to the table while it is sampled, and a
            # prepared statement's result type may not change ("cached plan must not change result type").
            with psycopg.connect(self.url, autocommit=True, row_factory=dict_row, prepare_threshold=None) as conn:
                while not self._done.wait(0.2):
                    try:
                        self.samples.append(conn.execute(query).fetchall())
                    except psycopg.errors.UndefinedTable:
                        continue
        except BaseException as exc:  # noqa: BLE001 - handed to the test by stop()
            self.error = exc

    def stop(self) -> None:
        self._done.set()
        if self.ident is None:
            return  # never started
        self.join(timeout=10)
        if self.is_alive():
            raise TimeoutError("the sampler did not stop within 10 s")
        if self.error is not None:
            raise RuntimeError("the sampler stopped early") from self.error


def connection_uri(conninfo: str) -> str:
    """The database of ``conninfo`` as the URI ``airflow connections add --conn-uri`` takes."""
    from urllib.parse import quote

    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    user = quote(str(parts.get("user") or "postgres"), safe="")
    password = f":{quote(str(parts['password']), safe='')}" if parts.get("password") else ""
    host = quote(str(parts.get("host") or "localhost"), safe="")  # a socket directory as %2Frun%2F…
    port = parts.get("port") or 5432
    return f"postgresql://{user}{password}@{host}:{port}/{quote(str(parts.get('dbname') or 'postgres'), safe='')}"


def clean_environment() -> dict[str, str]:
    """The test process's environment without Airflow's or the demo's settings (the test suite sets its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SYNCLANE_", "SHOP_", "_AIRFLOW"))}


def migrate_metadata_database(database_url: str, name: str, home: Path) -> None:
    """Create the PostgreSQL database ``name`` and migrate it as Airflow's metadata (``airflow db migrate``)."""
    import subprocess
    import sys

    from synclane_demo.local import sqlalchemy_url

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    env = {
        **clean_environment(),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sqlalchemy_url(
            psycopg.conninfo.make_conninfo(database_url, dbname=name)
        ),
    }
    migrated = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if migrated.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{migrated.stdout[-3000:]}\n{migrated.stderr[-3000:]}")


def copy_database(database_url: str, name: str, template: str) -> None:
    """Create the database ``name`` as a copy of ``template`` (which nobody may be connected to meanwhile)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
