"""The pieces of the demo command: database URLs for Airflow, its environment, and stopping process groups."""

from __future__ import annotations

import json
import os
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
        "conn_type": "postgres",
        "host": "db.internal",
        "port": 6543,
        "login": "app",
        "password": "secret",
        "schema": "synclane",
    }


def test_airflow_lives_in_the_project_and_the_environment_wins_otherwise(tmp_path):
    env = airflow_environment(
        {"AIRFLOW_HOME": "/elsewhere", "AIRFLOW__CORE__PARALLELISM": "2", "PATH": "/bin"},
        home=tmp_path,
        data_url="postgresql://postgres@127.0.0.1/synclane",
        metadata_url="postgresql://postgres@127.0.0.1/synclane_airflow",
        port=9090,
        shop_url="http://127.0.0.1:9091",
    )
    assert env["AIRFLOW_HOME"] == str(tmp_path)
    assert env["AIRFLOW__CORE__PARALLELISM"] == "2"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(PROJECT / "dags") and (PROJECT / "dags").is_dir()
    assert (
        env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False" and env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    )
    assert (
        env["AIRFLOW__API__PORT"] == "9090"
        and env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://localhost:9090/execution/"
    )
    assert env["SYNCLANE_DEMO_SHOP_URL"] == "http://127.0.0.1:9091"
    # A demo on another port keeps off the first one's log servers, and serves this machine only.
    assert (env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"], env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"]) == (
        "9803",
        "9804",
    )
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__WORKERS__EXECUTION_API_RETRIES"] == "10"  # a task handed out before the API listens waits
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


def _wait_for_lines(log: Path, count: int) -> list[str]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        lines = log.read_text().split()
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    raise TimeoutError(f"{log} has fewer than {count} lines: {log.read_text()!r}")


# A parent whose child moves to a session of its own (as Airflow's task runners do) and outlives its parent.
ESCAPING_CHILD = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
    "print(os.getpid(), child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_stopping_a_service_ends_processes_that_left_its_process_group(tmp_path: Path):
    service = Service(
        "escaping", [sys.executable, "-c", ESCAPING_CHILD], env={}, log_path=tmp_path / "escaping.log"
    ).start()
    try:
        parent, child = map(int, _wait_for_lines(tmp_path / "escaping.log", 2))
        assert os.getpgid(child) != service.process.pid and set(service.members()) == {parent, child}
        service.stop(graceful=0.5, forced=5)  # the child is not in the group, so SIGTERM never reached it
        assert not _alive(child) and not _alive(parent) and service.members() == []
    finally:
        service.kill()


def test_killing_a_service_kills_every_process_it_started_at_once(tmp_path: Path):
    """As when the machine dies: the parent ignores SIGTERM and its child is in another group; both go."""
    script = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + ESCAPING_CHILD
    service = Service("doomed", [sys.executable, "-c", script], env={}, log_path=tmp_path / "doomed.log").start()
    bystander = Service(
        "bystander", [sys.executable, "-c", ESCAPING_CHILD], env={}, log_path=tmp_path / "bystander.log"
    ).start()
    try:
        parent, child = map(int, _wait_for_lines(tmp_path / "doomed.log", 2))
        others = set(map(int, _wait_for_lines(tmp_path / "bystander.log", 2)))
        assert sorted(service.kill(timeout=5)) == sorted([parent, child])
        assert service.process.wait(timeout=5) == -signal.SIGKILL and not _alive(child)
        assert set(bystander.members()) == others  # only what the killed service started
    finally:
        service.kill()
        bystander.kill()


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


LAUNCHER = (
    "import signal, sys, time\n"
    "from synclane_demo.local import stop_on_signals\n"
    "stop_on_signals()\n"
    "try:\n"
    "    print('ready', flush=True)\n"
    "    time.sleep(60)\n"
    "except KeyboardInterrupt:\n"
    "    print('stopping what was started', flush=True)\n"
    "    time.sleep(1.5)  # stopping takes a while; more signals arrive meanwhile\n"
    "    print('stopped', flush=True)\n"
)


def test_signals_during_the_stop_do_not_cut_it_short():
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], cwd=PROJECT, stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout.readline().strip() == "ready"
        launcher.send_signal(signal.SIGINT)
        assert launcher.stdout.readline().strip() == "stopping what was started"
        for again in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            launcher.send_signal(again)
        assert launcher.wait(timeout=20) == 0
        assert launcher.stdout.read().strip() == "stopped"
    finally:
        launcher.kill()
        launcher.wait()


def _signals_as_a_terminal_leaves_them() -> None:
    """In the child before it runs: SIGINT, SIGTERM and SIGHUP at their defaults, as a shell started from a terminal
    has them, whatever this test run inherited (under ``nohup`` or as a background job some are ignored, and a
    shell cannot trap a signal that was ignored when it started)."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_to_the_demo_script_reaches_the_launcher_which_stops_before_the_script_exits(sent, tmp_path):
    """``kill <scripts/demo>``: the script runs the launcher through ``run_forwarding_signals``; killed alone it
    would leave the launcher, and with it Airflow, running."""
    script = f'source scripts/setup.sh\nrun_forwarding_signals {sys.executable} -c "$LAUNCHER"\n'
    shell = subprocess.Popen(
        ["bash", "-c", script],
        cwd=PROJECT,
        env={**os.environ, "LAUNCHER": LAUNCHER},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_signals_as_a_terminal_leaves_them,
    )
    try:
        assert shell.stdout.readline().strip() == "ready"
        shell.send_signal(sent)  # to the script alone, not its process group
        assert shell.wait(timeout=20) == 0
        assert shell.stdout.read().split() == ["stopping", "what", "was", "started", "stopped"]
        assert not _group_has_live_members(shell.pid)
    finally:
        try:
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shell.wait()


@pytest.mark.parametrize("missing", ["SYNCLANE_DATABASE_URL"])
def test_the_launcher_refuses_to_start_without_a_database(missing, monkeypatch):
    from synclane_demo import local

    monkeypatch.delenv(missing, raising=False)
    with pytest.raises(SystemExit, match="scripts/demo"):
        local.main([])
