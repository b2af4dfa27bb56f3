"""A real ``airflow api-server`` with the SyncLane plugin loaded, for the page's browser and auth tests.

Its own ``AIRFLOW_HOME`` and SQLite metadata database (a copy of the session's migrated one), the simple auth manager with two users -- ``admin``
(role admin) and ``viewer`` (role viewer, may read DAGs but not edit them) -- and ``[synclane]`` pointing at
the operator tests' declaration (``tests/support/operate_declaration.py``) in a schema of the test's own.
Started in a process group of its own and stopped with SIGINT to the group (then SIGTERM, SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet

from synclane_demo.local import airflow_connection
from synclane_demo.processes import Service, wait_for_http
from tests.support.airflow_env import copy_migrated_metadata
from tests.support.real_airflow import clean_environment, free_port

PROJECT = Path(__file__).resolve().parent.parent.parent
DECLARATION = "tests.support.operate_declaration:synclane"
USERS = {"admin": "admin", "viewer": "viewer"}
CREDENTIALS_KEY = Fernet.generate_key().decode()
"""The key the servers and commands started here encrypt owners' credentials with (tests open them with it)."""


def airflow_env(home: Path, *, database_url: str, schema: str, port: int | None = None) -> dict[str, str]:
    """Airflow's settings for the operator's tools: the page's server and ``airflow synclane`` commands."""
    env = clean_environment()
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{user}:{role}" for user, role in USERS.items()),
            "AIRFLOW__SYNCLANE__DECLARATION": DECLARATION,
            "AIRFLOW__SYNCLANE__CREDENTIALS_KEY": CREDENTIALS_KEY,
            "AIRFLOW_CONN_SYNCLANE_DEFAULT": airflow_connection(database_url),
            "SYNCLANE_OPERATE_SCHEMA": schema,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH")])),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)]),
        }
    )
    if port is not None:
        env.update(
            {
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
                "AIRFLOW__API__WORKERS": "1",
            }
        )
    (home / "dags").mkdir(parents=True, exist_ok=True)
    return env


def airflow(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The real ``airflow`` executable of this environment, run to its end."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), *args],
        env=env,
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class ApiServer:
    base: str
    home: Path
    service: Service

    def password(self, user: str) -> str:
        generated = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        return generated[user]

    def token(self, user: str) -> str:
        request = urllib.request.Request(
            self.base + "/auth/token",
            method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"username": user, "password": self.password(user)}).encode(),
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["access_token"]

    def call(self, method: str, path: str, *, token: str | None = None, body: dict | None = None) -> tuple[int, bytes]:
        """Status and body of one request (an error status is returned, not raised)."""
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def stop(self) -> None:
        """SIGINT to the server's process group (Airflow's own way down), then the service's SIGTERM/SIGKILL."""
        process = self.service.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.service.members():
                time.sleep(0.2)
        self.service.stop(graceful=10)


def start_api_server(home: Path, *, database_url: str, schema: str) -> ApiServer:
    port = free_port()
    env = airflow_env(home, database_url=database_url, schema=schema, port=port)
    copy_migrated_metadata(home / "airflow.db")  # the caller asked for the airflow_db fixture
    service = Service(
        "api-server",
        [str(Path(sys.executable).parent / "airflow"), "api-server", "--port", str(port)],
        env=env,
        log_path=home / "api-server.log",
        cwd=PROJECT,
    ).start()
    server = ApiServer(f"http://127.0.0.1:{port}", home, service)
    try:
        wait_for_http(f"{server.base}/api/v2/monitor/health", timeout=240, service=service)
    except BaseException:
        server.stop()
        raise
    return server
