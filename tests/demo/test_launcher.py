"""The pieces of the demo command: database URLs for Airflow, its environment, and stopping process groups."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from synclane_demo.local import PROJECT, airflow_connection, airflow_environment, ensure_database, sqlalchemy_url
from synclane_demo.processes import Service, _group_has_live_members


def test_sqlalchemy_urls_for_tcp_and_for_a_unix_socket():
    assert sqlalchemy_url("postgresql://postgres@127.0.0.1:5432/synclane_airflow") == (
        "postgresql+psycopg://postgres@127.0.0.1:5432/synclane_airflow"
    )
    assert sqlalchemy_url("user=postgres password=p@ss host=/run/pg dbname=x") == (
        "postgresql+psycopg://postgres:p%40ss@/x?host=/run/pg&port=5432"
    )


def test_the_airflow_connection_names_the_same_database():
    connection = json.loads(airflow_connection("postgresql://app:secret@db.internal:6543/synclane"))
    assert connection == {
        "conn_type": "postgres", "host": "db.internal", "port": 6543, "login": "app", "password": "secret", "schema": "synclane"
    }


def test_airflow_lives_in_the_project_and_the_environment_wins_otherwise(tmp_path):
    env = airflow_environment(
        {"AIRFLOW_HOME": "/elsewhere", "AIRFLOW__CORE__PARALLELISM": "2", "PATH": "/bin"},
        home=tmp_path, data_url="postgresql://postgres@127.0.0.1/synclane",
        metadata_url="postgresql://postgres@127.0.0.1/synclane_airflow", port=9090, shop_url="http://127.0.0.1:9091",
    )
    assert env["AIRFLOW_HOME"] == str(tmp_path)
    assert env["AIRFLOW__CORE__PARALLELISM"] == "2"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(PROJECT / "dags") and (PROJECT / "dags").is_dir()
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False" and env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    assert env["AIRFLOW__API__PORT"] == "9090" and env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://localhost:9090/execution/"
    assert env["SYNCLANE_DEMO_SHOP_URL"] == "http://127.0.0.1:9091"
    assert (env["SYNCLANE_DECLARATION"], env["SYNCLANE_QUEUE"]) == ("synclane_demo.sync:synclane", "shops")
    assert json.loads(env["AIRFLOW_CONN_SYNCLANE_DEFAULT"])["schema"] == "synclane"


def test_databases_are_created_once(database_url):
    name = "synclane_demo_probe_db"
    try:
        ensure_database(database_url, name)
        ensure_database(database_url, name)  # exists: nothing to do
        with psycopg.connect(psycopg.conninfo.make_conninfo(database_url, dbname=name)) as conn:
            assert conn.execute("SELECT current_database()").fetchone()[0] == name
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_stopping_a_service_ends_its_whole_process_group(tmp_path: Path):
    """A parent that starts a child which ignores nothing: both are gone after stop, the child included."""
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    service = Service("probe", [sys.executable, "-c", script], env={}, log_path=tmp_path / "probe.log").start()
    deadline = time.monotonic() + 20
    while not (tmp_path / "probe.log").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group_has_live_members(service.process.pid)
    started = time.monotonic()
    assert service.stop(graceful=10) == -signal.SIGTERM
    assert time.monotonic() - started < 10
    assert not _group_has_live_members(service.process.pid)


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path):
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(600)\n"
    service = Service("stubborn", [sys.executable, "-c", script], env={}, log_path=tmp_path / "stubborn.log").start()
    deadline = time.monotonic() + 20
    while "ready" not in (tmp_path / "stubborn.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.stop(graceful=0.5, forced=5) == -signal.SIGKILL
    assert not service.running


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_ctrl_c_a_closed_terminal_or_a_kill_stop_the_launcher_even_when_started_in_the_background(sent):
    """A shell starts background commands with SIGINT ignored; the launcher still stops on Ctrl-C."""
    script = (
        "import signal, sys, time\n"
        "from synclane_demo.local import stop_on_signals\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job inherits it\n"
        "stop_on_signals()\n"
        "try:\n"
        "    print('ready', flush=True)  # inside the try: the signal may come the moment it is read\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    print('stopping what was started', flush=True)\n"
    )
    launcher = subprocess.Popen([sys.executable, "-c", script], cwd=PROJECT, stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout.readline().strip() == "ready"
        launcher.send_signal(sent)
        assert launcher.wait(timeout=20) == 0
        assert launcher.stdout.read().strip() == "stopping what was started"
    finally:
        launcher.kill()
        launcher.wait()


@pytest.mark.parametrize("missing", ["SYNCLANE_DATABASE_URL"])
def test_the_launcher_refuses_to_start_without_a_database(missing, monkeypatch):
    from synclane_demo import local

    monkeypatch.delenv(missing, raising=False)
    with pytest.raises(SystemExit, match="scripts/demo"):
        local.main([])
